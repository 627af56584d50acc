//! Latency histograms stored with the records (`lat_hist`: HdrHistogram's
//! V2 encoding, usually deflate-compressed, in base64; values in
//! nanoseconds), decoded with bounds and merged across repeats so that
//! percentiles of a path are computed over every sample of every repeat.

use fabperf_results::V2Bytes;
use hdrhistogram::Histogram;

/// Highest trackable value accepted: one hour in nanoseconds.
const MAX_HIGHEST_NS: u64 = 3_600_000_000_000;

/// Why a stored histogram could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("latency histogram: {0}")]
pub struct HistError(pub String);

/// Decode one `lat_hist` text. Its length, the inflated size and the
/// histogram's parameters are checked before anything is allocated from
/// them.
pub fn decode(text: &str) -> Result<Histogram<u64>, HistError> {
    v2_in_range(text)?.deserialize().map_err(|e| HistError(e.0))
}

/// The V2 encoding of a `lat_hist` text, its parameters judged (they size
/// what is built from it).
fn v2_in_range(text: &str) -> Result<V2Bytes, HistError> {
    let v2 = V2Bytes::from_base64(text, true).map_err(|e| HistError(e.0))?;
    let (digits, low, high) = (v2.digits, v2.low_ns, v2.high_ns);
    if !(1..=5).contains(&digits)
        || low == 0
        || high < low.saturating_mul(2)
        || high > MAX_HIGHEST_NS
    {
        return Err(HistError(format!(
            "parameters out of range ({digits} significant digits, {low}..{high} ns; \
             accepted: 1..5 digits, up to {MAX_HIGHEST_NS} ns)"
        )));
    }
    Ok(v2)
}

/// Decode one `lat_hist` text into its non-empty buckets, (lowest value in
/// ns, count) — what [`Merged::add_counts`] takes — with the checks of
/// [`decode`], without building a histogram: reading many stored
/// histograms then costs their encoded size, not a bucket array each.
pub fn decode_counts(text: &str) -> Result<Vec<(u64, u64)>, HistError> {
    v2_in_range(text)?.counts().map_err(|e| HistError(e.0))
}

/// Histograms merged across repeats.
///
/// A report merges one stored histogram per record (millions in a large
/// mesh): the buckets it is given are added up by their index in the merged
/// layout (3 significant digits from 1 ns, where a bucket's index follows
/// from its value in a few instructions) and go into the histogram once, in
/// one pass, when it is first read after them. The histogram is the one
/// adding each bucket by itself makes: the same counts, total, minimum and
/// maximum.
#[derive(Debug, Clone)]
pub struct Merged {
    inner: std::cell::RefCell<Inner>,
    /// How many histograms went in.
    pub parts: usize,
}

#[derive(Debug, Clone)]
struct Inner {
    hist: Histogram<u64>,
    /// Counts given but not yet in `hist`, by bucket index.
    pending: Vec<u64>,
    dirty: bool,
}

/// The merged layout's sub-bucket half count (2^10: 3 digits need 2,048
/// sub-buckets) and its magnitude.
const HALF_MAG: u32 = 10;
const SUB_MASK: u64 = (2 << HALF_MAG) - 1;
/// Values up to here are added by index (the buckets below 2^44 ns, 4.9
/// hours: above any accepted histogram's range); any other goes straight
/// into the histogram.
const BY_INDEX_BELOW: u64 = 1 << 44;

/// The index of `v`'s bucket in the merged layout (HdrHistogram's, for a
/// lowest value of 1 and 3 significant digits).
fn index_of(v: u64) -> usize {
    let bucket = 64 - (HALF_MAG + 1) - (v | SUB_MASK).leading_zeros();
    ((u64::from(bucket) << HALF_MAG) + (v >> bucket)) as usize
}

/// The lowest value of bucket `index` of the merged layout.
fn value_at(index: usize) -> u64 {
    let i = index as u64;
    match (i >> HALF_MAG).checked_sub(1) {
        None | Some(0) => i,
        Some(b) => ((i & ((1 << HALF_MAG) - 1)) + (1 << HALF_MAG)) << b,
    }
}

impl Default for Merged {
    fn default() -> Self {
        Merged::new()
    }
}

impl Merged {
    pub fn new() -> Merged {
        let mut hist = Histogram::<u64>::new(3).expect("3 significant digits are valid");
        hist.auto(true);
        Merged {
            inner: std::cell::RefCell::new(Inner {
                hist,
                pending: Vec::new(),
                dirty: false,
            }),
            parts: 0,
        }
    }

    /// The merged histogram, the counts given so far in it.
    fn hist(&self) -> std::cell::Ref<'_, Histogram<u64>> {
        if self.inner.borrow().dirty {
            let mut guard = self.inner.borrow_mut();
            let inner = &mut *guard;
            for (i, n) in inner.pending.iter_mut().enumerate() {
                if *n > 0 {
                    // Below BY_INDEX_BELOW: within what the histogram grows to.
                    let _ = inner.hist.record_n(value_at(i), *n);
                    *n = 0;
                }
            }
            inner.dirty = false;
        }
        std::cell::Ref::map(self.inner.borrow(), |i| &i.hist)
    }

    /// Add a decoded histogram.
    pub fn add(&mut self, h: &Histogram<u64>) -> Result<(), HistError> {
        self.inner
            .get_mut()
            .hist
            .add(h)
            .map_err(|e| HistError(format!("cannot merge: {e:?}")))?;
        self.parts += 1;
        Ok(())
    }

    /// Add a histogram read by [`decode_counts`].
    pub fn add_counts(&mut self, counts: &[(u64, u64)]) -> Result<(), HistError> {
        let inner = self.inner.get_mut();
        for &(v, n) in counts {
            if n == 0 {
                continue;
            }
            if v < BY_INDEX_BELOW {
                let i = index_of(v);
                if i >= inner.pending.len() {
                    inner.pending.resize(i + 1, 0);
                }
                inner.pending[i] = inner.pending[i].saturating_add(n);
                inner.dirty = true;
            } else {
                inner
                    .hist
                    .record_n(v, n)
                    .map_err(|e| HistError(format!("cannot merge: {e:?}")))?;
            }
        }
        self.parts += 1;
        Ok(())
    }

    /// The value at quantile `q` (0 < q <= 1), microseconds, of the
    /// histogram that `counts` ([`decode_counts`]: ascending values) would
    /// make in this layout on their own — what adding them to an empty
    /// `Merged` and asking [`quantile_us`](Self::quantile_us) gives, without
    /// building its bucket array: HdrHistogram's rule (the first bucket
    /// whose running count reaches ⌈q · total⌉, at least 1, reported as
    /// the highest value equivalent to it in this layout).
    pub fn quantile_of_counts_us(&self, counts: &[(u64, u64)], q: f64) -> Option<f64> {
        let q = q.min(1.0);
        let total = counts.iter().fold(0u64, |t, &(_, n)| t.saturating_add(n));
        if total == 0 || q <= 0.0 {
            return None;
        }
        let at = ((q * total as f64).ceil() as u64).max(1);
        let mut run = 0u64;
        for &(v, n) in counts {
            run = run.saturating_add(n);
            if n > 0 && run >= at {
                let h = &self.inner.borrow().hist;
                return Some(h.highest_equivalent(v) as f64 / 1000.0);
            }
        }
        None
    }

    /// Empty it again, keeping its buckets' memory.
    pub fn clear(&mut self) {
        let inner = self.inner.get_mut();
        inner.hist.reset();
        inner.pending.iter_mut().for_each(|n| *n = 0);
        inner.dirty = false;
        self.parts = 0;
    }

    pub fn samples(&self) -> u64 {
        self.hist().len()
    }

    /// The value at quantile `q` (0..=1), microseconds.
    pub fn quantile_us(&self, q: f64) -> Option<f64> {
        let h = self.hist();
        (!h.is_empty()).then(|| h.value_at_quantile(q) as f64 / 1000.0)
    }

    pub fn mean_us(&self) -> Option<f64> {
        let h = self.hist();
        (!h.is_empty()).then(|| h.mean() / 1000.0)
    }

    pub fn min_us(&self) -> Option<f64> {
        let h = self.hist();
        (!h.is_empty()).then(|| h.min() as f64 / 1000.0)
    }

    pub fn max_us(&self) -> Option<f64> {
        let h = self.hist();
        (!h.is_empty()).then(|| h.max() as f64 / 1000.0)
    }

    /// Percentile curve for charts: (percentile, µs) at 0, 50, 90, 99,
    /// 99.9, ... up to what the sample count resolves, then the maximum.
    pub fn curve(&self) -> Vec<(f64, f64)> {
        let h = self.hist();
        if h.is_empty() {
            return Vec::new();
        }
        let n = h.len() as f64;
        let mut out = Vec::new();
        for q in [
            0.0, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9995, 0.9999, 0.99999,
        ] {
            // A quantile needs about 1/(1-q) samples to mean anything.
            if q > 0.0 && (1.0 - q) * n < 1.0 {
                break;
            }
            out.push((q * 100.0, h.value_at_quantile(q) as f64 / 1000.0));
        }
        out.push((100.0, h.max() as f64 / 1000.0));
        out
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use hdrhistogram::serialization::{Serializer, V2DeflateSerializer, V2Serializer};

    /// A repeat's quantile read from its buckets is the one a histogram of
    /// the merged layout holding only them gives, for stored histograms
    /// of other layouts too (2 and 4 significant digits, a higher lowest
    /// value) and at the edges (one sample, every sample in one bucket).
    #[test]
    fn quantile_of_counts_is_the_scratch_histograms() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15u64);
        let reference = Merged::new();
        for case in 0..200u64 {
            let (low, digits) = [(1, 3), (1, 2), (1, 4), (1000, 3)][case as usize % 4];
            let mut h = Histogram::<u64>::new_with_bounds(low, 3_600_000_000_000, digits).unwrap();
            let samples = match case % 5 {
                0 => 1,
                1 => 2,
                _ => 1 + next() % 5000,
            };
            for _ in 0..samples {
                let v = if case % 7 == 0 {
                    4_321
                } else {
                    low + next() % [2_000, 90_000, 5_000_000][(case % 3) as usize]
                };
                h.record(v).unwrap();
            }
            let counts = decode_counts(&encode(&h, true)).unwrap();
            for q in [0.5, 0.01, 0.9, 0.999, 1.0] {
                let mut scratch = Merged::new();
                scratch.add_counts(&counts).unwrap();
                assert_eq!(
                    reference.quantile_of_counts_us(&counts, q),
                    scratch.quantile_us(q),
                    "case {case}, q {q}, {samples} samples, layout {low}/{digits}"
                );
            }
        }
        assert_eq!(reference.quantile_of_counts_us(&[], 0.5), None);
        assert_eq!(reference.quantile_of_counts_us(&[(10, 0)], 0.5), None);
    }

    /// Buckets added by index make the histogram that recording each of
    /// them makes (counts, total, minimum, maximum, mean, percentiles), for
    /// values across the whole range and beyond it, merged in any order,
    /// with queries between the merges; a bucket's index and lowest value
    /// are HdrHistogram's.
    #[test]
    fn merging_by_index_is_recording_each_bucket() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1du64);
        let layout = Histogram::<u64>::new(3).unwrap();
        for shift in 0..63 {
            for v in [
                1u64 << shift,
                (1 << shift) + 1,
                (3 << shift) / 2,
                next() >> (63 - shift),
            ] {
                if v < BY_INDEX_BELOW {
                    assert_eq!(value_at(index_of(v)), layout.lowest_equivalent(v), "{v}");
                    assert_eq!(index_of(value_at(index_of(v))), index_of(v), "{v}");
                }
            }
        }
        for case in 0..60 {
            let mut merged = Merged::new();
            let mut reference = Histogram::<u64>::new(3).unwrap();
            reference.auto(true);
            for part in 0..1 + case % 7 {
                let top = [5_000u64, 2_000_000, 3_600_000_000_000, 1 << 50][(case + part) % 4];
                let mut counts: Vec<(u64, u64)> = (0..1 + next() % 300)
                    .map(|_| (layout.lowest_equivalent(next() % top), next() % 1000))
                    .collect();
                counts.sort();
                merged.add_counts(&counts).unwrap();
                for &(v, n) in &counts {
                    if n > 0 {
                        reference.record_n(v, n).unwrap();
                    }
                }
                if part % 3 == 1 {
                    assert_eq!(merged.samples(), reference.len());
                }
            }
            assert_eq!(*merged.hist(), reference, "case {case}");
            assert_eq!(
                merged.min_us(),
                (!reference.is_empty()).then(|| reference.min() as f64 / 1000.0)
            );
            assert_eq!(
                merged.max_us(),
                (!reference.is_empty()).then(|| reference.max() as f64 / 1000.0)
            );
            for q in [0.5, 0.99, 0.999] {
                assert_eq!(
                    merged.quantile_us(q),
                    (!reference.is_empty()).then(|| reference.value_at_quantile(q) as f64 / 1000.0)
                );
            }
            merged.clear();
            assert_eq!((merged.samples(), merged.parts), (0, 0));
        }
    }

    /// A reproducible stream of pseudo-random numbers (xorshift64) for
    /// generated test cases.
    pub(crate) fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
    }

    pub(crate) fn encode(h: &Histogram<u64>, compressed: bool) -> String {
        use base64::Engine;
        let mut buf = Vec::new();
        if compressed {
            V2DeflateSerializer::new().serialize(h, &mut buf).unwrap();
        } else {
            V2Serializer::new().serialize(h, &mut buf).unwrap();
        }
        base64::engine::general_purpose::STANDARD.encode(buf)
    }

    fn sample(values_ns: &[u64]) -> Histogram<u64> {
        let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
        for &v in values_ns {
            h.record(v).unwrap();
        }
        h
    }

    #[test]
    fn round_trip_and_merge() {
        let a = sample(&[10_000; 90]);
        let b = sample(&[100_000; 10]);
        let da = decode(&encode(&a, true)).unwrap();
        let db = decode(&encode(&b, false)).unwrap();
        let mut m = Merged::new();
        m.add(&da).unwrap();
        m.add(&db).unwrap();
        assert_eq!(m.samples(), 100);
        assert!((m.quantile_us(0.5).unwrap() - 10.0).abs() < 0.02);
        // p95 lies in the slow repeat's samples: only a merge sees it.
        assert!((m.quantile_us(0.95).unwrap() - 100.0).abs() < 0.1);
        let c = m.curve();
        assert_eq!(c.first().unwrap().0, 0.0);
        assert_eq!(c.last().unwrap().0, 100.0);
        assert!(c.iter().all(|(q, _)| *q <= 100.0));
        // 100 samples resolve p99 but not p99.9.
        assert!(c.iter().any(|(q, _)| *q == 99.0));
        assert!(!c.iter().any(|(q, _)| *q == 99.9));
    }

    /// The sparse path gives the merge and the percentiles of the full one.
    #[test]
    fn counts_merge_like_histograms() {
        let a = sample(&[3_000, 3_001, 3_500, 9_000, 250_000, 250_000, 7_000_000]);
        let b = sample(&[1, 2_999, 3_000, 1_000_000_000]);
        let (ta, tb) = (encode(&a, true), encode(&b, false));
        let mut full = Merged::new();
        full.add(&decode(&ta).unwrap()).unwrap();
        full.add(&decode(&tb).unwrap()).unwrap();
        let mut sparse = Merged::new();
        sparse.add_counts(&decode_counts(&ta).unwrap()).unwrap();
        sparse.add_counts(&decode_counts(&tb).unwrap()).unwrap();
        assert_eq!((sparse.samples(), sparse.parts), (11, 2));
        for q in [0.0, 0.1, 0.5, 0.9, 0.99, 1.0] {
            assert_eq!(sparse.quantile_us(q), full.quantile_us(q), "q {q}");
        }
        assert_eq!(sparse.curve(), full.curve());
        sparse.clear();
        assert_eq!((sparse.samples(), sparse.parts), (0, 0));
        // The same refusals as decode.
        assert!(decode_counts("not base64!").is_err());
    }

    #[test]
    fn hostile_inputs_are_refused() {
        use base64::Engine;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let err = |s: &str| decode(s).unwrap_err().0;
        assert!(err("not base64!").contains("not base64"));
        assert!(err(&b64(b"HISTxxxx")).contains("wrong cookie"));
        assert!(err(&"A".repeat(V2Bytes::MAX_TEXT + 4)).contains("accepted"));
        // Compressed length that lies.
        let mut raw = V2Bytes::COMPRESSED_COOKIE.to_be_bytes().to_vec();
        raw.extend(1000u32.to_be_bytes());
        raw.extend([1, 2, 3]);
        assert!(err(&b64(&raw)).contains("announced"));
        // A deflate bomb: 2x the inflate limit of zeros.
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut z, &vec![0u8; (V2Bytes::MAX_INFLATED as usize) * 2])
            .unwrap();
        let body = z.finish().unwrap();
        let mut raw = V2Bytes::COMPRESSED_COOKIE.to_be_bytes().to_vec();
        raw.extend((body.len() as u32).to_be_bytes());
        raw.extend(body);
        assert!(err(&b64(&raw)).contains("inflates"));
        // A header announcing a huge range (allocation bait).
        let good = sample(&[1000]);
        let plain = {
            let mut buf = Vec::new();
            V2Serializer::new().serialize(&good, &mut buf).unwrap();
            buf
        };
        let mut evil = plain.clone();
        evil[24..32].copy_from_slice(&u64::MAX.to_be_bytes());
        assert!(err(&b64(&evil)).contains("parameters"));
        let mut evil = plain.clone();
        evil[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(err(&b64(&evil)).contains("payload"));
        let mut evil = plain.clone();
        evil[12..16].copy_from_slice(&9u32.to_be_bytes());
        assert!(err(&b64(&evil)).contains("parameters"));
        // A lowest value whose double does not fit (found by fuzzing: it
        // overflowed the range check), by both readers.
        let mut evil = plain;
        evil[16..24].copy_from_slice(&(u64::MAX / 2 + 2).to_be_bytes());
        assert!(err(&b64(&evil)).contains("parameters"));
        assert!(decode_counts(&b64(&evil))
            .unwrap_err()
            .0
            .contains("parameters"));
        assert!(err(&b64(&V2Bytes::COOKIE.to_be_bytes())).contains("header"));
    }
}
