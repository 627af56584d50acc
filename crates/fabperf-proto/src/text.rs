//! Text that came from a peer (test names, error messages, device names)
//! is escaped before it reaches a log or a terminal: a peer must not be
//! able to forge log lines with a newline, drive the terminal with ANSI
//! escape sequences, or reorder what is shown with bidirectional controls.
//! One function (fabperf-results' escaping module), used by the agent's
//! log, the client's error output and the client's tables.

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

pub use fabperf_results::escape::{needs_escape, MAX_CHARS};

/// `s` with control characters (newlines, ESC, C1 controls, DEL) and
/// bidirectional controls written as visible escapes (`\n`, `\x1b`,
/// `\u{202e}`), cut to [`MAX_CHARS`] characters: the one rule of
/// [`fabperf_results::escape::terminal`].
pub fn escape(s: &str) -> String {
    fabperf_results::escape::terminal(s)
}
