//! The load generator's HTTP/1.x response parser fed with what a server
//! chose, in pieces of every size (as reads deliver them): no panic, never
//! more consumed than given, and the same responses whatever the pieces.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.is_empty() {
        return;
    }
    // First byte: the piece size and whether the request was HEAD.
    let step = usize::from(data[0] & 0x7f).max(1);
    let head = data[0] & 0x80 != 0;
    let input = &data[1..];
    let whole = fabperf_http::parse::parse_all(input, input.len().max(1), head);
    let pieces = fabperf_http::parse::parse_all(input, step, head);
    match (&whole, &pieces) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        // Pieces may fail earlier on a bound than the whole input does
        // not, never the other way round for complete responses.
        _ => {}
    }
    // The target path segment of a request, as the server parses it.
    if let Ok(s) = std::str::from_utf8(input) {
        let _ = fabperf_http::server::parse_size_segment(s);
        let _ = fabperf_http::server::route(&hyper_method(data[0]), s, u64::MAX);
    }
});

fn hyper_method(b: u8) -> fabperf_http::server::Method {
    use fabperf_http::server::Method;
    match b % 4 {
        0 => Method::GET,
        1 => Method::HEAD,
        2 => Method::PUT,
        _ => Method::POST,
    }
}
