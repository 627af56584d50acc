//! The driver's statistics as the `SIOCETHTOOL` ioctl returns them: a block of 32-byte names
//! and a block of u64 values, as a hostile or buggy driver could fill them. The first two
//! bytes say where the names end (in 32-byte units); the rest is split there.
#![no_main]

use fabperf_detect::ethtool::{parse_stats, ETH_GSTRING_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let n = u16::from_le_bytes([data[0], data[1]]) as usize;
    let rest = &data[2..];
    let split = (n * ETH_GSTRING_LEN).min(rest.len());
    let (names, values) = rest.split_at(split);
    if let Ok(m) = parse_stats(names, values) {
        assert!(m.len() <= n);
        for k in m.keys() {
            assert!(!k.is_empty() && k.len() <= ETH_GSTRING_LEN);
            assert!(k.bytes().all(|b| b.is_ascii_graphic()));
        }
    }
    // The same bytes as whole arrays of either kind.
    let _ = parse_stats(rest, rest);
});
