//! The one escaping rule, per sink: whatever text comes in, what goes out
//! to a terminal holds no control or bidirectional character (a block keeps
//! only its line breaks), a CSV cell is never a formula, Markdown opens no
//! tag, link or extra column, and a code fence is longer than any backtick
//! run it wraps.
#![no_main]

use fabperf_results::escape::{self, needs_escape};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    let t = escape::terminal(&s);
    assert!(!t.chars().any(needs_escape), "{t:?}");
    let b = escape::terminal_block(&s);
    assert!(!b.chars().any(|c| c != '\n' && needs_escape(c)), "{b:?}");
    assert_eq!(b.matches('\n').count(), s.matches('\n').count());
    let c = escape::csv_field(&s);
    assert!(!c.chars().any(needs_escape), "{c:?}");
    assert!(
        // A lone "-" is the no-value placeholder; no spreadsheet reads it
        // as a formula.
        !c.starts_with(['=', '+', '-', '@']) || c == "-" || c.trim().parse::<f64>().is_ok(),
        "a formula: {c:?}"
    );
    assert_eq!(escape::csv_field(&c), c, "idempotent");
    let m = escape::markdown(&s);
    assert!(!m.chars().any(needs_escape), "{m:?}");
    let mut prev: Option<char> = None;
    let mut it = m.chars().peekable();
    while let Some(ch) = it.next() {
        let escaped = prev == Some('\\');
        if matches!(ch, '[' | '`' | '|') {
            assert!(escaped, "unescaped {ch:?} in {m:?}");
        }
        if ch == '<' {
            assert!(
                !it.peek().is_some_and(|n| n.is_ascii_alphabetic() || matches!(n, '/' | '!' | '?')),
                "a tag could open in {m:?}"
            );
        }
        // A backslash escapes the next character only when it is itself
        // not escaped.
        prev = if ch == '\\' && escaped { None } else { Some(ch) };
    }
    let fence = escape::markdown_fence(&s);
    let longest = s
        .split(|c| c != '`')
        .map(str::len)
        .max()
        .unwrap_or(0);
    assert!(fence.len() > longest && fence.len() >= 3);
});
