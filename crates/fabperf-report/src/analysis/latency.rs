//! Latency of a row: merged histograms, or the repeats' own percentiles
//! when none were stored.

use super::accumulate::{Acc, Mean};
use super::report::{LatFigures, LatSource};
use crate::data::RecView;
use crate::hist;

/// The repeats' own latency percentiles, for a row without histograms:
/// the extremes and the means.
#[derive(Default)]
pub(super) struct StoredLat {
    pub(super) count: usize,
    pub(super) min: Option<f64>,
    pub(super) max: Option<f64>,
    pub(super) p50: Mean,
    pub(super) p90: Mean,
    pub(super) p99: Mean,
    pub(super) p999: Mean,
    pub(super) mean: Mean,
}

impl StoredLat {
    pub(super) fn push(&mut self, l: &crate::data::LatView) {
        self.count += 1;
        if let Some(v) = l.min {
            self.min = Some(self.min.map_or(v, |a| a.min(v)));
        }
        if let Some(v) = l.max {
            self.max = Some(self.max.map_or(v, |a| a.max(v)));
        }
        for (m, v) in [
            (&mut self.p50, l.p50),
            (&mut self.p90, l.p90),
            (&mut self.p99, l.p99),
            (&mut self.p999, l.p999),
            (&mut self.mean, l.mean),
        ] {
            if let Some(v) = v {
                m.push(v);
            }
        }
    }
}

/// Merge a record's histogram into the row's; the repeat's p50 (from its
/// histogram, else its stored percentile).
pub(super) fn add_latency(
    acc: &mut Acc,
    rec: &RecView,
    cell: &str,
    notes: &mut Vec<String>,
) -> Option<f64> {
    acc.lat_kind = acc
        .lat_kind
        .clone()
        .or(rec.lat.as_ref().and_then(|l| l.kind.clone()));
    // Read sparsely (a mesh report merges a histogram per pair), each
    // repeat's p50 from its own buckets in the merged histogram's layout.
    let decoded = rec.lat_hist.as_deref().map(hist::decode_counts);
    let mut hp50 = None;
    match decoded {
        Some(Ok(c)) if c.iter().any(|&(_, n)| n > 0) => {
            hp50 = acc.hists.quantile_of_counts_us(&c, 0.5);
            if let Err(e) = acc.hists.add_counts(&c) {
                notes.push(format!("cell {cell}: {e}"));
                acc.hist_missing += 1;
            }
        }
        Some(Err(e)) => {
            notes.push(format!("cell {cell}: {e}; its stored percentiles are used"));
            acc.hist_missing += 1;
        }
        _ => acc.hist_missing += 1,
    }
    let stored = rec.lat.clone().unwrap_or_default();
    let p50 = hp50.or(stored.p50);
    acc.stored.push(&stored);
    p50
}

pub(super) fn lat_figures(acc: &Acc) -> LatFigures {
    if acc.hist_missing == 0 && acc.hists.parts > 0 {
        let h = &acc.hists;
        return LatFigures {
            min: h.min_us(),
            p50: h.quantile_us(0.5),
            p90: h.quantile_us(0.9),
            p99: h.quantile_us(0.99),
            p999: h.quantile_us(0.999),
            max: h.max_us(),
            mean: h.mean_us(),
            kind: acc.lat_kind.clone(),
            source: LatSource::Histograms {
                repeats: h.parts,
                samples: h.samples(),
            },
            curve: h.curve(),
        };
    }
    let st = &acc.stored;
    let (min, max) = (st.min, st.max);
    LatFigures {
        min,
        p50: st.p50.mean(),
        p90: st.p90.mean(),
        p99: st.p99.mean(),
        p999: st.p999.mean(),
        max,
        mean: st.mean.mean(),
        kind: acc.lat_kind.clone(),
        source: LatSource::StoredPercentiles,
        curve: Vec::new(),
    }
}
