//! One grammar for the numbers people type on fabperf's command line:
//! sizes, rates and durations. Every flag of every command goes through
//! these functions, so `64K` means the same thing to `tcp-bw -l`,
//! `rdma-bw --size` and `server --max-memory` (see docs/units.md).
//!
//! - **Sizes** are bytes with an optional *binary* multiplier:
//!   `1472`, `64K` = `64KB` = `64KiB` = 65536, `1.5M`, `2G`, `1T`
//!   (case-insensitive; `B` alone means bytes). The result must be a whole
//!   number of bytes.
//! - **Rates** are bits per second with an optional *decimal* multiplier:
//!   `800K`, `100M`, `2.5G`, `1T` (optionally followed by `bit/s` or
//!   `bps`), or `max` (also `0`): as fast as possible.
//! - **Request rates** are requests per second with an optional
//!   *decimal* multiplier: `500`, `20K`, `1.5M` (optionally followed by
//!   `/s` or `req/s`), or `max` (also `0`): as fast as the responses come.
//! - **Durations** are a number with an optional unit: `ms`, `s`, `m`
//!   (minutes), `h`. A bare number takes the flag's own unit, which is
//!   seconds for every flag except `--probe-timeout` (milliseconds).
//!
//! A number is written in decimal (`10`, `0.5`, `.5`, `1e3`); signs other
//! than a leading `-` (reported as negative), `inf` and `NaN` are refused.
//! Range checks with clear messages come from [`size_in`], [`secs_in`] and
//! [`duration_in`], shaped for clap's `value_parser`.

use std::time::Duration;

/// The unit of a bare number in a duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    Seconds,
    Millis,
}

/// Split `s` into its number and the rest (the suffix), both trimmed.
/// Refuses what is not a plain non-negative decimal number.
fn split_number<'a>(s: &'a str, what: &str) -> Result<(f64, &'a str), String> {
    let t = s.trim();
    if t.is_empty() {
        return Err(format!("an empty {what} is not valid"));
    }
    if t.starts_with('-') {
        return Err(format!("{what} {s:?} is negative"));
    }
    let b = t.as_bytes();
    let mut i = 0;
    let digits = |i: &mut usize| {
        let st = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - st
    };
    let int = digits(&mut i);
    let mut frac = 0;
    if i < b.len() && b[i] == b'.' {
        i += 1;
        frac = digits(&mut i);
    }
    if int + frac == 0 {
        return Err(format!(
            "{s:?} is not a {what} (it must start with a number)"
        ));
    }
    // An exponent: e, optional sign, digits (but "1m" style suffixes must
    // not be eaten: only when digits follow).
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        let mut k = j;
        if digits(&mut k) > 0 {
            i = k;
        }
    }
    let v: f64 = t[..i]
        .parse()
        .map_err(|_| format!("{s:?} is not a {what}"))?;
    if !v.is_finite() {
        return Err(format!("{what} {s:?} is too large"));
    }
    Ok((v, t[i..].trim()))
}

/// Parse a size in bytes (binary multipliers).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (v, suf) = split_number(s, "size")?;
    let mult: u64 = match suf.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => {
            return Err(format!(
            "unknown unit {suf:?} in size {s:?}; use bytes, optionally with K, M, G or T (x1024)"
        ))
        }
    };
    let b = v * mult as f64;
    if b >= u64::MAX as f64 {
        return Err(format!("size {s:?} is too large"));
    }
    if b.fract() != 0.0 {
        return Err(format!("size {s:?} is not a whole number of bytes"));
    }
    Ok(b as u64)
}

/// Parse a rate in bits per second (decimal multipliers); `max` and `0`
/// give `None` (as fast as possible).
pub fn parse_rate(s: &str) -> Result<Option<u64>, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("max") {
        return Ok(None);
    }
    let (v, suf) = split_number(t, "rate")?;
    let suf = suf.to_ascii_lowercase();
    let unit = ["bit/s", "bits/s", "bps"]
        .iter()
        .find_map(|u| suf.strip_suffix(u))
        .unwrap_or(&suf)
        .trim();
    let mult = match unit {
        "" => 1.0,
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        "t" => 1e12,
        _ => {
            return Err(format!(
                "unknown unit {suf:?} in rate {s:?}; use bits/s, optionally with K, M, G or T (x1000), or `max`"
            ))
        }
    };
    if v == 0.0 {
        return Ok(None);
    }
    let r = (v * mult).round();
    if r >= u64::MAX as f64 {
        return Err(format!("rate {s:?} is too large"));
    }
    if r < 1.0 {
        return Err(format!("rate {s:?} is below 1 bit/s"));
    }
    Ok(Some(r as u64))
}

/// Parse a request rate in requests per second (decimal multipliers);
/// `max` and `0` give `None` (closed loop: as fast as the responses come).
/// At least 0.001 requests/s, at most 10⁹.
pub fn parse_per_second(s: &str) -> Result<Option<f64>, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("max") {
        return Ok(None);
    }
    let (v, suf) = split_number(t, "request rate")?;
    let suf = suf.to_ascii_lowercase();
    let unit = ["req/s", "/s"]
        .iter()
        .find_map(|u| suf.strip_suffix(u))
        .unwrap_or(&suf)
        .trim();
    let mult = match unit {
        "" => 1.0,
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        _ => {
            return Err(format!(
                "unknown unit {suf:?} in request rate {s:?}; use requests per second, optionally with K, M or G (x1000), or `max`"
            ))
        }
    };
    if v == 0.0 {
        return Ok(None);
    }
    let r = v * mult;
    if r > 1e9 {
        return Err(format!(
            "request rate {s:?} is above the largest, 1G requests/s"
        ));
    }
    if r < 0.001 {
        return Err(format!(
            "request rate {s:?} is below the smallest, 0.001 requests/s"
        ));
    }
    Ok(Some(r))
}

/// Longest duration the grammar accepts at all (ranges per flag are
/// narrower); keeps every value far inside `Duration`'s range.
pub const MAX_ANY_SECS: f64 = 10.0 * 365.0 * 86400.0;

/// Parse a duration; a bare number is in `bare` units.
pub fn parse_duration(s: &str, bare: TimeUnit) -> Result<Duration, String> {
    let (v, suf) = split_number(s, "duration")?;
    let secs = match suf.to_ascii_lowercase().as_str() {
        "" => match bare {
            TimeUnit::Seconds => v,
            TimeUnit::Millis => v / 1e3,
        },
        "ms" => v / 1e3,
        "s" | "sec" | "secs" => v,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        _ => {
            return Err(format!(
                "unknown unit {suf:?} in duration {s:?}; use seconds, or a number with ms, s, m (minutes) or h"
            ))
        }
    };
    if secs > MAX_ANY_SECS {
        return Err(format!("duration {s:?} is too long"));
    }
    Duration::try_from_secs_f64(secs).map_err(|_| format!("duration {s:?} is out of range"))
}

/// How [`format_size`] writes a byte count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeStyle {
    /// As sizes are typed and shown in tables: `64K`, `8M`, `1472`.
    Short,
    /// In words, for messages and verdicts: `64 KiB`, `8 MiB`, `1472 B`.
    Words,
}

/// The largest binary multiplier [`format_size`] may use: a count that is
/// a multiple of a larger one is written with this one (`1024M`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Multiplier {
    /// KiB, 2^10.
    K,
    /// MiB, 2^20.
    M,
    /// GiB, 2^30.
    G,
    /// TiB, 2^40.
    T,
}

/// fabperf's one size formatter: `b` bytes with the largest binary
/// multiplier up to `largest` that divides it exactly, else in bytes.
/// `format_size(65536, Short, M)` is `64K`, `format_size(1 << 30, Short,
/// M)` is `1024M`, `format_size(1500, Words, T)` is `1500 B`.
pub fn format_size(b: u64, style: SizeStyle, largest: Multiplier) -> String {
    const UNITS: [(Multiplier, u32, &str, &str); 4] = [
        (Multiplier::T, 40, "T", "TiB"),
        (Multiplier::G, 30, "G", "GiB"),
        (Multiplier::M, 20, "M", "MiB"),
        (Multiplier::K, 10, "K", "KiB"),
    ];
    for (m, shift, short, words) in UNITS {
        if m <= largest && b >= 1 << shift && b.is_multiple_of(1 << shift) {
            return match style {
                SizeStyle::Short => format!("{}{short}", b >> shift),
                SizeStyle::Words => format!("{} {words}", b >> shift),
            };
        }
    }
    match style {
        SizeStyle::Short => b.to_string(),
        SizeStyle::Words => format!("{b} B"),
    }
}

/// `65536` -> `64 KiB`, `1500` -> `1500 B` (for messages): [`format_size`]
/// in words, up to TiB.
pub fn describe_size(b: u64) -> String {
    format_size(b, SizeStyle::Words, Multiplier::T)
}

/// `90` -> `90 s`, `0.5` -> `0.5 s`, `604800` -> `604800 s (7 days)`.
pub fn describe_secs(s: f64) -> String {
    if s >= 86400.0 && (s / 86400.0).fract() == 0.0 {
        let d = s / 86400.0;
        format!("{s} s ({d} day{})", if d == 1.0 { "" } else { "s" })
    } else if s >= 3600.0 && (s / 3600.0).fract() == 0.0 {
        let h = s / 3600.0;
        format!("{s} s ({h} hour{})", if h == 1.0 { "" } else { "s" })
    } else {
        format!("{s} s")
    }
}

/// A clap value parser for a size within `min ..= max` bytes.
pub fn size_in(
    min: u64,
    max: u64,
) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |s: &str| {
        let v = parse_size(s)?;
        if v < min {
            return Err(format!(
                "{s} is below the smallest size, {}",
                describe_size(min)
            ));
        }
        if v > max {
            return Err(format!(
                "{s} is above the largest size, {}",
                describe_size(max)
            ));
        }
        Ok(v)
    }
}

/// Whether zero is allowed at the bottom of a duration range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zero {
    Allowed,
    Refused,
}

/// A clap value parser for a duration, returned as seconds, within
/// `0 ..= max_secs` (zero only when allowed); a bare number is seconds.
pub fn secs_in(
    zero: Zero,
    max_secs: f64,
) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |s: &str| duration_in(zero, max_secs, TimeUnit::Seconds)(s).map(|d| d.as_secs_f64())
}

/// Like [`secs_in`] but returns a `Duration` and takes the unit of a bare
/// number.
pub fn duration_in(
    zero: Zero,
    max_secs: f64,
    bare: TimeUnit,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |s: &str| {
        let d = parse_duration(s, bare)?;
        if zero == Zero::Refused && d.is_zero() {
            return Err(format!("{s} is not a positive duration"));
        }
        if d.as_secs_f64() > max_secs {
            return Err(format!(
                "{s} is longer than the limit of {}",
                describe_secs(max_secs)
            ));
        }
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_rates() {
        assert_eq!(parse_per_second("max").unwrap(), None);
        assert_eq!(parse_per_second("0").unwrap(), None);
        assert_eq!(parse_per_second("500").unwrap(), Some(500.0));
        assert_eq!(parse_per_second("20K").unwrap(), Some(20_000.0));
        assert_eq!(parse_per_second("1.5m/s").unwrap(), Some(1_500_000.0));
        assert_eq!(parse_per_second("2k req/s").unwrap(), Some(2000.0));
        assert_eq!(parse_per_second("0.5").unwrap(), Some(0.5));
        for bad in [
            "", "-1", "1e300", "2G", "10Kbit/s", "fast", "NaN", "inf", "1MB", "0.0001",
        ] {
            assert!(parse_per_second(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1472").unwrap(), 1472);
        for s in ["64K", "64k", "64KB", "64KiB", "64 kib", "0.0625M"] {
            assert_eq!(parse_size(s).unwrap(), 65536, "{s}");
        }
        assert_eq!(parse_size("1.5M").unwrap(), 3 << 19);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size("1T").unwrap(), 1 << 40);
        assert_eq!(parse_size("12B").unwrap(), 12);
        assert!(parse_size("1.5").unwrap_err().contains("whole number"));
        assert!(parse_size("-1").unwrap_err().contains("negative"));
        assert!(parse_size("12Q").unwrap_err().contains("unknown unit"));
        assert!(parse_size("").is_err());
        assert!(parse_size("K").unwrap_err().contains("not a size"));
        assert!(parse_size("NaN").is_err());
        assert!(parse_size("inf").is_err());
        assert!(parse_size("1e30").unwrap_err().contains("too large"));
        assert!(parse_size("99999999999T")
            .unwrap_err()
            .contains("too large"));
        assert!(parse_size("+5").is_err());
        assert_eq!(parse_size("1e3").unwrap(), 1000);
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("max").unwrap(), None);
        assert_eq!(parse_rate("MAX").unwrap(), None);
        assert_eq!(parse_rate("0").unwrap(), None);
        assert_eq!(parse_rate("2.5G").unwrap(), Some(2_500_000_000));
        assert_eq!(parse_rate("800k").unwrap(), Some(800_000));
        assert_eq!(parse_rate("100Mbit/s").unwrap(), Some(100_000_000));
        assert_eq!(parse_rate("100 Mbps").unwrap(), Some(100_000_000));
        assert_eq!(parse_rate("1000").unwrap(), Some(1000));
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("-1M").unwrap_err().contains("negative"));
        assert!(parse_rate("10MB").unwrap_err().contains("unknown unit"));
        assert!(parse_rate("1e30T").unwrap_err().contains("too large"));
        assert!(parse_rate("0.1").unwrap_err().contains("below"));
    }

    #[test]
    fn durations() {
        let s = |x: &str| parse_duration(x, TimeUnit::Seconds).unwrap();
        assert_eq!(s("10"), Duration::from_secs(10));
        assert_eq!(s("0.5"), Duration::from_millis(500));
        assert_eq!(s(".5"), Duration::from_millis(500));
        assert_eq!(s("500ms"), Duration::from_millis(500));
        assert_eq!(s("2s"), Duration::from_secs(2));
        assert_eq!(s("1m"), Duration::from_secs(60));
        assert_eq!(s("1.5h"), Duration::from_secs(5400));
        assert_eq!(s("1e1"), Duration::from_secs(10));
        assert_eq!(
            parse_duration("200", TimeUnit::Millis).unwrap(),
            Duration::from_millis(200)
        );
        assert_eq!(
            parse_duration("1s", TimeUnit::Millis).unwrap(),
            Duration::from_secs(1)
        );
        for bad in ["NaN", "nan", "inf", "-inf", "", "s", "1x", "1 2"] {
            assert!(parse_duration(bad, TimeUnit::Seconds).is_err(), "{bad}");
        }
        assert!(parse_duration("-1", TimeUnit::Seconds)
            .unwrap_err()
            .contains("negative"));
        assert!(parse_duration("1e30", TimeUnit::Seconds)
            .unwrap_err()
            .contains("too long"));
        assert!(parse_duration("18446744073709551615", TimeUnit::Seconds)
            .unwrap_err()
            .contains("too long"));
    }

    #[test]
    fn ranges() {
        let p = size_in(1, 64 << 20);
        assert!(p("0").unwrap_err().contains("smallest size, 1 B"));
        assert!(p("65M").unwrap_err().contains("64 MiB"));
        assert_eq!(p("64M").unwrap(), 64 << 20);
        let t = secs_in(Zero::Refused, 604800.0);
        assert!(t("0").unwrap_err().contains("positive"));
        assert!(t("8d").is_err());
        assert!(t("700000").unwrap_err().contains("7 days"));
        assert_eq!(t("1m").unwrap(), 60.0);
        let o = secs_in(Zero::Allowed, 60.0);
        assert_eq!(o("0").unwrap(), 0.0);
        let d = duration_in(Zero::Refused, 60.0, TimeUnit::Millis);
        assert_eq!(d("200").unwrap(), Duration::from_millis(200));
    }

    #[test]
    fn size_formats() {
        use Multiplier::*;
        use SizeStyle::*;
        // fabperf-results' tables and fabperf-report's labels (and gates).
        for (b, up_to_m, up_to_g) in [
            (65536, "64K", "64K"),
            (1472, "1472", "1472"),
            (8 << 20, "8M", "8M"),
            (1 << 30, "1024M", "1G"),
            (3 << 30, "3072M", "3G"),
            (1536, "1536", "1536"),
            (0, "0", "0"),
            (1 << 40, "1048576M", "1024G"),
        ] {
            assert_eq!(format_size(b, Short, M), up_to_m, "{b}");
            assert_eq!(format_size(b, Short, G), up_to_g, "{b}");
        }
        assert_eq!(format_size(1 << 40, Short, T), "1T");
        assert_eq!(format_size(1 << 20, Short, K), "1024K");
        // The report's verdicts (up to MiB) and messages (up to TiB).
        assert_eq!(format_size(65536, Words, M), "64 KiB");
        assert_eq!(format_size(64, Words, M), "64 B");
        assert_eq!(format_size(1 << 30, Words, M), "1024 MiB");
        assert_eq!(format_size(1 << 30, Words, T), "1 GiB");
        assert_eq!(format_size(u64::MAX, Words, T), format!("{} B", u64::MAX));
    }

    /// fabperf-run's cell labels (`exec.rs`, `human_size`, the `size=`
    /// of a cell's line in the run log) are `format_size(b, Short, M)`:
    /// the values its own implementation gives, copied here.
    #[test]
    fn size_format_of_the_run_log() {
        for (b, exec_rs) in [
            (65536u64, "64K"),
            (1472, "1472"),
            (8 << 20, "8M"),
            (1024, "1K"),
            (1 << 30, "1024M"),
            (1500, "1500"),
            (1025, "1025"),
            (0, "0"),
            (u64::MAX, "18446744073709551615"),
            ((1 << 20) + 1024, "1025K"),
        ] {
            assert_eq!(
                format_size(b, SizeStyle::Short, Multiplier::M),
                exec_rs,
                "{b}"
            );
        }
    }

    #[test]
    fn describe() {
        assert_eq!(describe_size(65536), "64 KiB");
        assert_eq!(describe_size(1500), "1500 B");
        assert_eq!(describe_secs(604800.0), "604800 s (7 days)");
        assert_eq!(describe_secs(3600.0), "3600 s (1 hour)");
        assert_eq!(describe_secs(2.5), "2.5 s");
    }
}
