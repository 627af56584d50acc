//! The gate lexer: characters to words, numbers with their units,
//! comparisons and the few punctuation marks, each with its column.

use super::error::GateError;
use super::syntax::Cmp;

/// Longest gate accepted.
pub const MAX_GATE_LEN: usize = 1024;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    Word(String),
    Num(f64, String),
    Op(Cmp),
    Colon,
    Star,
    Percent,
}

pub(super) fn lex(src: &str) -> Result<Vec<(Tok, usize, usize)>, GateError> {
    let err = |col: usize, msg: String| GateError {
        gate: src.to_string(),
        col,
        msg,
    };
    let chars: Vec<char> = src.chars().collect();
    if chars.len() > MAX_GATE_LEN {
        return Err(err(
            MAX_GATE_LEN + 1,
            format!("a gate is at most {MAX_GATE_LEN} characters"),
        ));
    }
    let mut out = Vec::new();
    let mut i = 0;
    let is_word = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/');
    while i < chars.len() {
        let c = chars[i];
        let col = i + 1;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && is_word(chars[i]) {
                i += 1;
            }
            out.push((Tok::Word(chars[start..i].iter().collect()), col, i - start));
            continue;
        }
        if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            // An exponent: e, optional sign, digits.
            if i < chars.len() && (chars[i] == 'e' || chars[i] == 'E') {
                let mut j = i + 1;
                if j < chars.len() && (chars[j] == '+' || chars[j] == '-') {
                    j += 1;
                }
                if j < chars.len() && chars[j].is_ascii_digit() {
                    while j < chars.len() && chars[j].is_ascii_digit() {
                        j += 1;
                    }
                    i = j;
                }
            }
            let num: String = chars[start..i].iter().collect();
            let v: f64 = num
                .parse()
                .map_err(|_| err(col, format!("`{num}` is not a number")))?;
            if !v.is_finite() {
                return Err(err(col, format!("`{num}` is not a finite number")));
            }
            let ustart = i;
            while i < chars.len()
                && (chars[i].is_alphabetic() || matches!(chars[i], '/' | 'µ' | 'μ' | '%'))
            {
                i += 1;
                if chars[i - 1] == '%' {
                    break;
                }
            }
            let unit: String = chars[ustart..i].iter().collect();
            out.push((Tok::Num(v, unit), col, i - start));
            continue;
        }
        let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
        let (tok, len) = match (two.as_str(), c) {
            (">=", _) => (Tok::Op(Cmp::Ge), 2),
            ("<=", _) => (Tok::Op(Cmp::Le), 2),
            ("==", _) => (Tok::Op(Cmp::Eq), 2),
            ("!=", _) => (Tok::Op(Cmp::Ne), 2),
            (_, '>') => (Tok::Op(Cmp::Gt), 1),
            (_, '<') => (Tok::Op(Cmp::Lt), 1),
            (_, '=') => return Err(err(col, "`=` alone is no comparison; use `==`".into())),
            (_, ':') => (Tok::Colon, 1),
            (_, '*') => (Tok::Star, 1),
            (_, '%') => (Tok::Percent, 1),
            _ => {
                return Err(err(
                    col,
                    format!(
                        "unexpected character {:?}; a gate is `[selector:value ...] metric [stat] op threshold`",
                        c
                    ),
                ))
            }
        };
        out.push((tok, col, len));
        i += len;
    }
    Ok(out)
}
