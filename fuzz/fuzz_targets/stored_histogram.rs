//! A stored latency histogram (`lat_hist`: base64 of HdrHistogram's V2
//! encoding, deflate-compressed or plain) as `fabperf report` decodes it. The
//! bytes are taken as the encoding itself (base64-encoded here, so the fuzzer
//! works on the compressed stream and the V2 header directly) and, when they
//! are text, as the column's text. Nothing panics or allocates beyond the
//! bounds; a histogram that decodes gives the same samples both ways it can
//! be read (whole, and bucket by bucket).
#![no_main]

use base64::Engine;
use fabperf_report::hist::{decode, decode_counts};
use libfuzzer_sys::fuzz_target;

fn check(text: &str) {
    let counts = decode_counts(text);
    let whole = decode(text);
    if let (Ok(c), Ok(h)) = (&counts, &whole) {
        let n = c.iter().fold(0u64, |t, &(_, n)| t.saturating_add(n));
        assert_eq!(n, h.len(), "bucket counts and the histogram disagree");
        assert!(c.windows(2).all(|w| w[0].0 < w[1].0), "buckets out of order");
    }
}

fuzz_target!(|data: &[u8]| {
    check(&base64::engine::general_purpose::STANDARD.encode(data));
    if let Ok(s) = std::str::from_utf8(data) {
        check(s);
    }
});
