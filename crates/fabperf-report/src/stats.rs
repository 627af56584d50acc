//! Statistics over the repeats of a measurement: mean, sample standard
//! deviation, the 95 % confidence interval of the mean (Student's t), and
//! warnings in words when the repeats are too few or too noisy to trust —
//! what hyperfine prints under a benchmark, for repeats of a network test.

use serde::Serialize;

/// Two-sided 95 % quantiles of Student's t (t₀.₉₇₅) for 1..=30 degrees of
/// freedom.
const T975: [f64; 30] = [
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281, 2.2010,
    2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860, 2.0796, 2.0739, 2.0687,
    2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
];

/// t₀.₉₇₅ with `df` degrees of freedom: the table up to 30, then the
/// Cornish–Fisher expansion around the normal quantile (error < 1e-4 from
/// 30 on).
pub fn t975(df: usize) -> f64 {
    if df == 0 {
        return f64::INFINITY;
    }
    if df <= T975.len() {
        return T975[df - 1];
    }
    let z: f64 = 1.959_963_984_540_054;
    let v = df as f64;
    let (z3, z5, z7) = (z.powi(3), z.powi(5), z.powi(7));
    z + (z3 + z) / (4.0 * v)
        + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * v * v)
        + (3.0 * z7 + 19.0 * z5 + 17.0 * z3 - 15.0 * z) / (384.0 * v * v * v)
}

/// Fewer repeats than this get a "too few" warning.
pub const MIN_REPEATS: usize = 3;
/// A 95 % CI half-width above this fraction of the mean is "too noisy".
pub const NOISY_REL_CI: f64 = 0.10;
/// Modified z-score (Iglewicz–Hoaglin) above which a repeat is an outlier.
/// hyperfine uses the same score with a threshold of 14 over its many runs;
/// a plan has a handful of repeats, where the textbook 3.5 applies.
pub const OUTLIER_Z: f64 = 3.5;

/// Summary of the repeats of one figure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stats {
    pub n: usize,
    pub mean: f64,
    /// Sample standard deviation (n − 1); `None` for one repeat.
    pub stdev: Option<f64>,
    /// Half-width of the 95 % confidence interval of the mean: the mean is
    /// in `mean ± ci95` with 95 % confidence. `None` for one repeat.
    pub ci95: Option<f64>,
    pub min: f64,
    pub max: f64,
    pub median: f64,
}

impl Stats {
    /// Summarise `values` (non-finite values are left out); `None` when no
    /// finite value is left.
    pub fn of(values: &[f64]) -> Option<Stats> {
        let v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        let n = v.len();
        if n == 0 {
            return None;
        }
        let mean = v.iter().sum::<f64>() / n as f64;
        let (stdev, ci95) = if n > 1 {
            let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
            let sd = var.sqrt();
            (Some(sd), Some(t975(n - 1) * sd / (n as f64).sqrt()))
        } else {
            (None, None)
        };
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some(Stats {
            n,
            mean,
            stdev,
            ci95,
            min,
            max,
            median: median(&v),
        })
    }

    /// The CI half-width relative to the mean.
    pub fn rel_ci(&self) -> Option<f64> {
        let ci = self.ci95?;
        (self.mean.abs() > 0.0).then(|| ci / self.mean.abs())
    }

    /// Lower end of the 95 % CI (the mean for one repeat).
    pub fn ci_low(&self) -> f64 {
        self.mean - self.ci95.unwrap_or(0.0)
    }

    /// Upper end of the 95 % CI (the mean for one repeat).
    pub fn ci_high(&self) -> f64 {
        self.mean + self.ci95.unwrap_or(0.0)
    }
}

/// Median of finite values (the mean of the middle two for an even count).
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Modified z-scores (0.6745 (x − median) / MAD); `None` when the MAD is 0
/// (half the repeats or more are identical: no scale to judge by).
pub fn modified_zscores(values: &[f64]) -> Option<Vec<f64>> {
    let med = median(values);
    let dev: Vec<f64> = values.iter().map(|x| (x - med).abs()).collect();
    let mad = median(&dev);
    if mad.is_nan() || mad <= 0.0 {
        return None;
    }
    Some(values.iter().map(|x| 0.6745 * (x - med) / mad).collect())
}

/// Why a figure should not be trusted as it is.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StatWarning {
    /// Fewer than [`MIN_REPEATS`] repeats.
    TooFew { n: usize },
    /// The 95 % CI is wider than [`NOISY_REL_CI`] of the mean.
    Noisy { rel_ci: f64 },
    /// The first repeat is an outlier (a warm-up effect).
    SlowFirst { first: f64, median: f64 },
    /// Other repeats are outliers.
    Outliers { count: usize },
}

impl StatWarning {
    /// The warning in words; `unit` names the figure's unit.
    pub fn text(&self, unit: &str) -> String {
        match self {
            StatWarning::TooFew { n: 1 } => {
                "1 repeat: no spread and no confidence interval; set repeats = 3 or more in the plan to judge the noise".into()
            }
            StatWarning::TooFew { n } => format!(
                "{n} repeats: too few to trust the interval (t = {:.2}); set repeats = {MIN_REPEATS} or more",
                t975(n.saturating_sub(1))
            ),
            StatWarning::Noisy { rel_ci } => format!(
                "noisy: the 95 % CI is ±{:.0} % of the mean; re-run on a quiet system or with more repeats before drawing conclusions",
                rel_ci * 100.0
            ),
            StatWarning::SlowFirst { first, median } => format!(
                "the first repeat ({first:.2} {unit}) differs from the others (median {median:.2} {unit}): a warm-up effect (caches, neighbour discovery, slow start); consider a longer warm-up"
            ),
            StatWarning::Outliers { count } => format!(
                "{count} repeat(s) are statistical outliers; interference from other traffic or programs is likely, re-run on a quiet system"
            ),
        }
    }
}

/// The warnings for a set of repeats (in run order).
pub fn warnings(values: &[f64], stats: &Stats) -> Vec<StatWarning> {
    let mut out = Vec::new();
    if stats.n < MIN_REPEATS {
        out.push(StatWarning::TooFew { n: stats.n });
    } else if let Some(r) = stats.rel_ci() {
        if r > NOISY_REL_CI {
            out.push(StatWarning::Noisy { rel_ci: r });
        }
    }
    if stats.n >= MIN_REPEATS {
        if let Some(z) = modified_zscores(values) {
            if z[0].abs() > OUTLIER_Z {
                out.push(StatWarning::SlowFirst {
                    first: values[0],
                    median: stats.median,
                });
            } else {
                let count = z.iter().filter(|s| s.abs() > OUTLIER_Z).count();
                if count > 0 {
                    out.push(StatWarning::Outliers { count });
                }
            }
        }
    }
    out
}

/// Jain's fairness index of shares: (Σx)² / (n Σx²), 1 when all are equal,
/// 1/n when one takes everything. `None` for no values or all zero.
pub fn jain(values: &[f64]) -> Option<f64> {
    let v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    let s: f64 = v.iter().sum();
    let s2: f64 = v.iter().map(|x| x * x).sum();
    if v.is_empty() || s2.is_nan() || s2 <= 0.0 {
        return None;
    }
    Some(s * s / (v.len() as f64 * s2))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, eps: f64) -> bool {
        (a - b).abs() <= eps
    }

    #[test]
    fn mean_stdev_ci_by_hand() {
        // 9.0, 10.0, 11.0: mean 10, sample variance (1+0+1)/2 = 1, sd 1,
        // CI = t(2) * 1 / sqrt(3) = 4.3027 / 1.7321 = 2.4841.
        let s = Stats::of(&[9.0, 10.0, 11.0]).unwrap();
        assert_eq!(s.n, 3);
        assert!(close(s.mean, 10.0, 1e-12));
        assert!(close(s.stdev.unwrap(), 1.0, 1e-12));
        assert!(close(s.ci95.unwrap(), 2.4841, 1e-4), "{s:?}");
        assert_eq!((s.min, s.max, s.median), (9.0, 11.0, 10.0));
        // 2, 4, 4, 4, 5, 5, 7, 9: mean 5, sum of squares 32, var 32/7,
        // sd 2.13809, CI = 2.3646 * 2.13809 / sqrt(8) = 1.78750.
        let s = Stats::of(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert!(close(s.mean, 5.0, 1e-12));
        assert!(close(s.stdev.unwrap(), 2.138_09, 1e-5));
        assert!(close(s.ci95.unwrap(), 1.7875, 1e-4), "{s:?}");
        assert!(close(s.median, 4.5, 1e-12));
    }

    #[test]
    fn one_repeat_has_no_interval() {
        let s = Stats::of(&[3.5]).unwrap();
        assert_eq!(s.stdev, None);
        assert_eq!(s.ci95, None);
        assert_eq!(s.ci_low(), 3.5);
        assert_eq!(warnings(&[3.5], &s), vec![StatWarning::TooFew { n: 1 }]);
        assert!(Stats::of(&[]).is_none());
        assert!(Stats::of(&[f64::NAN]).is_none());
    }

    #[test]
    fn t_quantiles() {
        assert!(close(t975(1), 12.7062, 1e-4));
        assert!(close(t975(9), 2.2622, 1e-4));
        // Beyond the table: the expansion meets published values.
        assert!(close(t975(40), 2.0211, 2e-4), "{}", t975(40));
        assert!(close(t975(60), 2.0003, 2e-4), "{}", t975(60));
        assert!(close(t975(120), 1.9799, 2e-4), "{}", t975(120));
        assert!(close(t975(100_000), 1.96, 1e-3));
        assert!(t975(0).is_infinite());
        // Continuity at the table's end.
        assert!((t975(30) - t975(31)).abs() < 0.01);
    }

    #[test]
    fn noisy_and_outliers() {
        // 10, 20, 30: mean 20, sd 10, CI = 4.3027*10/1.732 = 24.8: ±124 %.
        let v = [10.0, 20.0, 30.0];
        let s = Stats::of(&v).unwrap();
        let w = warnings(&v, &s);
        assert!(matches!(w[0], StatWarning::Noisy { rel_ci } if close(rel_ci, 1.2421, 1e-3)));
        // A slow first repeat among steady ones.
        let v = [5.0, 9.4, 9.5, 9.6, 9.5, 9.4];
        let s = Stats::of(&v).unwrap();
        let w = warnings(&v, &s);
        assert!(
            w.iter().any(|w| matches!(w, StatWarning::SlowFirst { .. })),
            "{w:?}"
        );
        // An outlier later on.
        let v = [9.4, 9.5, 9.6, 9.5, 2.0, 9.4];
        let s = Stats::of(&v).unwrap();
        let w = warnings(&v, &s);
        assert!(w.contains(&StatWarning::Outliers { count: 1 }), "{w:?}");
        // Steady repeats: nothing to say.
        let v = [9.4, 9.5, 9.6];
        assert!(warnings(&v, &Stats::of(&v).unwrap()).is_empty());
        assert!(StatWarning::TooFew { n: 2 }
            .text("Gbit/s")
            .contains("12.71"));
    }

    #[test]
    fn jain_index() {
        assert!(close(jain(&[1.0, 1.0, 1.0]).unwrap(), 1.0, 1e-12));
        assert!(close(jain(&[1.0, 0.0, 0.0, 0.0]).unwrap(), 0.25, 1e-12));
        // (1+2+3)^2 / (3 * 14) = 36/42.
        assert!(close(jain(&[1.0, 2.0, 3.0]).unwrap(), 36.0 / 42.0, 1e-12));
        assert_eq!(jain(&[]), None);
        assert_eq!(jain(&[0.0, 0.0]), None);
    }
}
