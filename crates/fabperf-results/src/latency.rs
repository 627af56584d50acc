//! Latency samples in an HdrHistogram, summarised in microseconds, and
//! carried whole in records (`lat_hist`) so percentiles can be recomputed
//! and histograms merged across repeats.

use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Lowest and highest value the histograms track, in nanoseconds, and
/// their precision (significant decimal digits).
const LOWEST_NS: u64 = 1;
const HIGHEST_NS: u64 = 3_600_000_000_000;
const SIG_DIGITS: u8 = 3;

/// Longest `lat_hist` string accepted by [`LatencyHistogram::from_base64`]
/// (ours are a few hundred bytes to a few KiB).
pub const MAX_ENCODED_LEN: usize = 1 << 20;
/// Largest inflated V2 payload accepted (a full 1 ns .. 1 h histogram at 3
/// digits encodes in well under this).
const MAX_INFLATED: u64 = 4 << 20;
/// Cookies of HdrHistogram's V2 encoding (plain and deflate-compressed).
const V2_COOKIE: u32 = 0x1c84_9313;
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9314;
/// Bytes of the V2 header before the counts.
const V2_HEADER: usize = 40;

/// Why a serialized histogram was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistError(pub String);

impl std::fmt::Display for HistError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "latency histogram: {}", self.0)
    }
}

impl std::error::Error for HistError {}

/// Whether a latency is a half round trip (one-way estimate, what sockperf
/// and perftest's send/write latency print) or a full round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LatencyKind {
    HalfRtt,
    Rtt,
}

impl LatencyKind {
    pub fn label(self) -> &'static str {
        match self {
            LatencyKind::HalfRtt => "half-RTT",
            LatencyKind::Rtt => "RTT",
        }
    }
}

/// Latency summary, microseconds. `p50` is perftest's `t_typical`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub p9999: f64,
    pub max: f64,
    pub mean: f64,
    pub stdev: f64,
    pub kind: LatencyKind,
    /// Number of samples behind the summary.
    pub samples: u64,
}

/// How late a load generator sent its requests, µs: for each request that
/// came due while its connection was idle, the time from when it was due to
/// when it was written (timer granularity, scheduling). Requests that came
/// due while their connection still waited for an earlier response are not
/// in it: their wait is the server's (`late-requests`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SendLag {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
    /// Requests behind the figures.
    pub samples: u64,
}

impl SendLag {
    /// From a histogram of lags (recorded with
    /// [`LatencyHistogram::record_rtt_ns`] into an [`LatencyKind::Rtt`]
    /// histogram); `None` without a sample.
    pub fn from_hist(h: &LatencyHistogram) -> Option<SendLag> {
        h.summary().map(|s| SendLag {
            p50: s.p50,
            p90: s.p90,
            p99: s.p99,
            max: s.max,
            mean: s.mean,
            samples: s.samples,
        })
    }
}

/// Every latency sample, recorded in nanoseconds with 3 significant digits
/// (0.1 % relative error), from 1 ns up to one hour.
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    hist: Histogram<u64>,
    kind: LatencyKind,
    /// A divisor applied when recording: 2 turns measured round trips into
    /// half round trips.
    divisor: u64,
}

impl LatencyHistogram {
    /// A histogram that records samples of the given kind. Samples passed to
    /// [`record_rtt_ns`](Self::record_rtt_ns) are full round trips; for
    /// `HalfRtt` they are halved before recording.
    pub fn new(kind: LatencyKind) -> LatencyHistogram {
        let hist = Histogram::<u64>::new_with_bounds(LOWEST_NS, HIGHEST_NS, SIG_DIGITS)
            .expect("static histogram bounds are valid");
        let divisor = match kind {
            LatencyKind::HalfRtt => 2,
            LatencyKind::Rtt => 1,
        };
        LatencyHistogram {
            hist,
            kind,
            divisor,
        }
    }

    pub fn kind(&self) -> LatencyKind {
        self.kind
    }

    /// Record one measured round trip, in nanoseconds.
    #[inline]
    pub fn record_rtt_ns(&mut self, rtt_ns: u64) {
        let v = (rtt_ns / self.divisor).max(1);
        // saturating_record clamps values above the top bound instead of failing.
        self.hist.saturating_record(v);
    }

    /// Merge another histogram of the same kind (another thread, or
    /// another repeat decoded with [`from_base64`](Self::from_base64)).
    pub fn merge(&mut self, other: &LatencyHistogram) -> Result<(), HistError> {
        if other.kind != self.kind {
            return Err(HistError(format!(
                "cannot merge a {} histogram into a {} one",
                other.kind.label(),
                self.kind.label()
            )));
        }
        // Both histograms share the same bounds, so `add` cannot fail.
        self.hist
            .add(&other.hist)
            .map_err(|e| HistError(format!("{e:?}")))
    }

    pub fn len(&self) -> u64 {
        self.hist.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// The histogram in HdrHistogram's standard text form: the V2 encoding,
    /// deflate-compressed, in base64 (what HdrHistogram's interval logs
    /// hold, so its tools decode it). Values are nanoseconds of this
    /// histogram's kind (halved already for half round trips).
    pub fn to_base64(&self) -> String {
        use base64::Engine;
        let mut buf = Vec::new();
        V2DeflateSerializer::new()
            .serialize(&self.hist, &mut buf)
            .expect("serializing into memory cannot fail");
        base64::engine::general_purpose::STANDARD.encode(buf)
    }

    /// Decode [`to_base64`](Self::to_base64)'s output as a histogram of
    /// `kind`. Input from a file or a peer may be hostile: its length, the
    /// inflated size and the histogram's parameters are bounded before any
    /// allocation that depends on them, and anything else is an error.
    pub fn from_base64(s: &str, kind: LatencyKind) -> Result<LatencyHistogram, HistError> {
        let v2 = V2Bytes::from_base64(s, false)?;
        let (digits, low, high) = (v2.digits, v2.low_ns, v2.high_ns);
        if digits != u32::from(SIG_DIGITS) || low != LOWEST_NS || high == 0 || high > HIGHEST_NS {
            return Err(HistError(format!(
                "parameters ({digits} digits, {low}..{high} ns) are not fabperf's \
                 ({SIG_DIGITS} digits, {LOWEST_NS}..at most {HIGHEST_NS} ns)"
            )));
        }
        let decoded = v2.deserialize()?;
        let mut out = LatencyHistogram::new(kind);
        out.hist
            .add(&decoded)
            .map_err(|e| HistError(format!("values outside the tracked range: {e:?}")))?;
        Ok(out)
    }

    /// The summary, or `None` when no sample was recorded.
    pub fn summary(&self) -> Option<LatencySummary> {
        if self.hist.is_empty() {
            return None;
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        let h = &self.hist;
        Some(LatencySummary {
            min: us(h.min()),
            p50: us(h.value_at_quantile(0.50)),
            p90: us(h.value_at_quantile(0.90)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            p9999: us(h.value_at_quantile(0.9999)),
            max: us(h.max()),
            mean: h.mean() / 1000.0,
            stdev: h.stdev() / 1000.0,
            kind: self.kind,
            samples: h.len(),
        })
    }
}

/// An HdrHistogram V2 encoding taken from base64 text that may be hostile
/// (a store, a file, a peer): the text's length, the compressed length and
/// the inflated size are bounded, the header and the payload length it
/// announces are checked, before any allocation that depends on them. The
/// histogram's parameters are read but not judged: each caller has its own
/// range ([`LatencyHistogram::from_base64`] accepts only fabperf's).
#[derive(Debug, Clone)]
pub struct V2Bytes {
    inner: Vec<u8>,
    pub digits: u32,
    pub low_ns: u64,
    pub high_ns: u64,
}

/// Inflate a zlib stream of at most [`MAX_INFLATED`] bytes (its checksum
/// checked), with libdeflate: a report reads millions of stored histograms
/// of a few hundred bytes each, where building the decoder's tables is most
/// of the work and libdeflate's is some 2.5 times cheaper than miniz's.
/// The decoder and its output buffer are kept per thread and grown only as
/// far as a stream needs (from 64 KiB up to the cap).
fn inflate(body: &[u8]) -> Result<Vec<u8>, HistError> {
    use std::cell::RefCell;
    thread_local! {
        static INFLATER: RefCell<(libdeflater::Decompressor, Vec<u8>)> =
            RefCell::new((libdeflater::Decompressor::new(), Vec::new()));
    }
    INFLATER.with(|cell| {
        let (d, out) = &mut *cell.borrow_mut();
        let mut room = out.len().max(64 << 10).min(MAX_INFLATED as usize);
        loop {
            if out.len() < room {
                out.resize(room, 0);
            }
            match d.zlib_decompress(body, &mut out[..room]) {
                Ok(n) => return Ok(out[..n].to_vec()),
                Err(libdeflater::DecompressionError::InsufficientSpace) => {
                    if room >= MAX_INFLATED as usize {
                        return Err(HistError(format!(
                            "inflates to more than {MAX_INFLATED} bytes"
                        )));
                    }
                    room = (room * 4).min(MAX_INFLATED as usize);
                }
                Err(e) => return Err(HistError(format!("bad compressed data: {e}"))),
            }
        }
    })
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4)
        .map(|x| u32::from_be_bytes([x[0], x[1], x[2], x[3]]))
}

fn be64(b: &[u8], at: usize) -> Option<u64> {
    let x = b.get(at..at + 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(x);
    Some(u64::from_be_bytes(a))
}

impl V2Bytes {
    /// Longest base64 text accepted.
    pub const MAX_TEXT: usize = MAX_ENCODED_LEN;
    /// Largest inflated payload accepted.
    pub const MAX_INFLATED: u64 = MAX_INFLATED;
    /// HdrHistogram's V2 cookies (plain, deflate-compressed).
    pub const COOKIE: u32 = V2_COOKIE;
    pub const COMPRESSED_COOKIE: u32 = V2_COMPRESSED_COOKIE;

    /// `plain_ok` also accepts the uncompressed V2 encoding (HdrHistogram's
    /// other tools write it); fabperf itself writes the compressed one.
    pub fn from_base64(text: &str, plain_ok: bool) -> Result<V2Bytes, HistError> {
        use base64::Engine;
        let bad = |m: String| HistError(m);
        if text.len() > MAX_ENCODED_LEN {
            return Err(bad(format!(
                "{} characters, more than the {MAX_ENCODED_LEN} accepted",
                text.len()
            )));
        }
        let raw = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|e| bad(format!("not base64: {e}")))?;
        let inner = match be32(&raw, 0) {
            Some(V2_COMPRESSED_COOKIE) => {
                let clen = be32(&raw, 4).ok_or_else(|| bad("truncated header".into()))? as usize;
                let body = &raw[8..];
                if clen != body.len() {
                    return Err(bad(format!(
                        "compressed length {clen} announced, which does not match the {} \
                         bytes present",
                        body.len()
                    )));
                }
                inflate(body)?
            }
            Some(V2_COOKIE) if plain_ok => raw,
            _ if plain_ok => {
                return Err(bad("not an HdrHistogram V2 encoding (wrong cookie)".into()))
            }
            _ => return Err(bad("not a compressed V2 HdrHistogram (wrong cookie)".into())),
        };
        if inner.len() < V2_HEADER || be32(&inner, 0) != Some(V2_COOKIE) {
            return Err(bad("V2 header missing or wrong".into()));
        }
        let payload = be32(&inner, 4).unwrap_or(0) as usize;
        if payload > inner.len() - V2_HEADER {
            return Err(bad(format!(
                "payload of {payload} bytes announced, {} present",
                inner.len() - V2_HEADER
            )));
        }
        Ok(V2Bytes {
            digits: be32(&inner, 12).unwrap_or(0),
            low_ns: be64(&inner, 16).unwrap_or(0),
            high_ns: be64(&inner, 24).unwrap_or(0),
            inner,
        })
    }

    /// The histogram (call after judging the parameters: they size it).
    pub fn deserialize(&self) -> Result<Histogram<u64>, HistError> {
        Deserializer::new()
            .deserialize(&mut self.inner.as_slice())
            .map_err(|e| HistError(format!("{e}")))
    }

    /// The recorded values without building a histogram: each non-empty
    /// bucket as (its lowest value, its count), in increasing order. Reading
    /// many stored histograms this way costs their encoded size, not the
    /// size of a histogram's bucket array (some 34 000 counts for fabperf's
    /// 1 ns .. 1 h range).
    pub fn counts(&self) -> Result<Vec<(u64, u64)>, HistError> {
        let bad = |m: &str| HistError(m.to_string());
        let payload = be32(&self.inner, 4).unwrap_or(0) as usize;
        let offset = be32(&self.inner, 8).unwrap_or(0);
        if offset != 0 {
            return Err(bad("a normalizing index offset is not supported"));
        }
        if !(1..=5).contains(&self.digits) || self.low_ns == 0 {
            return Err(bad("parameters out of range"));
        }
        let body = self
            .inner
            .get(V2_HEADER..V2_HEADER + payload)
            .ok_or_else(|| bad("truncated payload"))?;
        // HdrHistogram's bucket layout for these parameters.
        let largest = 2 * 10u64.pow(self.digits);
        let sub_count_mag = 64 - (largest - 1).leading_zeros(); // log2, rounded up
        let half_mag = sub_count_mag - 1;
        let half = 1u64 << half_mag;
        let unit = 63 - self.low_ns.leading_zeros();
        // (Any index a hostile payload reaches is judged without overflow:
        // one past the range is no value.)
        let value_of = |index: u64| -> Option<u64> {
            let (bucket, sub) = match index >> half_mag {
                0 => (0, index & (half - 1)),
                b => (b - 1, (index & (half - 1)) + half),
            };
            let shift = bucket.checked_add(u64::from(unit))?;
            (shift < 64 && u64::from(sub.leading_zeros()) > shift).then(|| sub << shift)
        };
        let mut out = Vec::new();
        let (mut at, mut index) = (0usize, 0u64);
        while at < body.len() {
            // A zig-zag LEB128 number of at most 9 bytes (the 9th holds 8 bits).
            let mut raw: u64 = 0;
            let mut shift = 0;
            loop {
                let b = *body.get(at).ok_or_else(|| bad("truncated count"))?;
                at += 1;
                if shift == 56 {
                    raw |= u64::from(b) << 56;
                    break;
                }
                raw |= u64::from(b & 0x7f) << shift;
                if b & 0x80 == 0 {
                    break;
                }
                shift += 7;
            }
            let v = ((raw >> 1) as i64) ^ -((raw & 1) as i64);
            if v < 0 {
                index = index
                    .checked_add(v.unsigned_abs())
                    .ok_or_else(|| bad("run of zeros out of range"))?;
            } else {
                if v > 0 {
                    let value =
                        value_of(index).ok_or_else(|| bad("count beyond the value range"))?;
                    if value > self.high_ns.saturating_mul(2) {
                        return Err(bad("count above the highest trackable value"));
                    }
                    out.push((value, v as u64));
                }
                index = index
                    .checked_add(1)
                    .ok_or_else(|| bad("run of zeros out of range"))?;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// Counts at indexes far past the layout's range (a zero run of 2^62,
    /// or up to the last index) are refused, not overflowed (fuzzing found
    /// the index arithmetic overflowing).
    #[test]
    fn counts_at_hostile_indexes_are_refused() {
        let zigzag = |v: i64| ((v << 1) ^ (v >> 63)) as u64;
        let leb = |mut x: u64, out: &mut Vec<u8>| loop {
            let b = (x & 0x7f) as u8;
            x >>= 7;
            if x == 0 {
                out.push(b);
                break;
            }
            out.push(b | 0x80);
        };
        for (run, runs, then, low) in [
            (1i64 << 62, 3, 1i64, 1u64),
            (i64::MAX, 3, 1, 1),
            (i64::MAX, 3, 0, 1),
            (40_000, 3, 3, 1),
            // 2^32 - 1 buckets up, with a unit of 2^10 ns.
            (1 << 42, 1, 1, 1024),
        ] {
            let mut body = Vec::new();
            for _ in 0..runs {
                leb(zigzag(-run), &mut body);
            }
            leb(zigzag(then), &mut body);
            leb(zigzag(then), &mut body);
            let mut raw = V2_COOKIE.to_be_bytes().to_vec();
            raw.extend((body.len() as u32).to_be_bytes());
            raw.extend(0u32.to_be_bytes());
            raw.extend(3u32.to_be_bytes());
            raw.extend(low.to_be_bytes());
            raw.extend(HIGHEST_NS.to_be_bytes());
            raw.extend(1f64.to_bits().to_be_bytes());
            raw.extend(body);
            let text = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &raw);
            let err = V2Bytes::from_base64(&text, true)
                .unwrap()
                .counts()
                .unwrap_err();
            assert!(err.0.contains("range"), "{run} {then}: {err}");
        }
    }

    /// Streams inflate whole past the first buffer's 64 KiB, up to the cap
    /// and not a byte beyond it; a corrupted stream (its checksum) is an
    /// error, not data.
    #[test]
    fn inflating_grows_to_the_cap_and_stops_there() {
        let deflate = |b: &[u8]| {
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
            std::io::Write::write_all(&mut z, b).unwrap();
            z.finish().unwrap()
        };
        for n in [
            0,
            1,
            700,
            64 << 10,
            (64 << 10) + 1,
            1 << 20,
            MAX_INFLATED as usize,
        ] {
            let data: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
            assert_eq!(inflate(&deflate(&data)).unwrap(), data, "{n} bytes");
        }
        let over = vec![7u8; MAX_INFLATED as usize + 1];
        assert!(inflate(&deflate(&over))
            .unwrap_err()
            .0
            .contains("more than"));
        // Small again after a large one: the kept buffer does not leak into it.
        assert_eq!(inflate(&deflate(b"abc")).unwrap(), b"abc");
        let mut bad = deflate(&[1, 2, 3, 4, 5, 6, 7, 8]);
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        assert!(inflate(&bad).unwrap_err().0.contains("bad compressed data"));
    }

    /// The sparse reading gives what the full decoding holds, bucket for
    /// bucket, and refuses what it cannot read.
    #[test]
    fn counts_match_the_decoded_histogram() {
        let mut h = LatencyHistogram::new(LatencyKind::Rtt);
        for (v, n) in [
            (1u64, 3),
            (999, 1),
            (2_500, 40),
            (2_501, 2),
            (70_000, 7),
            (3_000_000_000, 1),
        ] {
            for _ in 0..n {
                h.record_rtt_ns(v);
            }
        }
        let v2 = V2Bytes::from_base64(&h.to_base64(), false).unwrap();
        let counts = v2.counts().unwrap();
        let full = v2.deserialize().unwrap();
        let want: Vec<(u64, u64)> = full
            .iter_recorded()
            .map(|x| {
                (
                    full.lowest_equivalent(x.value_iterated_to()),
                    x.count_at_value(),
                )
            })
            .collect();
        assert_eq!(counts, want);
        assert_eq!(counts.iter().map(|c| c.1).sum::<u64>(), 54);
        // A truncated payload is an error, not a panic.
        let mut cut = v2.clone();
        cut.inner.truncate(cut.inner.len() - 1);
        let _ = cut.counts();
        cut.inner[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(cut.counts().is_err());
    }

    #[test]
    fn half_rtt_halves() {
        let mut h = LatencyHistogram::new(LatencyKind::HalfRtt);
        for _ in 0..100 {
            h.record_rtt_ns(20_000);
        }
        let s = h.summary().unwrap();
        assert!((s.p50 - 10.0).abs() < 0.02, "{s:?}");
        assert_eq!(s.kind, LatencyKind::HalfRtt);
        assert_eq!(s.samples, 100);
        assert!(s.stdev < 0.001);
    }

    #[test]
    fn percentiles_use_every_sample() {
        let mut h = LatencyHistogram::new(LatencyKind::Rtt);
        // 9990 fast samples and 10 slow ones: p99.9 must see the slow tail.
        for _ in 0..9990 {
            h.record_rtt_ns(1_000);
        }
        for _ in 0..10 {
            h.record_rtt_ns(1_000_000);
        }
        let s = h.summary().unwrap();
        assert!((s.p50 - 1.0).abs() < 0.01);
        assert!((s.p99 - 1.0).abs() < 0.01);
        assert!(s.p9999 > 990.0, "{s:?}");
        assert!(s.max > 990.0);
        // stdev is not truncated to an integer (perftest's t_stdev is).
        assert!(s.stdev > 1.0 && s.stdev < 100.0, "{s:?}");
    }

    #[test]
    fn empty_has_no_summary() {
        assert!(LatencyHistogram::new(LatencyKind::Rtt).summary().is_none());
    }

    #[test]
    fn merge_adds_counts() {
        let mut a = LatencyHistogram::new(LatencyKind::Rtt);
        let mut b = LatencyHistogram::new(LatencyKind::Rtt);
        a.record_rtt_ns(5_000);
        b.record_rtt_ns(7_000);
        a.merge(&b).unwrap();
        assert_eq!(a.len(), 2);
        let half = LatencyHistogram::new(LatencyKind::HalfRtt);
        assert!(a.merge(&half).unwrap_err().to_string().contains("half-RTT"));
    }

    fn sample_hist() -> LatencyHistogram {
        let mut h = LatencyHistogram::new(LatencyKind::HalfRtt);
        for i in 0..10_000u64 {
            h.record_rtt_ns(10_000 + (i * 7919) % 90_000);
        }
        h.record_rtt_ns(3_000_000_000);
        h
    }

    #[test]
    fn base64_round_trip_keeps_every_percentile() {
        let h = sample_hist();
        let s = h.to_base64();
        assert!(
            s.starts_with("HISTF"),
            "standard compressed V2 prefix: {s:.20}"
        );
        assert!(s.len() < 8192, "{} characters", s.len());
        let back = LatencyHistogram::from_base64(&s, LatencyKind::HalfRtt).unwrap();
        assert_eq!(back.summary(), h.summary());
        assert_eq!(back.len(), h.len());
        // Merging two repeats doubles every count and keeps the percentiles.
        let mut m = back.clone();
        m.merge(&back).unwrap();
        assert_eq!(m.len(), 2 * h.len());
        assert_eq!(m.summary().unwrap().p99, h.summary().unwrap().p99);
        // An empty histogram round-trips too.
        let e = LatencyHistogram::new(LatencyKind::Rtt);
        let back = LatencyHistogram::from_base64(&e.to_base64(), LatencyKind::Rtt).unwrap();
        assert!(back.is_empty());
    }

    #[test]
    fn malformed_histograms_are_refused_with_the_reason() {
        use base64::Engine;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let k = LatencyKind::Rtt;
        let err = |s: &str| LatencyHistogram::from_base64(s, k).unwrap_err().to_string();
        assert!(err("not base64!").contains("not base64"));
        assert!(err("").contains("cookie"));
        assert!(err(&b64(b"HIST")).contains("cookie"));
        // Right cookie, wrong length.
        let mut v = V2_COMPRESSED_COOKIE.to_be_bytes().to_vec();
        v.extend_from_slice(&1000u32.to_be_bytes());
        v.extend_from_slice(&[1, 2, 3]);
        assert!(err(&b64(&v)).contains("does not match"));
        // Right framing, garbage instead of zlib.
        let mut v = V2_COMPRESSED_COOKIE.to_be_bytes().to_vec();
        v.extend_from_slice(&3u32.to_be_bytes());
        v.extend_from_slice(&[1, 2, 3]);
        assert!(err(&b64(&v)).contains("compressed"));
        // A decompression bomb: far more than the cap once inflated.
        let zeros = vec![0u8; (MAX_INFLATED as usize) * 2];
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut z, &zeros).unwrap();
        let body = z.finish().unwrap();
        let mut v = V2_COMPRESSED_COOKIE.to_be_bytes().to_vec();
        v.extend_from_slice(&(body.len() as u32).to_be_bytes());
        v.extend_from_slice(&body);
        assert!(err(&b64(&v)).contains("more than"));
        // A valid histogram with other parameters (5 digits) is not ours.
        let other = Histogram::<u64>::new_with_bounds(1, 1000, 5).unwrap();
        let mut buf = Vec::new();
        V2DeflateSerializer::new()
            .serialize(&other, &mut buf)
            .unwrap();
        assert!(err(&b64(&buf)).contains("not fabperf's"));
        // A header that announces a 4 GB payload must not be believed.
        let good = sample_hist().to_base64();
        let raw = base64::engine::general_purpose::STANDARD
            .decode(&good)
            .unwrap();
        let mut inner = Vec::new();
        flate2::read::ZlibDecoder::new(&raw[8..])
            .read_to_end(&mut inner)
            .unwrap();
        inner[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut z, &inner).unwrap();
        let body = z.finish().unwrap();
        let mut v = V2_COMPRESSED_COOKIE.to_be_bytes().to_vec();
        v.extend_from_slice(&(body.len() as u32).to_be_bytes());
        v.extend_from_slice(&body);
        assert!(err(&b64(&v)).contains("announced"));
        // Too long to even look at.
        assert!(err(&"A".repeat(MAX_ENCODED_LEN + 4)).contains("accepted"));
        // Flipping bytes of a good one never panics.
        for i in (0..good.len()).step_by(7) {
            let mut s = good.clone().into_bytes();
            s[i] = if s[i] == b'A' { b'B' } else { b'A' };
            let _ = LatencyHistogram::from_base64(std::str::from_utf8(&s).unwrap(), k);
        }
    }
}
