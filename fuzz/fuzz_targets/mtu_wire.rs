//! `fabperf mtu`'s probe datagrams (what the agent and the client parse from
//! a peer), ICMP echo replies as a raw socket delivers them, and the MTU
//! results file `fabperf doctor --mtu-results` reads.
#![no_main]

use fabperf_mtu::wire::{self, Datagram};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(d) = wire::parse(data) {
        assert!(data.len() >= wire::HEADER);
        if let Datagram::Probe { len, .. } | Datagram::Reply { got: len, .. } = d {
            assert_eq!(len, data.len());
        }
    }
    for (raw, v6) in [(true, false), (false, false), (true, true)] {
        if let Some(n) = fabperf_mtu::sys::echo_reply(data, raw, v6, 0x1234, 7) {
            assert!(n >= 8 && n <= data.len());
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(r) = fabperf_mtu::doctor::parse_results(text) {
            let inv = fabperf_detect::Inventory::default();
            for f in fabperf_mtu::doctor::findings(&r, &inv, std::path::Path::new("fuzz.json")) {
                assert_eq!(f.id, "mtu-mismatch");
                assert!(!f.summary.chars().any(char::is_control));
            }
        }
    }
});
