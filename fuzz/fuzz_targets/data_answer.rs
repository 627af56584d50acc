//! What a client reads about its data: the agent's answer to a data
//! connection's cookie (`FBPA`, or `FBPR` + length + JSON refusal), a
//! refusal datagram, and what the agent's UDP door parses (a hello). The
//! bytes are a peer's choice: bounded, never a panic, and a decoded refusal
//! encodes again within its bounds.
#![no_main]

use fabperf_proto::data::{parse_udp_hello, DataRefusal, MAX_REFUSAL, UDP_HELLO_LEN};
use fabperf_proto::read_data_answer;
use libfuzzer_sys::fuzz_target;
use std::io::Cursor;

fuzz_target!(|data: &[u8]| {
    let _ = read_data_answer(&mut Cursor::new(data), None);
    if let Some((_, r)) = DataRefusal::decode_udp(data) {
        assert!(r.encode_udp([0; 4]).len() <= UDP_HELLO_LEN);
        assert!(r.encode_tcp().len() <= 6 + MAX_REFUSAL);
    }
    if let Ok(r) = DataRefusal::decode_body(data) {
        let _ = r.who();
    }
    let _ = parse_udp_hello(data);
});
