//! Units of the figures a report and its gates talk about, and the unit
//! suffixes a gate threshold may carry (`50us`, `90Gbps`, `64K`, `1%`).

use fabperf_units::{Multiplier, SizeStyle};

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

/// A byte count the way the report and its gates print sizes: `64K`,
/// `1M`, `1G`, `1472` ([`fabperf_units::format_size`], up to G).
pub fn size_label(b: u64) -> String {
    fabperf_units::format_size(b, SizeStyle::Short, Multiplier::G)
}

/// A byte count in words for verdicts: `64 KiB`, `1472 B`
/// ([`fabperf_units::format_size`], up to MiB).
pub fn size_words(b: u64) -> String {
    fabperf_units::format_size(b, SizeStyle::Words, Multiplier::M)
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
        assert_eq!(size_label(1 << 30), "1G");
        assert_eq!(size_label(8 << 20), "8M");
        assert_eq!(size_label(65536), "64K");
        assert_eq!(size_label(1472), "1472");
        assert_eq!(size_words(65536), "64 KiB");
        assert_eq!(size_words(64), "64 B");
    }
}
