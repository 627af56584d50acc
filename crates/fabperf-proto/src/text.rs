//! Text that came from a peer (test names, error messages, device names)
//! is escaped before it reaches a log or a terminal: a peer must not be
//! able to forge log lines with a newline, drive the terminal with ANSI
//! escape sequences, or reorder what is shown with bidirectional controls.
//! One function, used by the agent's log, the client's error output and
//! the client's tables.

use std::fmt::Write;

/// The 1-based line and column (in characters) of byte `offset` of
/// `text`, for FILE:LINE:COL messages about plans and profiles; an offset
/// past the end or inside a character is moved back to a boundary.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// Characters kept of one piece of peer text; the rest is summarised.
pub const MAX_CHARS: usize = 4096;

fn needs_escape(c: char) -> bool {
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

/// `s` with control characters (newlines, ESC, C1 controls, DEL) and
/// bidirectional controls written as visible escapes (`\n`, `\x1b`,
/// `\u{202e}`), cut to [`MAX_CHARS`] characters.
pub fn escape(s: &str) -> String {
    if s.len() <= MAX_CHARS && !s.chars().any(needs_escape) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len().min(MAX_CHARS + 64));
    for (n, (i, c)) in s.char_indices().enumerate() {
        if n == MAX_CHARS {
            let _ = write!(out, "… ({} more bytes)", s.len() - i);
            break;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) && (c as u32) < 0x100 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:04x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_unchanged() {
        for s in ["tcp-bw", "agent busy — retry", "größe 64 KiB", ""] {
            assert_eq!(escape(s), s);
        }
    }

    #[test]
    fn controls_become_visible() {
        assert_eq!(escape("a\nb"), "a\\nb");
        assert_eq!(escape("\x1b[31mred"), "\\x1b[31mred");
        assert_eq!(escape("x\r\ty\x7f"), "x\\r\\ty\\x7f");
        assert_eq!(escape("\u{9b}2J"), "\\x9b2J");
        assert_eq!(escape("abc\u{202e}fed"), "abc\\u{202e}fed");
        assert_eq!(escape("nul\0"), "nul\\x00");
        for s in ["\n", "\x1b", "\u{2028}", "\u{2066}"] {
            assert!(!escape(s).chars().any(needs_escape), "{s:?}");
        }
    }

    #[test]
    fn long_text_is_cut() {
        let s = "x".repeat(MAX_CHARS + 100);
        let e = escape(&s);
        assert!(e.starts_with(&"x".repeat(MAX_CHARS)));
        assert!(e.ends_with("(100 more bytes)"), "{}", &e[MAX_CHARS..]);
    }
}
