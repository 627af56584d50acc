//! What fabperf-tune reads from outside: a profile's TOML (from a plan's
//! directory), a profile as JSON (from a runner), a journal (from disk after a
//! crash), and netlink replies (ethtool bitsets, links, addresses).
#![no_main]

use fabperf_tune::journal::Journal;
use fabperf_tune::{ethtool, link, nl, parse_profile, Profile};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(p) = parse_profile(text, "fuzz.toml") {
            // What the parser accepts, the agent's check accepts too.
            assert!(p.validate().is_ok(), "{:?}", p.validate());
        }
    }
    if let Ok(p) = serde_json::from_slice::<Profile>(data) {
        let _ = p.validate();
        let _ = p.hash();
    }
    if let Ok(j) = serde_json::from_slice::<Journal>(data) {
        let _ = j.check();
    }
    let seq = data
        .get(8..12)
        .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .unwrap_or(0);
    let _ = nl::parse_buffer(data, seq);
    let _ = nl::parse_attrs(data);
    let _ = ethtool::parse_features(data);
    let _ = link::parse_link(data);
    let _ = link::parse_addr(data);
});
