//! A gate checked against a report: every row (mesh group, incast cell,
//! bisection) it selects is checked, each family's figures in its own
//! file; a gate that selects nothing fails, and a preset none of whose
//! gates applied fails.

use super::syntax::{Gate, Metric};
use super::{bisection, failed_cells, incast, mesh, rows};
use crate::analysis::{fmt_num, Report};
use crate::units::{size_label, Dim};
use serde::Serialize;

/// A violated gate on one row.
#[derive(Debug, Clone, Serialize)]
pub struct Violation {
    /// The row (or mesh group, incast, split) in words.
    pub subject: String,
    pub cells: Vec<String>,
    pub measured: String,
    pub required: String,
}

/// The result of one gate.
#[derive(Debug, Clone, Serialize)]
pub struct GateOutcome {
    pub gate: String,
    pub preset: Option<String>,
    /// Rows (groups, cells) the gate was checked on.
    pub checked: usize,
    pub violations: Vec<Violation>,
    /// A preset's gate that selected nothing (not a failure by itself).
    pub not_applicable: bool,
    /// What the figure leaves out, passed or not (e.g. mesh suspects that
    /// are not confirmed and so not counted).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl GateOutcome {
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// One gate being checked: how its figures print, and how one figure is
/// held to what the gate requires.
pub(super) struct Check<'a> {
    pub(super) g: &'a Gate,
    unit: &'static str,
    plain: bool,
}

impl Check<'_> {
    /// Counts print as integers, figures as fabperf prints numbers.
    fn show(&self, v: f64) -> String {
        let plain = self.plain;
        if plain && v.fract() == 0.0 && v.abs() < 1e15 {
            format!("{v:.0}")
        } else if plain {
            format!("{v:.3}")
        } else {
            fmt_num(v)
        }
    }

    /// Count `subject` as checked, and a violation when its figure is
    /// missing, the requirement cannot be set, or the figure fails it.
    pub(super) fn check(
        &self,
        out: &mut GateOutcome,
        subject: String,
        cells: Vec<String>,
        measured: Result<f64, String>,
        required: Result<(f64, String), String>,
    ) {
        let (g, unit) = (self.g, self.unit);
        let show = |v: f64| self.show(v);
        out.checked += 1;
        let m = match measured {
            Ok(m) => m,
            Err(why) => {
                out.violations.push(Violation {
                    subject,
                    cells,
                    measured: why,
                    required: match required {
                        Ok((req, words)) => format!("{} {}{unit}{words}", g.cmp.sym(), show(req)),
                        Err(e) => e,
                    },
                });
                return;
            }
        };
        match required {
            Ok((req, words)) => {
                if !g.cmp.holds(m, req) {
                    out.violations.push(Violation {
                        subject,
                        cells,
                        measured: format!("{}{unit}", show(m)),
                        required: format!("{} {}{unit}{words}", g.cmp.sym(), show(req)),
                    });
                }
            }
            Err(why) => out.violations.push(Violation {
                subject,
                cells,
                measured: format!("{}{unit}", show(m)),
                required: why,
            }),
        }
    }
}

/// A requirement in the gate's own unit, with no words.
pub(super) fn absolute(v: f64) -> Result<(f64, String), String> {
    Ok((v, String::new()))
}

/// Check `gate` against the report.
pub fn evaluate(g: &Gate, rep: &Report, preset: Option<&str>) -> GateOutcome {
    let mut out = GateOutcome {
        gate: g.text.clone(),
        preset: preset.map(str::to_string),
        checked: 0,
        violations: Vec::new(),
        not_applicable: false,
        notes: Vec::new(),
    };
    let c = Check {
        g,
        unit: g.metric.unit(),
        plain: g.metric.dim() == Dim::Plain,
    };
    let sel = &g.selectors;
    match &g.metric {
        Metric::Bw(_) | Metric::Lat(_) | Metric::UdpLoss => rows::check(&c, rep, &mut out),
        Metric::MeshOutliers
        | Metric::MeshSuspectNodes
        | Metric::MeshSuspectRails
        | Metric::MeshSuspectLinks
        | Metric::MeshFailed => mesh::check(&c, rep, &mut out),
        Metric::IncastJain | Metric::IncastMinShare | Metric::IncastBw => {
            incast::check(&c, rep, &mut out)
        }
        Metric::BisectionBw => bisection::check(&c, rep, &mut out),
        Metric::FailedCells => failed_cells::check(&c, rep, &mut out),
    }
    if out.checked == 0 {
        if preset.is_some() {
            out.not_applicable = true;
        } else {
            out.violations.push(Violation {
                subject: "nothing".into(),
                cells: Vec::new(),
                measured: "no measurement matches this gate".into(),
                required: format!(
                    "at least one{}",
                    match &sel.size {
                        Some(b) => format!(" at size {}", size_label(*b)),
                        None => String::new(),
                    }
                ),
            });
        }
    }
    out
}

/// Check every gate; a preset none of whose gates applied fails.
pub fn evaluate_all(gates: &[(Gate, Option<String>)], rep: &Report) -> Vec<GateOutcome> {
    let mut out: Vec<GateOutcome> = gates
        .iter()
        .map(|(g, p)| evaluate(g, rep, p.as_deref()))
        .collect();
    let mut presets: Vec<String> = gates.iter().filter_map(|(_, p)| p.clone()).collect();
    presets.dedup();
    for p in presets {
        let all_na = out
            .iter()
            .filter(|o| o.preset.as_deref() == Some(p.as_str()))
            .all(|o| o.not_applicable);
        if all_na {
            out.push(GateOutcome {
                gate: format!("preset {p}"),
                preset: Some(p.clone()),
                checked: 0,
                violations: vec![Violation {
                    subject: format!("run {}", rep.run.id),
                    cells: Vec::new(),
                    measured: "none of the preset's gates matches a measurement".into(),
                    required: "the measurements the preset judges (see `fabperf report --gate-preset list`)".into(),
                }],
                not_applicable: false,
                notes: Vec::new(),
            });
        }
    }
    out
}
