//! The control protocol's decoder: preamble, length-prefixed frames (with
//! the agent's pre-authentication limit and the full one), message JSON.
#![no_main]

use fabperf_proto::{read_frame, read_preamble, MAX_FRAME, PRE_AUTH_FRAME};
use libfuzzer_sys::fuzz_target;
use std::io::Cursor;

fuzz_target!(|data: &[u8]| {
    let _ = read_preamble(&mut Cursor::new(data), None);
    for max in [PRE_AUTH_FRAME, MAX_FRAME] {
        let mut c = Cursor::new(data);
        // A stream of frames, as a connection delivers them.
        while let Ok(m) = read_frame(&mut c, max, None, "fuzz") {
            // What decodes must encode again.
            fabperf_proto::encode_frame(&m).expect("a decoded message encodes");
        }
    }
    let _ = fabperf_proto::decode_body(data);
});
