//! Numbers in words.

/// A number in words: two decimals below 10, one below 100, none above.
pub fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A signed number with a real minus sign.
pub fn signed(v: f64, decimals: usize) -> String {
    let s = format!("{:.*}", decimals, v.abs());
    if v < 0.0 && s.trim_start_matches(['0', '.']).chars().any(|c| c != '0') {
        format!("−{s}")
    } else {
        format!("+{s}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_and_numbers() {
        assert_eq!(signed(-41.2, 0), "−41");
        assert_eq!(signed(3.0, 1), "+3.0");
        assert_eq!(signed(-0.001, 1), "+0.0");
        assert_eq!(fmt_num(9.412), "9.41");
        assert_eq!(fmt_num(94.12), "94.1");
        assert_eq!(fmt_num(941.2), "941");
    }
}
