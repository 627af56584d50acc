//! Units of the figures a report and its gates talk about, and the unit
//! suffixes a gate threshold may carry (`50us`, `90Gbps`, `64K`, `1%`).

/// What a figure measures, which decides the units a threshold may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dim {
    /// Gbit/s.
    Bandwidth,
    /// Microseconds.
    Latency,
    /// Percent.
    Percent,
    /// A plain number (a count, a ratio, an index).
    Plain,
    /// Bytes.
    Size,
}

impl Dim {
    /// The units accepted for this dimension, for error messages.
    pub fn accepted(self) -> &'static str {
        match self {
            Dim::Bandwidth => "Gbps, Gbit/s, Mbps, Mbit/s, Tbps, Kbps (or a bare number of Gbit/s)",
            Dim::Latency => "ns, us, µs, ms, s (or a bare number of µs)",
            Dim::Percent => "% (or a bare number of percent)",
            Dim::Plain => "no unit",
            Dim::Size => "B, K, KiB, M, MiB, G, GiB (or a bare number of bytes)",
        }
    }
}

/// The factor that turns `unit` into the dimension's base unit (Gbit/s,
/// µs, percent, bytes), or `None` when the unit does not belong to it.
pub fn factor(dim: Dim, unit: &str) -> Option<f64> {
    if unit.is_empty() {
        return Some(1.0);
    }
    let u = unit;
    match dim {
        Dim::Bandwidth => match u.to_ascii_lowercase().as_str() {
            "tbps" | "tbit/s" | "tb/s" => Some(1e3),
            "gbps" | "gbit/s" | "gb/s" | "g" => Some(1.0),
            "mbps" | "mbit/s" | "mb/s" | "m" => Some(1e-3),
            "kbps" | "kbit/s" | "kb/s" | "k" => Some(1e-6),
            "bps" | "bit/s" => Some(1e-9),
            _ => None,
        },
        Dim::Latency => match u {
            "ns" => Some(1e-3),
            "us" | "µs" | "μs" => Some(1.0),
            "ms" => Some(1e3),
            "s" => Some(1e6),
            _ => None,
        },
        Dim::Percent => (u == "%").then_some(1.0),
        Dim::Plain => None,
        Dim::Size => match u {
            "B" | "b" => Some(1.0),
            "K" | "k" | "KiB" | "KB" => Some(1024.0),
            "M" | "m" | "MiB" | "MB" => Some(1024.0 * 1024.0),
            "G" | "g" | "GiB" | "GB" => Some(1024.0 * 1024.0 * 1024.0),
            _ => None,
        },
    }
}

/// A byte count the way fabperf prints sizes: `64K`, `1M`, `1472`.
pub fn size_label(b: u64) -> String {
    if b >= 1 << 30 && b.is_multiple_of(1 << 30) {
        format!("{}G", b >> 30)
    } else if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{}M", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{}K", b >> 10)
    } else {
        b.to_string()
    }
}

/// A byte count in words for verdicts: `64 KiB`, `1472 B`.
pub fn size_words(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

/// Parse a size such as `64K`, `1M`, `1472` into bytes.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().ok()?;
    let f = factor(Dim::Size, unit)?;
    let b = v * f;
    (b.is_finite() && b >= 0.0 && b <= u64::MAX as f64 && b.fract() == 0.0).then_some(b as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factors() {
        assert_eq!(factor(Dim::Bandwidth, "Gbps"), Some(1.0));
        assert_eq!(factor(Dim::Bandwidth, "Mbit/s"), Some(1e-3));
        assert_eq!(factor(Dim::Bandwidth, "us"), None);
        assert_eq!(factor(Dim::Latency, "ms"), Some(1e3));
        assert_eq!(factor(Dim::Latency, "µs"), Some(1.0));
        assert_eq!(factor(Dim::Latency, "Gbps"), None);
        assert_eq!(factor(Dim::Percent, "%"), Some(1.0));
        assert_eq!(factor(Dim::Plain, ""), Some(1.0));
        assert_eq!(factor(Dim::Plain, "us"), None);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64K"), Some(65536));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("1472"), Some(1472));
        assert_eq!(parse_size("1.5K"), Some(1536));
        assert_eq!(parse_size("0.3"), None);
        assert_eq!(parse_size("K"), None);
        assert_eq!(parse_size("64Q"), None);
        assert_eq!(parse_size("99999999999999999999999G"), None);
        assert_eq!(size_label(65536), "64K");
        assert_eq!(size_label(1472), "1472");
        assert_eq!(size_words(65536), "64 KiB");
        assert_eq!(size_words(64), "64 B");
    }
}
