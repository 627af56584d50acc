//! Statistics over the repeats of a measurement: mean, sample standard
//! deviation, the 95 % confidence interval of the mean (Student's t), and
//! warnings in words when the repeats are too few or too noisy to trust —
//! what hyperfine prints under a benchmark, for repeats of a network test.

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};

/// The 0.975 quantile of Student's t with `df` degrees of freedom (the
/// factor of a two-sided 95 % interval), from statrs' inverse CDF; infinite
/// for 0 degrees of freedom (one value has no interval).
pub fn t975(df: usize) -> f64 {
    t_quantile(0.975, df as f64)
}

/// The `p` quantile of Student's t with `df` (possibly fractional, as
/// Welch's approximation gives) degrees of freedom.
fn t_quantile(p: f64, df: f64) -> f64 {
    if df.is_nan() || df <= 0.0 {
        return f64::INFINITY;
    }
    match StudentsT::new(0.0, 1.0, df) {
        Ok(t) => t.inverse_cdf(p),
        Err(_) => f64::INFINITY,
    }
}

/// Significance level of the two-sample test that decides whether a
/// difference to the baseline is noise.
pub const ALPHA: f64 = 0.05;

/// Welch's two-sample t-test of two sets of repeats (unequal variances).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Welch {
    /// Mean of `a` minus mean of `b`.
    pub diff: f64,
    /// t statistic.
    pub t: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub df: f64,
    /// Two-sided p-value: the chance of a difference at least this large
    /// when both sets come from populations with the same mean.
    pub p: f64,
    /// Half-width of the 95 % confidence interval of the difference.
    pub ci95: f64,
}

impl Welch {
    /// Is the difference significant at [`ALPHA`]?
    pub fn significant(&self) -> bool {
        self.p < ALPHA
    }
}

/// Welch's t-test of `a` against `b`; `None` unless both have at least two
/// repeats (one value has no variance to test against).
pub fn welch(a: &Stats, b: &Stats) -> Option<Welch> {
    let (sa, sb) = (a.stdev?, b.stdev?);
    let (va, vb) = (sa * sa / a.n as f64, sb * sb / b.n as f64);
    let diff = a.mean - b.mean;
    let se2 = va + vb;
    if se2.is_nan() || se2 <= 0.0 {
        // Both sets are constant: any difference is certain, none is none.
        let p = if diff == 0.0 { 1.0 } else { 0.0 };
        return Some(Welch {
            diff,
            t: if diff == 0.0 {
                0.0
            } else {
                diff.signum() * f64::INFINITY
            },
            df: (a.n + b.n - 2) as f64,
            p,
            ci95: 0.0,
        });
    }
    let se = se2.sqrt();
    let t = diff / se;
    let df = se2 * se2 / (va * va / (a.n - 1) as f64 + vb * vb / (b.n - 1) as f64);
    let dist = StudentsT::new(0.0, 1.0, df).ok()?;
    let p = (2.0 * dist.sf(t.abs())).clamp(0.0, 1.0);
    Some(Welch {
        diff,
        t,
        df,
        p,
        ci95: t_quantile(0.975, df) * se,
    })
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
        assert!(close(t975(2), 4.3027, 1e-4));
        assert!(close(t975(9), 2.2622, 1e-4));
        assert!(close(t975(30), 2.0423, 1e-4));
        // Published values (NIST/SEMATECH e-Handbook, table 1.3.6.7.2).
        assert!(close(t975(40), 2.0211, 1e-4), "{}", t975(40));
        assert!(close(t975(60), 2.0003, 1e-4), "{}", t975(60));
        assert!(close(t975(120), 1.9799, 1e-4), "{}", t975(120));
        assert!(close(t975(100_000), 1.96, 1e-3));
        assert!(t975(0).is_infinite());
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
    fn welch_against_overlapping_intervals() {
        // 10.0, 10.5, 11.0 (mean 10.5, sd 0.5, CI ±1.242) against 8.7, 9.0,
        // 9.3 (mean 9.0, sd 0.3, CI ±0.745): the intervals overlap (1.5 <
        // 1.242 + 0.745), yet the difference is real: Welch's t = 1.5 /
        // sqrt(0.25/3 + 0.09/3) = 4.4557 on 3.2748 degrees of freedom,
        // p = I_{df/(df+t²)}(df/2, 1/2) = 0.01745 (the regularized incomplete
        // beta function, evaluated with mpmath).
        let a = Stats::of(&[10.0, 10.5, 11.0]).unwrap();
        let b = Stats::of(&[8.7, 9.0, 9.3]).unwrap();
        assert!(a.ci_low() < b.ci_high(), "the intervals overlap");
        let w = welch(&a, &b).unwrap();
        assert!(close(w.t, 4.4557, 1e-3), "{w:?}");
        assert!(close(w.df, 3.2748, 1e-3), "{w:?}");
        assert!(close(w.p, 0.01745, 1e-4), "{w:?}");
        assert!(w.significant());
        // The same sets a little closer: not significant.
        let c = Stats::of(&[9.7, 10.0, 10.3]).unwrap();
        let w = welch(&a, &c).unwrap();
        assert!(!w.significant(), "{w:?}");
        // One repeat: no test; constant sets: certain either way.
        assert!(welch(&Stats::of(&[1.0]).unwrap(), &b).is_none());
        let k = Stats::of(&[2.0, 2.0]).unwrap();
        assert_eq!(welch(&k, &k).unwrap().p, 1.0);
        let k2 = Stats::of(&[3.0, 3.0]).unwrap();
        assert_eq!(welch(&k2, &k).unwrap().p, 0.0);
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
