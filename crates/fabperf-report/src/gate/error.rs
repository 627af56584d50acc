//! A gate that could not be parsed, shown with a caret under its column.

use std::fmt;

/// A gate that could not be parsed: the column (1-based, in characters)
/// where it went wrong and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateError {
    pub gate: String,
    pub col: usize,
    pub msg: String,
}

impl fmt::Display for GateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: String = self
            .gate
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(200)
            .collect();
        writeln!(f, "column {}: {}", self.col, self.msg)?;
        writeln!(f, "  {shown}")?;
        write!(f, "  {}^", " ".repeat(self.col.saturating_sub(1).min(200)))
    }
}

impl std::error::Error for GateError {}
