//! The RDMA tests' requests (parameters plus the client's endpoint) as the
//! agent decodes and checks them from a client's `Start`.
#![no_main]

use fabperf_rdma::msg::Request;
use fabperf_rdma::{BwParams, LatParams};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    if let Ok(r) = serde_json::from_value::<Request<BwParams>>(v.clone()) {
        if r.params.validate().is_ok() {
            let _ = r.params.effective_cq_mod(r.params.max_size());
            let _ = r.params.cq_mod_label();
            let _ = r.params.warmup_secs();
        }
        let _ = r.client.describe();
    }
    if let Ok(r) = serde_json::from_value::<Request<LatParams>>(v) {
        if r.params.validate().is_ok() {
            let _ = r.params.warmup_secs();
        }
        let _ = r.client.describe();
    }
});
