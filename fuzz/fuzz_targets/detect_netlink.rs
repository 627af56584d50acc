//! rtnetlink bytes as the detector receives them: one `recv` buffer of netlink messages
//! (links, addresses, routes, qdiscs, classes), through netlink-packet-route and fabperf's
//! conversion to its model, then the tc options decoder on the same bytes.
#![no_main]

use fabperf_detect::netlink::{parse_messages, resolve};
use fabperf_detect::tc::{decode_options, egress_limit, TcHandle, TcObject};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Use the first message's own sequence number, so the messages are not all skipped.
    let seq = data
        .get(8..12)
        .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .unwrap_or(0);
    if let Ok(p) = parse_messages(data, seq) {
        let d = resolve(p.items);
        for name in d.links.values() {
            let _ = egress_limit(&d.tc, name);
        }
    }
    for (kind, class) in [
        ("tbf", false),
        ("htb", false),
        ("htb", true),
        ("netem", false),
    ] {
        let mut o = TcObject {
            ifindex: 1,
            ifname: "x".into(),
            kind: kind.into(),
            class,
            handle: TcHandle { major: 1, minor: 0 },
            parent: TcHandle::ROOT,
            rate_bps: None,
            ceil_bps: None,
            default_class: None,
        };
        decode_options(&mut o, data);
    }
});
