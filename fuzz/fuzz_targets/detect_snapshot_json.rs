//! The JSON inputs of a `--root` snapshot (`ip-addr.json`, `ip-route.json`,
//! `fabperf-tc.json`) and of `fabperf k8s` / `doctor --inventory` (a `detect --json` file).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = fabperf_detect::ipstate::parse_addr_json(&text);
    let _ = fabperf_detect::ipstate::parse_route_json(&text);
    if let Ok(objs) = fabperf_detect::tc::parse_tc_json(&text) {
        for o in &objs {
            let _ = fabperf_detect::tc::egress_limit(&objs, &o.ifname);
        }
    }
    if let Ok(inv) = fabperf_detect::Inventory::from_json_str(&text, "fuzz") {
        let _ = fabperf_detect::doctor::diagnose(&inv);
        let _ = fabperf_detect::render::inventory_text(&inv);
    }
});
