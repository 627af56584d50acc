//! `fabperf report --gate EXPR`: any text through the gate parser. It never panics, an
//! error's column lies within the text (or just past its end), and an accepted gate
//! parses again from its own text to the same gate.
#![no_main]

use fabperf_report::gate::parse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    match parse(s) {
        Ok(g) => {
            let again = parse(&g.text).expect("an accepted gate's own text parses");
            assert_eq!(again, g);
        }
        Err(e) => {
            assert!(e.col >= 1 && e.col <= s.chars().count() + 1, "{e}");
            let _ = e.to_string();
        }
    }
});
