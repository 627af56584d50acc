//! Pass/fail gates over a report, for acceptance runs and CI pipelines.
//!
//! ```text
//! gate      = { selector } metric [ stat ] cmp rhs
//! selector  = ( "path" | "test" | "kind" | "op" | "size" | "node" | "direction" ) ":" value
//! metric    = "tcp-bw" | "udp-bw" | "rdma-bw" | "bw"             bandwidth rows, Gbit/s
//!           | "tcp-lat" | "udp-lat" | "rdma-lat" | "lat"          latency rows, µs
//!           | "udp-loss"                                         UDP rows, percent lost
//!           | "mesh" ( "outliers" | "suspect-nodes" | "suspect-rails" | "suspect-links" | "failed" )
//!           | "incast" ( "jain" | "min-share" | "bw" )
//!           | "bisection" "bw"
//!           | "failed-cells"
//! stat      = bandwidth: "mean" (default) | "min" | "max" | "ci-low"
//!             latency:   "p50" (default) | "p90" | "p99" | "p999" | "mean" | "min" | "max"
//! cmp       = ">=" | ">" | "<=" | "<" | "==" | "!="
//! rhs       = number [ unit ]                      90Gbps, 50us, 0.5%, 0
//!           | number "%" reference                  90% port_rate, 80% path:host
//!           | number "*" reference                  0.8 * path:host
//!           | reference                            port_rate, path:host
//! reference = "port_rate" | "path:" NAME
//! ```
//!
//! Mesh counts are of confirmed findings: suspects whose re-tests agreed,
//! nodes and links named on them or on failed cells (a node whose every
//! cell failed is a suspect node). Unconfirmed suspects are not counted; the
//! gate's notes say how many there are.
//!
//! Each gate is checked against every row (or mesh group, incast cell,
//! bisection) it selects; a gate that selects nothing fails, because an
//! acceptance check that measured nothing has not passed. `ci-low` on a
//! row with one repeat fails ("needs ≥ 2 repeats") instead of using the
//! mean; a `port_rate` threshold on a figure above its port rate fails
//! with that finding; `path:NAME` compares with the like row only.

use crate::analysis::{fmt_num, Family, Report, Row};
use crate::units::{factor, parse_size, size_label, Dim};
use serde::Serialize;
use std::fmt;

/// Longest gate accepted.
pub const MAX_GATE_LEN: usize = 1024;

/// A gate that could not be parsed: the column (1-based, in characters)
/// where it went wrong and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateError {
    pub gate: String,
    pub col: usize,
    pub msg: String,
}

impl fmt::Display for GateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: String = self
            .gate
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(200)
            .collect();
        writeln!(f, "column {}: {}", self.col, self.msg)?;
        writeln!(f, "  {shown}")?;
        write!(f, "  {}^", " ".repeat(self.col.saturating_sub(1).min(200)))
    }
}

impl std::error::Error for GateError {}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(String),
    Num(f64, String),
    Op(Cmp),
    Colon,
    Star,
    Percent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Cmp {
    #[serde(rename = ">=")]
    Ge,
    #[serde(rename = ">")]
    Gt,
    #[serde(rename = "<=")]
    Le,
    #[serde(rename = "<")]
    Lt,
    #[serde(rename = "==")]
    Eq,
    #[serde(rename = "!=")]
    Ne,
}

impl Cmp {
    pub fn holds(self, a: f64, b: f64) -> bool {
        match self {
            Cmp::Ge => a >= b,
            Cmp::Gt => a > b,
            Cmp::Le => a <= b,
            Cmp::Lt => a < b,
            Cmp::Eq => (a - b).abs() <= 1e-9 * b.abs().max(1.0),
            Cmp::Ne => (a - b).abs() > 1e-9 * b.abs().max(1.0),
        }
    }
    pub fn sym(self) -> &'static str {
        match self {
            Cmp::Ge => ">=",
            Cmp::Gt => ">",
            Cmp::Le => "<=",
            Cmp::Lt => "<",
            Cmp::Eq => "==",
            Cmp::Ne => "!=",
        }
    }
}

/// What a gate selects rows by.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Selectors {
    pub path: Option<String>,
    pub test: Option<String>,
    pub kind: Option<String>,
    pub op: Option<String>,
    pub size: Option<u64>,
    pub node: Option<String>,
    pub direction: Option<String>,
}

/// What a gate measures.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Bandwidth rows of a kind (`None`: any bandwidth kind).
    Bw(Option<String>),
    Lat(Option<String>),
    UdpLoss,
    MeshOutliers,
    MeshSuspectNodes,
    /// Rails named instead of their nodes (a leaf failing on every node).
    MeshSuspectRails,
    MeshSuspectLinks,
    MeshFailed,
    IncastJain,
    IncastMinShare,
    IncastBw,
    BisectionBw,
    FailedCells,
}

impl Metric {
    fn dim(&self) -> Dim {
        match self {
            Metric::Bw(_) | Metric::IncastBw | Metric::BisectionBw => Dim::Bandwidth,
            Metric::Lat(_) => Dim::Latency,
            Metric::UdpLoss => Dim::Percent,
            _ => Dim::Plain,
        }
    }
    fn unit(&self) -> &'static str {
        match self.dim() {
            Dim::Bandwidth => " Gbit/s",
            Dim::Latency => " µs",
            Dim::Percent => " %",
            _ => "",
        }
    }
    fn takes_port_rate(&self) -> bool {
        matches!(self, Metric::Bw(_) | Metric::IncastBw | Metric::BisectionBw)
    }
    fn takes_path(&self) -> bool {
        matches!(self, Metric::Bw(_) | Metric::Lat(_) | Metric::UdpLoss)
    }
}

/// Which figure of a row a gate compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stat {
    Mean,
    Min,
    Max,
    CiLow,
    P50,
    P90,
    P99,
    P999,
}

impl Stat {
    fn name(self) -> &'static str {
        match self {
            Stat::Mean => "mean",
            Stat::Min => "min",
            Stat::Max => "max",
            Stat::CiLow => "ci-low",
            Stat::P50 => "p50",
            Stat::P90 => "p90",
            Stat::P99 => "p99",
            Stat::P999 => "p999",
        }
    }
}

/// What the threshold is relative to.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reference {
    PortRate,
    Path(String),
}

/// The right-hand side.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rhs {
    /// In the metric's base unit (Gbit/s, µs, percent, count).
    Value(f64),
    /// `factor × reference`.
    Relative(f64, Reference),
}

/// A parsed gate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gate {
    pub text: String,
    pub selectors: Selectors,
    pub metric: Metric,
    pub stat: Option<Stat>,
    pub cmp: Cmp,
    pub rhs: Rhs,
}

fn lex(src: &str) -> Result<Vec<(Tok, usize, usize)>, GateError> {
    let err = |col: usize, msg: String| GateError {
        gate: src.to_string(),
        col,
        msg,
    };
    let chars: Vec<char> = src.chars().collect();
    if chars.len() > MAX_GATE_LEN {
        return Err(err(
            MAX_GATE_LEN + 1,
            format!("a gate is at most {MAX_GATE_LEN} characters"),
        ));
    }
    let mut out = Vec::new();
    let mut i = 0;
    let is_word = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/');
    while i < chars.len() {
        let c = chars[i];
        let col = i + 1;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && is_word(chars[i]) {
                i += 1;
            }
            out.push((Tok::Word(chars[start..i].iter().collect()), col, i - start));
            continue;
        }
        if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            // An exponent: e, optional sign, digits.
            if i < chars.len() && (chars[i] == 'e' || chars[i] == 'E') {
                let mut j = i + 1;
                if j < chars.len() && (chars[j] == '+' || chars[j] == '-') {
                    j += 1;
                }
                if j < chars.len() && chars[j].is_ascii_digit() {
                    while j < chars.len() && chars[j].is_ascii_digit() {
                        j += 1;
                    }
                    i = j;
                }
            }
            let num: String = chars[start..i].iter().collect();
            let v: f64 = num
                .parse()
                .map_err(|_| err(col, format!("`{num}` is not a number")))?;
            if !v.is_finite() {
                return Err(err(col, format!("`{num}` is not a finite number")));
            }
            let ustart = i;
            while i < chars.len()
                && (chars[i].is_alphabetic() || matches!(chars[i], '/' | 'µ' | 'μ' | '%'))
            {
                i += 1;
                if chars[i - 1] == '%' {
                    break;
                }
            }
            let unit: String = chars[ustart..i].iter().collect();
            out.push((Tok::Num(v, unit), col, i - start));
            continue;
        }
        let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
        let (tok, len) = match (two.as_str(), c) {
            (">=", _) => (Tok::Op(Cmp::Ge), 2),
            ("<=", _) => (Tok::Op(Cmp::Le), 2),
            ("==", _) => (Tok::Op(Cmp::Eq), 2),
            ("!=", _) => (Tok::Op(Cmp::Ne), 2),
            (_, '>') => (Tok::Op(Cmp::Gt), 1),
            (_, '<') => (Tok::Op(Cmp::Lt), 1),
            (_, '=') => return Err(err(col, "`=` alone is no comparison; use `==`".into())),
            (_, ':') => (Tok::Colon, 1),
            (_, '*') => (Tok::Star, 1),
            (_, '%') => (Tok::Percent, 1),
            _ => {
                return Err(err(
                    col,
                    format!(
                        "unexpected character {:?}; a gate is `[selector:value ...] metric [stat] op threshold`",
                        c
                    ),
                ))
            }
        };
        out.push((tok, col, len));
        i += len;
    }
    Ok(out)
}

const SELECTORS: &str = "path:, test:, kind:, op:, size:, node:, direction:";
const METRICS: &str = "tcp-bw, udp-bw, rdma-bw, bw, tcp-lat, udp-lat, rdma-lat, lat, udp-loss, \
                       mesh outliers|suspect-nodes|suspect-rails|suspect-links|failed, incast jain|min-share|bw, \
                       bisection bw, failed-cells";

struct P<'a> {
    src: &'a str,
    toks: Vec<(Tok, usize, usize)>,
    i: usize,
}

impl P<'_> {
    fn err(&self, col: usize, msg: impl Into<String>) -> GateError {
        GateError {
            gate: self.src.to_string(),
            col,
            msg: msg.into(),
        }
    }
    fn end_col(&self) -> usize {
        self.src.chars().count() + 1
    }
    fn peek(&self) -> Option<&(Tok, usize, usize)> {
        self.toks.get(self.i)
    }
    fn col(&self) -> usize {
        self.peek().map(|t| t.1).unwrap_or_else(|| self.end_col())
    }
    fn next(&mut self) -> Option<(Tok, usize, usize)> {
        let t = self.toks.get(self.i).cloned();
        self.i += 1;
        t
    }
    fn describe(t: Option<&(Tok, usize, usize)>) -> String {
        match t {
            None => "the end of the gate".into(),
            Some((Tok::Word(w), ..)) => format!("`{w}`"),
            Some((Tok::Num(v, u), ..)) => format!("`{v}{u}`"),
            Some((Tok::Op(c), ..)) => format!("`{}`", c.sym()),
            Some((Tok::Colon, ..)) => "`:`".into(),
            Some((Tok::Star, ..)) => "`*`".into(),
            Some((Tok::Percent, ..)) => "`%`".into(),
        }
    }

    /// A selector's value: a word or a number with its unit (sizes).
    fn value(&mut self, what: &str) -> Result<(String, usize), GateError> {
        match self.next() {
            Some((Tok::Word(w), col, _)) => Ok((w, col)),
            Some((Tok::Num(v, u), col, _)) => Ok((format!("{v}{u}"), col)),
            t => {
                let col = t.as_ref().map(|t| t.1).unwrap_or_else(|| self.end_col());
                Err(self.err(
                    col,
                    format!(
                        "expected the {what} after `:`, found {}",
                        Self::describe(t.as_ref())
                    ),
                ))
            }
        }
    }

    /// The word after `mesh`, `incast`, `bisection`.
    fn sub(&mut self, of: &str, opts: &[(&str, Metric)]) -> Result<Metric, GateError> {
        let col = self.col();
        let names = opts.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ");
        match self.next() {
            Some((Tok::Word(w), ..)) => match opts.iter().find(|(n, _)| *n == w) {
                Some((_, m)) => Ok(m.clone()),
                None => Err(self.err(
                    col,
                    format!("`{of} {w}` is no metric; after `{of}` comes {names}"),
                )),
            },
            t => Err(self.err(
                col,
                format!(
                    "after `{of}` comes {names}; found {}",
                    Self::describe(t.as_ref())
                ),
            )),
        }
    }

    fn gate(&mut self) -> Result<Gate, GateError> {
        let mut sel = Selectors::default();
        // Selectors: word ':' value, until the metric.
        while let (Some((Tok::Word(w), col, _)), Some((Tok::Colon, ..))) =
            (self.toks.get(self.i).cloned(), self.toks.get(self.i + 1))
        {
            self.i += 2;
            let (v, vcol) = self.value(&format!("{w} name"))?;
            let slot = match w.as_str() {
                "path" => &mut sel.path,
                "test" => &mut sel.test,
                "kind" => &mut sel.kind,
                "op" => &mut sel.op,
                "node" => &mut sel.node,
                "direction" | "dir" => &mut sel.direction,
                "size" => {
                    if sel.size.is_some() {
                        return Err(self.err(col, "`size:` given twice"));
                    }
                    sel.size = Some(parse_size(&v).ok_or_else(|| {
                        self.err(vcol, format!("`{v}` is not a size (64, 1472, 64K, 1M)"))
                    })?);
                    continue;
                }
                _ => {
                    return Err(self.err(
                        col,
                        format!("unknown selector `{w}:`; selectors are {SELECTORS}"),
                    ))
                }
            };
            if slot.is_some() {
                return Err(self.err(col, format!("`{w}:` given twice")));
            }
            *slot = Some(v);
        }
        // The metric.
        let (mw, mcol) = match self.next() {
            Some((Tok::Word(w), col, _)) => (w, col),
            t => {
                let col = t.as_ref().map(|t| t.1).unwrap_or_else(|| self.end_col());
                return Err(self.err(
                    col,
                    format!(
                        "expected a metric ({METRICS}), found {}",
                        Self::describe(t.as_ref())
                    ),
                ));
            }
        };
        let metric = match mw.as_str() {
            "tcp-bw" | "udp-bw" | "rdma-bw" => Metric::Bw(Some(mw.clone())),
            "bw" => Metric::Bw(None),
            "tcp-lat" | "udp-lat" | "rdma-lat" => Metric::Lat(Some(mw.clone())),
            "lat" => Metric::Lat(None),
            "udp-loss" => Metric::UdpLoss,
            "failed-cells" => Metric::FailedCells,
            "mesh" => self.sub(
                "mesh",
                &[
                    ("outliers", Metric::MeshOutliers),
                    ("suspect-nodes", Metric::MeshSuspectNodes),
                    ("suspect-rails", Metric::MeshSuspectRails),
                    ("suspect-links", Metric::MeshSuspectLinks),
                    ("failed", Metric::MeshFailed),
                ],
            )?,
            "incast" => self.sub(
                "incast",
                &[
                    ("jain", Metric::IncastJain),
                    ("min-share", Metric::IncastMinShare),
                    ("bw", Metric::IncastBw),
                ],
            )?,
            "bisection" => self.sub("bisection", &[("bw", Metric::BisectionBw)])?,
            other => {
                return Err(self.err(
                    mcol,
                    format!("unknown metric `{other}`; metrics are {METRICS}"),
                ))
            }
        };
        // An optional stat.
        let mut stat = None;
        if let Some((Tok::Word(w), col, _)) = self.peek().cloned() {
            let allowed: &[Stat] = match metric {
                Metric::Bw(_) => &[Stat::Mean, Stat::Min, Stat::Max, Stat::CiLow],
                Metric::Lat(_) => &[
                    Stat::P50,
                    Stat::P90,
                    Stat::P99,
                    Stat::P999,
                    Stat::Mean,
                    Stat::Min,
                    Stat::Max,
                ],
                _ => &[],
            };
            match allowed.iter().find(|s| s.name() == w) {
                Some(s) => {
                    stat = Some(*s);
                    self.i += 1;
                }
                None if allowed.is_empty() => {
                    return Err(self.err(
                        col,
                        format!("`{mw}` takes no statistic; expected a comparison (>=, >, <=, <, ==, !=), found `{w}`"),
                    ))
                }
                None => {
                    return Err(self.err(
                        col,
                        format!(
                            "unknown statistic `{w}` for `{mw}`; one of {}",
                            allowed.iter().map(|s| s.name()).collect::<Vec<_>>().join(", ")
                        ),
                    ))
                }
            }
        }
        // The comparison.
        let cmp = match self.next() {
            Some((Tok::Op(c), ..)) => c,
            t => {
                let col = t.as_ref().map(|t| t.1).unwrap_or_else(|| self.end_col());
                return Err(self.err(
                    col,
                    format!(
                        "expected a comparison (>=, >, <=, <, ==, !=), found {}",
                        Self::describe(t.as_ref())
                    ),
                ));
            }
        };
        let rhs = self.rhs(&metric)?;
        if let Some(t) = self.peek() {
            return Err(self.err(
                t.1,
                format!(
                    "unexpected {} after the end of the gate",
                    Self::describe(Some(t))
                ),
            ));
        }
        Ok(Gate {
            text: self.src.trim().to_string(),
            selectors: sel,
            metric,
            stat,
            cmp,
            rhs,
        })
    }

    fn reference(&mut self, metric: &Metric) -> Result<Reference, GateError> {
        let col = self.col();
        match self.next() {
            Some((Tok::Word(w), ..)) if w == "port_rate" => {
                if !metric.takes_port_rate() {
                    return Err(self.err(
                        col,
                        "`port_rate` compares bandwidths; this metric is no bandwidth",
                    ));
                }
                Ok(Reference::PortRate)
            }
            Some((Tok::Word(w), ..)) if w == "path" => {
                match self.next() {
                    Some((Tok::Colon, ..)) => {}
                    t => {
                        let c = t.as_ref().map(|t| t.1).unwrap_or_else(|| self.end_col());
                        return Err(self.err(c, "expected `:` and a path name after `path`"));
                    }
                }
                let (name, _) = self.value("path name")?;
                if !metric.takes_path() {
                    return Err(self.err(
                        col,
                        "`path:` comparisons apply to bandwidth, latency and udp-loss rows",
                    ));
                }
                Ok(Reference::Path(name))
            }
            t => Err(self.err(
                col,
                format!(
                    "expected `port_rate` or `path:NAME`, found {}",
                    Self::describe(t.as_ref())
                ),
            )),
        }
    }

    fn rhs(&mut self, metric: &Metric) -> Result<Rhs, GateError> {
        let col = self.col();
        match self.peek().cloned() {
            Some((Tok::Word(_), ..)) => Ok(Rhs::Relative(1.0, self.reference(metric)?)),
            Some((Tok::Num(v, unit), _, len)) => {
                self.i += 1;
                let ucol = col + len - unit.chars().count();
                // "90 %" with a space is the same as "90%".
                let unit = if unit.is_empty() && matches!(self.peek(), Some((Tok::Percent, ..))) {
                    self.i += 1;
                    "%".to_string()
                } else {
                    unit
                };
                let relative_next = matches!(self.peek(), Some((Tok::Word(_), ..)));
                if unit == "%" && (relative_next || metric.dim() != Dim::Percent) {
                    if !relative_next {
                        return Err(self.err(
                            self.col(),
                            "expected `port_rate` or `path:NAME` after a percentage",
                        ));
                    }
                    return Ok(Rhs::Relative(v / 100.0, self.reference(metric)?));
                }
                if matches!(self.peek(), Some((Tok::Star, ..))) {
                    if !unit.is_empty() {
                        return Err(self.err(ucol, "a factor before `*` takes no unit"));
                    }
                    self.i += 1;
                    return Ok(Rhs::Relative(v, self.reference(metric)?));
                }
                let dim = metric.dim();
                match factor(dim, &unit) {
                    Some(f) => Ok(Rhs::Value(v * f)),
                    None => Err(self.err(
                        ucol,
                        format!(
                            "unit `{unit}` does not fit this metric; it takes {}",
                            dim.accepted()
                        ),
                    )),
                }
            }
            t => Err(self.err(
                col,
                format!(
                    "expected a threshold (a number, `N% port_rate`, `F * path:NAME`), found {}",
                    Self::describe(t.as_ref())
                ),
            )),
        }
    }
}

/// Parse one gate.
pub fn parse(src: &str) -> Result<Gate, GateError> {
    let toks = lex(src)?;
    if toks.is_empty() {
        return Err(GateError {
            gate: src.to_string(),
            col: 1,
            msg: "empty gate; e.g. `tcp-bw >= 90% port_rate`".into(),
        });
    }
    P { src, toks, i: 0 }.gate()
}

/// A named set of gates.
pub struct Preset {
    pub name: &'static str,
    pub about: &'static str,
    pub gates: &'static [&'static str],
}

/// The shipped presets.
pub const PRESETS: &[Preset] = &[Preset {
    name: "connectx-acceptance",
    about:
        "NVIDIA ngc_multinode_perf's acceptance thresholds: RDMA bandwidth at least 90 % of the \
            port rate one way (twice it bidirectional), average latency at most 2.5 µs for send \
            and write, 4.5 µs for read",
    gates: &[
        "rdma-bw >= 90% port_rate",
        "op:write rdma-lat mean <= 2.5us",
        "op:send rdma-lat mean <= 2.5us",
        "op:read rdma-lat mean <= 4.5us",
    ],
}];

pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

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

fn row_matches(g: &Gate, r: &Row) -> bool {
    let s = &g.selectors;
    let kind_ok = match &g.metric {
        Metric::Bw(k) => {
            matches!(r.family, Family::Bandwidth | Family::Udp)
                && k.as_ref().is_none_or(|k| *k == r.kind)
        }
        Metric::Lat(k) => r.family == Family::Latency && k.as_ref().is_none_or(|k| *k == r.kind),
        Metric::UdpLoss => r.family == Family::Udp,
        _ => false,
    };
    // Incast and bisection aggregates have their own metrics.
    kind_ok
        && matches!(r.pattern.as_str(), "pairs" | "mesh")
        && s.path.as_ref().is_none_or(|p| *p == r.path)
        && s.test.as_ref().is_none_or(|t| *t == r.test)
        && s.kind.as_ref().is_none_or(|k| *k == r.kind)
        && s.op.as_ref().is_none_or(|o| r.op.as_ref() == Some(o))
        && s.size.is_none_or(|b| r.size == Some(b))
        && s.node.as_ref().is_none_or(|n| r.nodes.contains(n))
        && s.direction
            .as_ref()
            .is_none_or(|d| r.direction.as_deref().unwrap_or("forward") == d)
}

/// Does a `direction:` selector take this direction of a multi-flow cell?
/// `forward`/`reverse` take that direction (of a bidir cell too), `bidir`
/// both directions of bidir cells.
fn direction_selected(sel: &Selectors, l: &crate::flows::Leg) -> bool {
    sel.direction
        .as_ref()
        .is_none_or(|d| *d == l.direction || (d == "bidir" && l.of_bidir))
}

/// The figure of a row a gate compares, or why there is none.
fn row_figure(g: &Gate, r: &Row) -> Result<f64, String> {
    let none = || format!("no {} figure", stat_word(g));
    match &g.metric {
        Metric::Bw(_) => {
            let st = g.stat.unwrap_or(Stat::Mean);
            match (st, &r.spread, &r.stats) {
                (Stat::CiLow, ..) => ci_low(r),
                // A mesh's or a bisection's instances: the worst and the
                // best instance.
                (Stat::Min, Some(sp), _) => Ok(sp.min),
                (Stat::Max, Some(sp), _) => Ok(sp.max),
                (Stat::Min, None, Some(s)) => Ok(s.min),
                (Stat::Max, None, Some(s)) => Ok(s.max),
                _ => r.mean().ok_or_else(none),
            }
        }
        Metric::Lat(_) => {
            let l = r.lat.as_ref().ok_or_else(none)?;
            match g.stat.unwrap_or(Stat::P50) {
                Stat::P50 => l.p50,
                Stat::P90 => l.p90,
                Stat::P99 => l.p99,
                Stat::P999 => l.p999,
                Stat::Mean => l.mean,
                Stat::Min => l.min,
                Stat::Max => l.max,
                Stat::CiLow => None,
            }
            .ok_or_else(none)
        }
        Metric::UdpLoss => r.loss_pct.ok_or_else(none),
        _ => Err(none()),
    }
}

/// The lower end of the 95 % interval over repeats: of the row, or the
/// lowest of its instances' (a mesh's pairs). One repeat has no interval,
/// and a gate on it fails saying so rather than pass on the mean.
fn ci_low(r: &Row) -> Result<f64, String> {
    const NEED: &str = "ci-low needs ≥ 2 repeats";
    if r.spread.is_some() && r.pattern == "mesh" {
        let mut lo = f64::INFINITY;
        for i in &r.instances {
            match i.stats.as_ref().and_then(|s| s.ci95.map(|c| s.mean - c)) {
                Some(v) => lo = lo.min(v),
                None => {
                    return Err(format!(
                        "{NEED} of every pair; {} has {} (set repeats = 2 or more in the plan)",
                        i.key,
                        i.values.len()
                    ))
                }
            }
        }
        return Ok(lo);
    }
    let s = r.stats.as_ref().ok_or_else(|| "no figure".to_string())?;
    match s.ci95 {
        Some(c) => Ok(s.mean - c),
        None => Err(format!(
            "{NEED}; this row has {} (set repeats = 2 or more in the plan)",
            s.n
        )),
    }
}

fn stat_word(g: &Gate) -> String {
    match (&g.metric, g.stat) {
        (Metric::Bw(_), s) => s.unwrap_or(Stat::Mean).name().to_string(),
        (Metric::Lat(_), s) => s.unwrap_or(Stat::P50).name().to_string(),
        _ => String::new(),
    }
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
    let unit = g.metric.unit();
    let plain = g.metric.dim() == Dim::Plain;
    // Counts print as integers, figures as fabperf prints numbers.
    let show = |v: f64| {
        if plain && v.fract() == 0.0 && v.abs() < 1e15 {
            format!("{v:.0}")
        } else if plain {
            format!("{v:.3}")
        } else {
            fmt_num(v)
        }
    };
    let sel = &g.selectors;
    let check = |out: &mut GateOutcome,
                 subject: String,
                 cells: Vec<String>,
                 measured: Result<f64, String>,
                 required: Result<(f64, String), String>| {
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
    };
    let absolute = |v: f64| -> Result<(f64, String), String> { Ok((v, String::new())) };
    match &g.metric {
        Metric::Bw(_) | Metric::Lat(_) | Metric::UdpLoss => {
            for r in rep.rows.iter().filter(|r| row_matches(g, r)) {
                if r.mean().is_none() {
                    continue;
                }
                let required = match &g.rhs {
                    Rhs::Value(v) => absolute(*v),
                    Rhs::Relative(_, Reference::PortRate) if r.port_finding.is_some() => Err(format!(
                        "{} port_rate, but {}",
                        g.cmp.sym(),
                        r.port_finding.as_deref().unwrap_or_default()
                    )),
                    Rhs::Relative(f, Reference::PortRate) => match r.port_rate_gbps {
                        Some(p) => Ok((
                            f * p,
                            format!(" ({:.0} % of the {} Gbit/s port)", f * 100.0, fmt_num(p)),
                        )),
                        None => Err(format!(
                            "{} port_rate, but the port rate is unknown (no agent inventory for {})",
                            g.cmp.sym(),
                            r.nodes.join(", ")
                        )),
                    },
                    Rhs::Relative(f, Reference::Path(p)) => match rep.counterpart(r, p) {
                        Some(b) => match row_figure(g, b) {
                            Ok(v) => Ok((
                                f * v,
                                format!(" ({f} × {} on path {p})", fmt_num(v)),
                            )),
                            Err(why) => Err(format!("on path {p}: {why}")),
                        },
                        None => Err(format!(
                            "nothing like it on path {p} to compare with (same test kind or transport, size, \
                             streams, op, MTU, rate and pattern)"
                        )),
                    },
                };
                let label = match stat_word(g).as_str() {
                    "" => r.label(),
                    s => format!("{} [{s}]", r.label()),
                };
                check(&mut out, label, r.cells.clone(), row_figure(g, r), required);
            }
        }
        Metric::MeshOutliers
        | Metric::MeshSuspectNodes
        | Metric::MeshSuspectRails
        | Metric::MeshSuspectLinks
        | Metric::MeshFailed => {
            for m in rep.meshes.iter().flat_map(|m| &m.groups) {
                if sel.path.as_ref().is_some_and(|p| *p != m.path)
                    || sel.test.as_ref().is_some_and(|t| *t != m.test)
                    || sel.kind.as_ref().is_some_and(|k| *k != m.kind)
                    || sel.node.as_ref().is_some_and(|n| !m.nodes.contains(n))
                {
                    continue;
                }
                let on_node = |a: &str, b: &str| sel.node.as_ref().is_none_or(|n| n == a || n == b);
                let v = match g.metric {
                    Metric::MeshOutliers => m
                        .suspects
                        .iter()
                        .filter(|s| s.confirmed && on_node(&s.src, &s.dst))
                        .count(),
                    Metric::MeshSuspectNodes => m
                        .bad_nodes
                        .iter()
                        .filter(|n| sel.node.as_ref().is_none_or(|x| x == *n))
                        .count(),
                    // A named rail concerns every node on it.
                    Metric::MeshSuspectRails => m.bad_rails.len(),
                    Metric::MeshSuspectLinks => {
                        m.bad_links.iter().filter(|(a, b)| on_node(a, b)).count()
                    }
                    _ => m.failed.iter().filter(|(a, b, _)| on_node(a, b)).count(),
                };
                let subject = format!(
                    "mesh {} ({}) on path {}{}",
                    m.test,
                    m.kind,
                    m.path,
                    if m.dims.as_object().is_some_and(|o| !o.is_empty()) {
                        format!(" {}", m.dims)
                    } else {
                        String::new()
                    }
                );
                let mut why = String::new();
                if v > 0 {
                    let names: Vec<String> = match g.metric {
                        Metric::MeshSuspectNodes => m.bad_nodes.clone(),
                        Metric::MeshSuspectRails => m.bad_rails.clone(),
                        Metric::MeshSuspectLinks => m
                            .bad_links
                            .iter()
                            .map(|(a, b)| format!("{a}-{b}"))
                            .collect(),
                        Metric::MeshFailed => m
                            .failed
                            .iter()
                            .map(|(a, b, _)| format!("{a}->{b}"))
                            .collect(),
                        _ => m
                            .suspects
                            .iter()
                            .filter(|s| s.confirmed)
                            .map(|s| format!("{}->{} {}", s.src, s.dst, fmt_num(s.value)))
                            .collect(),
                    };
                    why = format!(" ({})", names.join(", "));
                }
                // Counts are of confirmed findings; what is not confirmed
                // is said, not counted.
                let unconfirmed: Vec<String> = match g.metric {
                    Metric::MeshOutliers => m
                        .unconfirmed()
                        .filter(|s| on_node(&s.src, &s.dst))
                        .map(|s| format!("{}->{} {}", s.src, s.dst, fmt_num(s.value)))
                        .collect(),
                    Metric::MeshSuspectNodes => m
                        .node_findings
                        .iter()
                        .filter(|f| !f.confirmed && sel.node.as_ref().is_none_or(|x| *x == f.node))
                        .map(|f| f.node.clone())
                        .collect(),
                    Metric::MeshSuspectRails => m
                        .rail_findings
                        .iter()
                        .filter(|f| !f.confirmed)
                        .map(|f| f.name.clone())
                        .collect(),
                    Metric::MeshSuspectLinks => m
                        .unconfirmed_links
                        .iter()
                        .filter(|(a, b)| on_node(a, b))
                        .map(|(a, b)| format!("{a}-{b}"))
                        .collect(),
                    _ => Vec::new(),
                };
                if !unconfirmed.is_empty() {
                    out.notes.push(format!(
                        "{subject}: {} more not counted, unconfirmed (no re-test gave a figure): {}",
                        unconfirmed.len(),
                        unconfirmed.join(", ")
                    ));
                }
                let req = match &g.rhs {
                    Rhs::Value(x) => Ok((*x, String::new())),
                    _ => Err("mesh counts compare with a number".to_string()),
                };
                let before = out.violations.len();
                check(&mut out, subject, Vec::new(), Ok(v as f64), req);
                if let Some(last) = out.violations.get_mut(before) {
                    last.measured.push_str(&why);
                }
            }
        }
        Metric::IncastJain | Metric::IncastMinShare | Metric::IncastBw => {
            // Each cell's directions on their own; one without a figure is
            // named in a note, never counted.
            for ic in &rep.incasts {
                let l = &ic.leg;
                if sel.path.as_ref().is_some_and(|p| *p != ic.path)
                    || sel.test.as_ref().is_some_and(|t| *t != ic.test)
                    || sel.node.as_ref().is_some_and(|n| {
                        *n != ic.receiver && !ic.cell_flows.iter().any(|(a, _)| a == n)
                    })
                    || !direction_selected(sel, l)
                {
                    continue;
                }
                let subject = format!(
                    "incast {} into {} on path {} (repeat {}{})",
                    ic.test,
                    ic.receiver,
                    ic.path,
                    ic.repeat + 1,
                    if l.is_plain() {
                        String::new()
                    } else {
                        format!(", {}", l.direction_words())
                    }
                );
                if let Some(why) = &l.failed {
                    out.notes
                        .push(format!("{subject}: no figure, not checked: {why}"));
                    continue;
                }
                let measured = match g.metric {
                    Metric::IncastJain => l.jain,
                    Metric::IncastMinShare => l.min_share(),
                    _ => l.aggregate_gbps,
                };
                let req = match &g.rhs {
                    Rhs::Value(x) => Ok((*x, String::new())),
                    Rhs::Relative(_, Reference::PortRate) if l.port_finding.is_some() => {
                        Err(format!(
                            "{} port_rate, but {}",
                            g.cmp.sym(),
                            l.port_finding.as_deref().unwrap_or_default()
                        ))
                    }
                    Rhs::Relative(f, Reference::PortRate) => match l.port_rate_gbps {
                        Some(p) => Ok((
                            f * p,
                            format!(
                                " ({:.0} % of the receiver's {} Gbit/s port{})",
                                f * 100.0,
                                fmt_num(p),
                                if l.to_clients { ", sending" } else { "" }
                            ),
                        )),
                        None => Err(format!(
                            "{} port_rate, but {}'s port rate is unknown (no agent inventory)",
                            g.cmp.sym(),
                            ic.receiver
                        )),
                    },
                    Rhs::Relative(..) => {
                        Err("incast figures compare with a number or port_rate".into())
                    }
                };
                check(
                    &mut out,
                    subject,
                    vec![ic.cell.clone()],
                    measured
                        .ok_or_else(|| l.note.clone().unwrap_or_else(|| "no figure".to_string())),
                    req,
                );
            }
        }
        Metric::BisectionBw => {
            // The bisection bandwidth of a test on a path, per direction:
            // the slowest cut.
            for b in rep.rows.iter().filter(|r| r.pattern == "bisection") {
                let dir = b.direction.as_deref().unwrap_or("forward");
                if sel.path.as_ref().is_some_and(|p| *p != b.path)
                    || sel.test.as_ref().is_some_and(|t| *t != b.test)
                    || sel.node.as_ref().is_some_and(|n| !b.nodes.contains(n))
                    || sel
                        .direction
                        .as_ref()
                        .is_some_and(|d| d != dir && !(d == "bidir" && b.of_bidir))
                {
                    continue;
                }
                let subject = format!(
                    "bisection {} on path {} ({}{}{})",
                    b.test,
                    b.path,
                    b.scope,
                    b.direction_words()
                        .map(|d| format!(", {d}"))
                        .unwrap_or_default(),
                    b.spread
                        .as_ref()
                        .map(|sp| format!(": {}", sp.worst))
                        .unwrap_or_default()
                );
                for f in &b.failed {
                    out.notes.push(format!(
                        "{subject}: repeat {} of cut {} has no figure, not counted: {}",
                        f.repeat + 1,
                        f.instance,
                        f.reason
                    ));
                }
                if !b.unmeasured.is_empty() {
                    out.notes.push(format!(
                        "{subject}: {} cut(s) without any figure are not in the minimum: {}",
                        b.unmeasured.len(),
                        b.unmeasured.join("; ")
                    ));
                }
                if b.mean().is_none() {
                    continue;
                }
                let req = match &g.rhs {
                    Rhs::Value(x) => Ok((*x, String::new())),
                    Rhs::Relative(_, Reference::PortRate) if b.port_finding.is_some() => Err(format!(
                        "{} port_rate, but {}",
                        g.cmp.sym(),
                        b.port_finding.as_deref().unwrap_or_default()
                    )),
                    Rhs::Relative(f, Reference::PortRate) => match b.port_rate_gbps {
                        Some(p) => Ok((
                            f * p,
                            format!(
                                " ({:.0} % of the cut's flows' port rates, {} Gbit/s)",
                                f * 100.0,
                                fmt_num(p)
                            ),
                        )),
                        None => Err(format!(
                            "{} port_rate, but a port rate is unknown (no agent inventory, or a virtual link)",
                            g.cmp.sym()
                        )),
                    },
                    Rhs::Relative(..) => {
                        Err("bisection bandwidth compares with a number or port_rate".into())
                    }
                };
                check(
                    &mut out,
                    subject,
                    b.cells.clone(),
                    b.mean().ok_or_else(|| "no figure".to_string()),
                    req,
                );
            }
        }
        Metric::FailedCells => {
            let failed: Vec<&crate::analysis::FailedCell> = rep
                .failed
                .iter()
                .filter(|f| {
                    sel.path.as_ref().is_none_or(|p| *p == f.path)
                        && sel.test.as_ref().is_none_or(|t| *t == f.test)
                        && sel
                            .node
                            .as_ref()
                            .is_none_or(|n| f.flows.iter().any(|(a, b)| a == n || b == n))
                })
                .collect();
            let req = match &g.rhs {
                Rhs::Value(x) => Ok((*x, String::new())),
                _ => Err("failed-cells compares with a number".to_string()),
            };
            let cells = failed.iter().map(|f| f.cell.clone()).collect();
            let before = out.violations.len();
            check(
                &mut out,
                format!("run {}", rep.run.id),
                cells,
                Ok(failed.len() as f64),
                req,
            );
            if let Some(v) = out.violations.get_mut(before) {
                if let Some(f) = failed.first() {
                    v.measured
                        .push_str(&format!(" (first: {}: {})", f.test, f.error));
                }
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn err(s: &str) -> GateError {
        parse(s).unwrap_err()
    }

    #[test]
    fn the_documented_examples_parse() {
        let g = parse("rdma-bw >= 90% port_rate").unwrap();
        assert_eq!(g.metric, Metric::Bw(Some("rdma-bw".into())));
        assert_eq!(g.cmp, Cmp::Ge);
        assert_eq!(g.rhs, Rhs::Relative(0.9, Reference::PortRate));
        let g = parse("path:pod tcp-bw >= 0.8 * path:host").unwrap();
        assert_eq!(g.selectors.path.as_deref(), Some("pod"));
        assert_eq!(g.rhs, Rhs::Relative(0.8, Reference::Path("host".into())));
        let g = parse("tcp-lat p99 <= 50us").unwrap();
        assert_eq!(g.stat, Some(Stat::P99));
        assert_eq!(g.rhs, Rhs::Value(50.0));
        let g = parse("mesh outliers == 0").unwrap();
        assert_eq!(g.metric, Metric::MeshOutliers);
        assert_eq!(g.rhs, Rhs::Value(0.0));
        // Units and spacing.
        assert_eq!(parse("tcp-lat <= 0.05ms").unwrap().rhs, Rhs::Value(50.0));
        assert_eq!(parse("tcp-lat<=500ns").unwrap().rhs, Rhs::Value(0.5));
        assert_eq!(parse("bw >= 800Mbps").unwrap().rhs, Rhs::Value(0.8));
        assert_eq!(
            parse("bw >= 90 % port_rate").unwrap().rhs,
            Rhs::Relative(0.9, Reference::PortRate)
        );
        assert_eq!(parse("udp-loss <= 0.1%").unwrap().rhs, Rhs::Value(0.1));
        assert_eq!(
            parse("size:64K op:write rdma-lat mean <= 2.5µs")
                .unwrap()
                .selectors
                .size,
            Some(65536)
        );
        assert_eq!(
            parse("tcp-bw >= path:host").unwrap().rhs,
            Rhs::Relative(1.0, Reference::Path("host".into()))
        );
        assert_eq!(
            parse("incast jain >= 0.9").unwrap().metric,
            Metric::IncastJain
        );
        assert_eq!(
            parse("bisection bw >= 1.5e1Gbps").unwrap().rhs,
            Rhs::Value(15.0)
        );
        for p in PRESETS {
            for g in p.gates {
                parse(g).unwrap_or_else(|e| panic!("preset {}: {g}: {e}", p.name));
            }
        }
    }

    #[test]
    fn errors_point_at_the_column() {
        let e = err("rdma-bw >= 90% prot_rate");
        assert_eq!(e.col, 16, "{e}");
        assert!(e.msg.contains("port_rate"), "{e}");
        let e = err("tcp-lat p99 <= 50Gbps");
        assert_eq!(e.col, 18, "{e}");
        assert!(e.msg.contains("unit `Gbps`"), "{e}");
        let e = err("tcp-bww >= 1");
        assert_eq!(e.col, 1);
        assert!(e.msg.contains("unknown metric"));
        let e = err("tcp-lat p98 <= 5us");
        assert_eq!(e.col, 9);
        assert!(e.msg.contains("p99"));
        let e = err("tcp-bw = 5");
        assert_eq!(e.col, 8);
        assert!(e.msg.contains("=="));
        let e = err("tcp-bw >=");
        assert_eq!(e.col, 10);
        assert!(e.msg.contains("the end of the gate"));
        let e = err("tcp-bw >= 5 extra");
        assert_eq!(e.col, 13);
        let e = err("pth:x tcp-bw >= 5");
        assert_eq!(e.col, 1);
        assert!(e.msg.contains("unknown selector"));
        let e = err("path:a path:b tcp-bw >= 5");
        assert_eq!(e.col, 8);
        let e = err("size:64Q tcp-bw >= 5");
        assert_eq!(e.col, 6);
        let e = err("mesh outlier == 0");
        assert_eq!(e.col, 6);
        assert!(e.msg.contains("outliers"));
        let e = err("tcp-lat <= 90% port_rate");
        assert_eq!(e.col, 16);
        let e = err("mesh outliers == 1 * path:host");
        assert_eq!(e.col, 22);
        let e = err("tcp-bw >= 5 $");
        assert_eq!(e.col, 13);
        let e = err("tcp-bw >= 9Gbps * port_rate");
        assert_eq!(e.col, 12);
        let e = err("tcp-bw >= 90%");
        assert_eq!(e.col, 14);
        let e = err("");
        assert_eq!(e.col, 1);
        let e = err("   ");
        assert_eq!(e.col, 1);
        let e = err(&"a".repeat(MAX_GATE_LEN + 1));
        assert_eq!(e.col, MAX_GATE_LEN + 1);
        // The caret sits under the column.
        let shown = err("tcp-bw >= 5 extra").to_string();
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(lines[2].find('^'), Some(2 + 12), "{shown}");
        // Multibyte characters count as one column each.
        let e = err("µµ tcp-bw >= 5");
        assert_eq!(e.col, 1);
        let e = err("tcp-bw >= 5 µ");
        assert_eq!(e.col, 13);
    }

    #[test]
    fn hostile_text_never_panics() {
        // A deterministic byte soup over the grammar's alphabet.
        let alphabet: Vec<char> = "tcp-bwlatrdmaushp:%*<>=! 0123456789.eE+µ_/\u{0}\u{202e}"
            .chars()
            .collect();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 40) as usize;
            let s: String = (0..len)
                .map(|i| alphabet[((x >> (i % 50)) as usize + i * 7) % alphabet.len()])
                .collect();
            if let Err(e) = parse(&s) {
                assert!(e.col >= 1 && e.col <= s.chars().count() + 1, "{s:?}: {e}");
                let _ = e.to_string();
            }
        }
    }
}
