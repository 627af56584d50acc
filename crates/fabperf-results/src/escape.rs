//! One escaping rule for every sink of text fabperf did not write itself:
//! what a peer sent (error messages, device and interface names, record
//! warnings), what a results store holds (it may be shared or tampered
//! with), what a plan or profile quotes back. Applied where the text is
//! written, per sink:
//!
//! - [`terminal`]: a terminal or a log line. Control characters (newlines,
//!   ESC, BEL, C1 controls, DEL) and the bidirectional controls are written
//!   as visible escapes (`\n`, `\x1b`, `\u{202e}`), so a peer cannot forge
//!   lines, drive the terminal or reorder what is shown; long text is cut.
//! - [`terminal_block`]: a whole rendered block whose own line breaks are
//!   kept (every piece of foreign text in it went through [`terminal`]).
//! - [`csv_field`]: a CSV cell: [`terminal`], then a cell a spreadsheet
//!   would run as a formula (`=`, `+`, `-`, `@` first, and not a number)
//!   gets a leading `'`.
//! - [`markdown`]: Markdown text or a Markdown table cell: [`terminal`],
//!   then what starts HTML, a link, a code span or a table column (`<`
//!   before a letter, `/`, `!` or `?`; `[`, `` ` ``, `|`, `\`) is escaped,
//!   so stored text renders as the text it is.

use std::borrow::Cow;
use std::fmt::Write;

/// Characters kept of one piece of foreign text; the rest is summarised.
pub const MAX_CHARS: usize = 4096;

/// Control and bidirectional-control characters: shown escaped.
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if (c as u32) < 0x100 => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c => {
            let _ = write!(out, "\\u{{{:04x}}}", c as u32);
        }
    }
}

/// `s` with control characters and bidirectional controls written as
/// visible escapes, cut to [`MAX_CHARS`] characters.
pub fn terminal(s: &str) -> String {
    terminal_cut(s, MAX_CHARS)
}

/// As [`terminal`], cut to `max` characters (a count of the bytes left
/// out ends a cut text).
pub fn terminal_cut(s: &str, max: usize) -> String {
    if s.len() <= max && !s.chars().any(needs_escape) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len().min(max + 64));
    for (n, (i, c)) in s.char_indices().enumerate() {
        if n == max {
            let _ = write!(out, "… ({} more bytes)", s.len() - i);
            break;
        }
        if needs_escape(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    out
}

/// A rendered block for a terminal: its line breaks kept, every other
/// control or bidirectional character escaped as by [`terminal`] (no cut).
pub fn terminal_block(s: &str) -> String {
    if !s.chars().any(|c| c != '\n' && needs_escape(c)) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if c != '\n' && needs_escape(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    out
}

/// A CSV cell: escaped as for a terminal, and a cell a spreadsheet would
/// evaluate (first character `=`, `+`, `-` or `@`, and the cell not a
/// number, nor a lone `-` for "none") starts with `'`, which makes it text.
pub fn csv_field(s: &str) -> Cow<'_, str> {
    let t = if s.len() <= MAX_CHARS && !s.chars().any(needs_escape) {
        Cow::Borrowed(s)
    } else {
        Cow::Owned(terminal(s))
    };
    let formula =
        t.starts_with(['=', '+', '-', '@']) && t != "-" && t.trim().parse::<f64>().is_err();
    if formula {
        Cow::Owned(format!("'{t}"))
    } else {
        t
    }
}

/// Markdown text (a paragraph, a list item or a table cell): escaped as for
/// a terminal, then `\`, `` ` ``, `[` and `|` backslash-escaped (no link,
/// link definition, code span or extra column can start: a `]` closes
/// nothing without a `[`), and a `<` that could start a tag, a comment or
/// an autolink (before a letter, `/`, `!` or `?`) written as `&lt;`.
pub fn markdown(s: &str) -> String {
    let t = terminal(s);
    let mut out = String::with_capacity(t.len() + 8);
    let mut it = t.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '\\' | '`' | '[' | '|' => {
                out.push('\\');
                out.push(c);
            }
            '<' if it
                .peek()
                .is_some_and(|n| n.is_ascii_alphabetic() || matches!(n, '/' | '!' | '?')) =>
            {
                out.push_str("&lt;")
            }
            c => out.push(c),
        }
    }
    out
}

/// A code fence longer than any run of backticks in `body`, so the body
/// cannot close it.
pub fn markdown_fence(body: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in body.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    "`".repeat((longest + 1).max(3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_unchanged() {
        for s in ["tcp-bw", "agent busy — retry", "größe 64 KiB", ""] {
            assert_eq!(terminal(s), s);
            assert_eq!(terminal_block(s), s);
            assert_eq!(csv_field(s), s);
        }
        assert_eq!(markdown("fp-node1 on host"), "fp-node1 on host");
    }

    #[test]
    fn controls_become_visible() {
        assert_eq!(terminal("a\nb"), "a\\nb");
        assert_eq!(terminal("\x1b[31mred"), "\\x1b[31mred");
        assert_eq!(terminal("x\r\ty\x7f"), "x\\r\\ty\\x7f");
        assert_eq!(terminal("\u{9b}2J"), "\\x9b2J");
        assert_eq!(terminal("abc\u{202e}fed"), "abc\\u{202e}fed");
        assert_eq!(terminal("nul\0"), "nul\\x00");
        assert_eq!(
            terminal("\x1b]8;;http://x\x07link"),
            "\\x1b]8;;http://x\\x07link"
        );
        for s in ["\n", "\x1b", "\u{2028}", "\u{2066}"] {
            assert!(!terminal(s).chars().any(needs_escape), "{s:?}");
        }
        assert_eq!(
            terminal_block("a\nb\x1bc\u{202e}\n"),
            "a\nb\\x1bc\\u{202e}\n"
        );
    }

    #[test]
    fn long_text_is_cut() {
        let s = "x".repeat(MAX_CHARS + 100);
        let e = terminal(&s);
        assert!(e.starts_with(&"x".repeat(MAX_CHARS)));
        assert!(e.ends_with("(100 more bytes)"), "{}", &e[MAX_CHARS..]);
        assert_eq!(terminal_cut("abcdef", 3), "abc… (3 more bytes)");
    }

    #[test]
    fn csv_formulas_are_neutralised_numbers_are_not() {
        assert_eq!(
            csv_field("=HYPERLINK(\"http://x\",\"y\")"),
            "'=HYPERLINK(\"http://x\",\"y\")"
        );
        assert_eq!(csv_field("+cmd|' /C calc'!A0"), "'+cmd|' /C calc'!A0");
        assert_eq!(csv_field("@SUM(1)"), "'@SUM(1)");
        assert_eq!(csv_field("-2+3"), "'-2+3");
        assert_eq!(csv_field("-1.5"), "-1.5");
        assert_eq!(csv_field("+3"), "+3");
        assert_eq!(csv_field("1e-3"), "1e-3");
        assert_eq!(csv_field("a\x1b[2Jb\x07"), "a\\x1b[2Jb\\x07");
        assert_eq!(csv_field("\t=1"), "\\t=1");
        // Idempotent: a neutralised cell stays as it is.
        assert_eq!(csv_field(&csv_field("=1+1")), "'=1+1");
    }

    #[test]
    fn markdown_cannot_carry_html_links_or_columns() {
        assert_eq!(
            markdown("<img src=x onerror=alert(1)>"),
            "&lt;img src=x onerror=alert(1)>"
        );
        assert_eq!(markdown("n1 -> n2"), "n1 -> n2");
        assert_eq!(markdown("p99 <= 60us"), "p99 <= 60us");
        assert_eq!(markdown("</b><!-- x"), "&lt;/b>&lt;!-- x");
        assert_eq!(markdown("<http://x>"), "&lt;http://x>");
        assert_eq!(markdown("a|b"), "a\\|b");
        assert_eq!(markdown("[x](javascript:y)"), "\\[x](javascript:y)");
        assert_eq!(markdown("[1]: javascript:y"), "\\[1]: javascript:y");
        assert_eq!(markdown("`code`"), "\\`code\\`");
        assert_eq!(markdown("a\n== Verdicts"), "a\\\\n== Verdicts");
        assert_eq!(markdown_fence("no ticks"), "```");
        assert_eq!(markdown_fence("a ```` b"), "`````");
    }
}
