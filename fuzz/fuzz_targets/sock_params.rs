//! The socket tests' request parameters as the agent decodes and checks
//! them from a client's `Start`.
#![no_main]

use fabperf_proto::decode_params;
use fabperf_sock::{TcpBwParams, TcpLatParams, UdpBwParams, UdpLatParams};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    if let Ok(p) = decode_params::<TcpBwParams>("tcp-bw", v.clone()) {
        let _ = p.validate();
    }
    if let Ok(p) = decode_params::<TcpLatParams>("tcp-lat", v.clone()) {
        let _ = p.validate();
    }
    if let Ok(p) = decode_params::<UdpBwParams>("udp-bw", v.clone()) {
        let _ = p.validate();
    }
    if let Ok(p) = decode_params::<UdpLatParams>("udp-lat", v) {
        let _ = p.validate();
    }
});
