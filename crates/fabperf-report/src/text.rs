//! The report as a terminal table, Markdown, CSV or JSON.

use crate::analysis::{fmt_num, signed, Family, LatSource, Level, Report, Row};
use crate::flows::Leg;
use crate::units::size_label;
use fabperf_results::escape;
use std::fmt::Write as _;

/// A piece of stored text for the output: escaped for Markdown or for a
/// terminal (a tampered store cannot forge lines, headings or HTML).
fn esc(s: &str, md: bool) -> String {
    if md {
        escape::markdown(s)
    } else {
        escape::terminal(s)
    }
}

/// Output formats of `fabperf report`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    Markdown,
    Json,
    Csv,
}

/// A table of strings, rendered aligned or as Markdown.
pub struct Table {
    pub head: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// Left-aligned columns (the others are right-aligned).
    pub left: Vec<usize>,
}

impl Table {
    fn new(head: &[&str], left: &[usize]) -> Table {
        Table {
            head: head.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
            left: left.to_vec(),
        }
    }

    /// Aligned columns; every cell escaped for a terminal.
    pub fn text(&self) -> String {
        let n = self.head.len();
        let esc_row =
            |r: &Vec<String>| -> Vec<String> { r.iter().map(|c| escape::terminal(c)).collect() };
        let head = esc_row(&self.head);
        let rows: Vec<Vec<String>> = self.rows.iter().map(esc_row).collect();
        let mut w = vec![0usize; n];
        for r in std::iter::once(&head).chain(&rows) {
            for (i, c) in r.iter().enumerate().take(n) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let mut o = String::new();
        for r in std::iter::once(&head).chain(&rows) {
            let mut line = String::new();
            for (i, c) in r.iter().enumerate().take(n) {
                let pad = w[i] - c.chars().count();
                if i > 0 {
                    line.push_str("  ");
                }
                if self.left.contains(&i) {
                    line.push_str(c);
                    line.push_str(&" ".repeat(pad));
                } else {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(c);
                }
            }
            o.push_str(line.trim_end());
            o.push('\n');
        }
        o
    }

    /// A Markdown table; every cell escaped for Markdown.
    pub fn markdown(&self) -> String {
        let cell = escape::markdown;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "| {} |",
            self.head
                .iter()
                .map(|h| cell(h))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        let _ = writeln!(
            o,
            "|{}|",
            (0..self.head.len())
                .map(|i| if self.left.contains(&i) {
                    ":---"
                } else {
                    "---:"
                })
                .collect::<Vec<_>>()
                .join("|")
        );
        for r in &self.rows {
            let _ = writeln!(
                o,
                "| {} |",
                r.iter().map(|c| cell(c)).collect::<Vec<_>>().join(" | ")
            );
        }
        o
    }
}

fn opt(v: Option<f64>) -> String {
    v.filter(|x| x.is_finite())
        .map(fmt_num)
        .unwrap_or_else(|| "-".into())
}

/// The table's sweep column: the dimensions the other columns (test, size,
/// path, scope) do not show: `write x4 reverse mtu 9000 @2.5G c8`, `-`.
fn sweep(r: &Row) -> String {
    let mut parts = Vec::new();
    if let Some(op) = &r.op {
        parts.push(op.clone());
    }
    // http-load: the connections are the variant (`c8`), the direction the
    // method's (GET reverse, PUT forward).
    let http = r.family == Family::Http;
    if let Some(n) = r.streams.filter(|n| *n > 1 && !http) {
        parts.push(format!("x{n}"));
    }
    if let Some(d) = r.direction_words().filter(|_| !http) {
        parts.push(d);
    }
    if let Some(m) = r.mtu {
        parts.push(format!("mtu {m}"));
    }
    if let Some(rate) = &r.rate {
        parts.push(format!("@{rate}"));
    }
    if let Some(v) = &r.variant {
        parts.push(v.clone());
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(" ")
    }
}

/// The cells every family's table starts with: test, size, sweep, path,
/// flows, repeats, mean and its 95 % interval.
/// `n` is the repeats of one instance (a mesh's pairs and a bisection's
/// cuts are not repeats), the figure the row's (see [`Row::mean`]).
fn lead(r: &Row) -> Vec<String> {
    let s = r.stats.as_ref();
    vec![
        r.test.clone(),
        r.size.map(size_label).unwrap_or_else(|| "-".into()),
        sweep(r),
        r.path.clone(),
        r.scope.clone(),
        r.repeats_label(),
        opt(r.mean()),
        opt(s.and_then(|s| s.ci95)),
    ]
}

/// The share of the port rate, or why there is none: `>port` when the
/// figure is above it (a finding, never a percentage over 100).
fn port_cell(r: &Row) -> String {
    match (r.pct_port, &r.port_finding) {
        (Some(p), _) => format!("{p:.0}"),
        (None, Some(_)) => ">port".into(),
        _ => "-".into(),
    }
}

/// A difference's marks: `~` not significant (Welch), `≠` an unlike row.
fn delta_mark(d: Option<&crate::analysis::Delta>) -> &'static str {
    match d {
        Some(d) if !d.unlike.is_empty() => "≠",
        Some(d) if d.within_noise == Some(true) => "~",
        _ => "",
    }
}

fn signed_opt(v: Option<f64>, decimals: usize) -> String {
    v.filter(|x| x.is_finite())
        .map(|v| signed(v, decimals))
        .unwrap_or_else(|| "-".into())
}

/// A row's footnote marks, and the notes collected for the table.
fn marks(r: &Row, notes: &mut Vec<String>) -> String {
    let mut m = Vec::new();
    for w in &r.warnings {
        let i = match notes.iter().position(|n| n == w) {
            Some(i) => i,
            None => {
                notes.push(w.clone());
                notes.len() - 1
            }
        };
        m.push(format!("[{}]", i + 1));
    }
    m.join("")
}

/// The tables of one family: (title, table, footnotes).
pub fn family_table(rep: &Report, fam: Family) -> Option<(String, Table, Vec<String>)> {
    let rows: Vec<&Row> = rep.rows.iter().filter(|r| r.family == fam).collect();
    if rows.is_empty() {
        return None;
    }
    let base = rep.baseline.as_deref().unwrap_or("baseline");
    let mut notes = Vec::new();
    let t = match fam {
        Family::Bandwidth => {
            let mut t = Table::new(
                &[
                    "test",
                    "size",
                    "sweep",
                    "path",
                    "flows",
                    "n",
                    "Gbit/s",
                    "±95%",
                    "stdev",
                    &format!("Δ vs {base}"),
                    "Δ%",
                    "%port",
                    "cpu%/G cli",
                    "cpu%/G agt",
                    "retr",
                    "notes",
                ],
                &[0, 2, 3, 4, 15],
            );
            for r in rows {
                let s = r.stats.as_ref();
                let d = r.base.as_ref();
                let mut row = lead(r);
                row.extend([
                    opt(s.and_then(|s| s.stdev)),
                    d.and_then(|d| d.d_gbps)
                        .map(|v| signed(v, 2))
                        .unwrap_or_else(|| {
                            if d.is_none() && Some(r.path.as_str()) == rep.baseline.as_deref() {
                                "base".into()
                            } else {
                                "-".into()
                            }
                        }),
                    d.and_then(|d| d.d_pct)
                        .map(|v| format!("{}{}", signed(v, 1), delta_mark(d)))
                        .unwrap_or_else(|| "-".into()),
                    port_cell(r),
                    opt(r.cpu.as_ref().and_then(|c| c.client)),
                    opt(r.cpu.as_ref().and_then(|c| c.agent)),
                    r.retransmits
                        .map(|v| format!("{v:.0}"))
                        .unwrap_or_else(|| "-".into()),
                    marks(r, &mut notes),
                ]);
                t.rows.push(row);
            }
            t
        }
        Family::Udp => {
            let mut t = Table::new(
                &[
                    "test",
                    "size",
                    "sweep",
                    "path",
                    "flows",
                    "n",
                    "Gbit/s",
                    "±95%",
                    "loss%",
                    &format!("Δ vs {base}"),
                    "Δ%",
                    "Δloss pp",
                    "%port",
                    "notes",
                ],
                &[0, 2, 3, 4, 13],
            );
            for r in rows {
                let d = r.base.as_ref();
                let mut row = lead(r);
                row.extend([
                    r.loss_pct
                        .map(|v| format!("{v:.3}"))
                        .unwrap_or_else(|| "-".into()),
                    d.and_then(|d| d.d_gbps)
                        .map(|v| signed(v, 2))
                        .unwrap_or_else(|| "-".into()),
                    d.and_then(|d| d.d_pct)
                        .map(|v| format!("{}{}", signed(v, 1), delta_mark(d)))
                        .unwrap_or_else(|| "-".into()),
                    d.and_then(|d| d.d_loss_pp)
                        .map(|v| signed(v, 3))
                        .unwrap_or_else(|| "-".into()),
                    port_cell(r),
                    marks(r, &mut notes),
                ]);
                t.rows.push(row);
            }
            t
        }
        Family::Latency => {
            let mut t = Table::new(
                &[
                    "test",
                    "size",
                    "sweep",
                    "path",
                    "flows",
                    "n",
                    "p50 mean",
                    "±95%",
                    "p50",
                    "p99",
                    "p99.9",
                    &format!("Δp50 vs {base}"),
                    "Δp99",
                    "from",
                    "notes",
                ],
                &[0, 2, 3, 4, 13, 14],
            );
            for r in rows {
                let d = r.base.as_ref();
                let l = r.lat.as_ref();
                let mut row = lead(r);
                row.extend([
                    opt(l.and_then(|l| l.p50)),
                    opt(l.and_then(|l| l.p99)),
                    opt(l.and_then(|l| l.p999)),
                    d.and_then(|d| d.d_p50_us)
                        .map(|v| format!("{}{}", signed(v, 2), delta_mark(d)))
                        .unwrap_or_else(|| "-".into()),
                    d.and_then(|d| d.d_p99_us)
                        .map(|v| signed(v, 2))
                        .unwrap_or_else(|| "-".into()),
                    match l.map(|l| &l.source) {
                        Some(LatSource::Histograms { samples, .. }) => format!("hist {samples}"),
                        Some(LatSource::StoredPercentiles) => "stored".into(),
                        None => "-".into(),
                    },
                    marks(r, &mut notes),
                ]);
                t.rows.push(row);
            }
            t
        }
        Family::Http => {
            let mut t = Table::new(
                &[
                    "test",
                    "size",
                    "sweep",
                    "path",
                    "flows",
                    "n",
                    "req/s",
                    "±95%",
                    "Δ%",
                    "p50 µs",
                    "p99 µs",
                    "p99.9 µs",
                    &format!("Δp50 vs {base}"),
                    "Δp99",
                    "errors",
                    "err%",
                    "Δerr pp",
                    "notes",
                ],
                &[0, 2, 3, 4, 14, 17],
            );
            for r in rows {
                let d = r.base.as_ref();
                let l = r.lat.as_ref();
                let h = r.http.as_ref();
                let mut row = lead(r);
                row.extend([
                    d.and_then(|d| d.d_pct)
                        .map(|v| format!("{}{}", signed(v, 1), delta_mark(d)))
                        .unwrap_or_else(|| "-".into()),
                    opt(l.and_then(|l| l.p50)),
                    opt(l.and_then(|l| l.p99)),
                    opt(l.and_then(|l| l.p999)),
                    signed_opt(d.and_then(|d| d.d_p50_us), 1),
                    signed_opt(d.and_then(|d| d.d_p99_us), 1),
                    h.map(errors_words).unwrap_or_else(|| "-".into()),
                    h.and_then(|h| h.error_pct)
                        .map(|p| format!("{p:.2}"))
                        .unwrap_or_else(|| "-".into()),
                    signed_opt(d.and_then(|d| d.d_error_pp), 2),
                    marks(r, &mut notes),
                ]);
                t.rows.push(row);
            }
            t
        }
        Family::Mtu => {
            let mut t = Table::new(
                &[
                    "test",
                    "method",
                    "path",
                    "flows",
                    "n",
                    "MTU",
                    "payload",
                    &format!("Δ vs {base}"),
                    "interface",
                    "overhead",
                    "notes",
                ],
                &[0, 1, 2, 3, 8, 9, 10],
            );
            for r in rows {
                let d = r.base.as_ref();
                let m = r.mtu_path.as_ref();
                t.rows.push(vec![
                    r.test.clone(),
                    m.map(|m| m.method.clone()).unwrap_or_else(|| "-".into()),
                    r.path.clone(),
                    r.scope.clone(),
                    r.repeats_label(),
                    m.map(|m| {
                        if m.mtu_min == m.mtu_max {
                            m.mtu_min.to_string()
                        } else {
                            format!("{}-{}", m.mtu_min, m.mtu_max)
                        }
                    })
                    .unwrap_or_else(|| "-".into()),
                    m.and_then(|m| m.payload)
                        .map(|p| p.to_string())
                        .unwrap_or_else(|| "-".into()),
                    d.and_then(|d| d.d_bytes)
                        .map(|b| {
                            if b == 0 {
                                "0".to_string()
                            } else {
                                signed(-b as f64, 0)
                            }
                        })
                        .unwrap_or_else(|| {
                            if d.is_none() && Some(r.path.as_str()) == rep.baseline.as_deref() {
                                "base".into()
                            } else {
                                "-".into()
                            }
                        }),
                    m.and_then(|m| m.interface.clone())
                        .unwrap_or_else(|| "-".into()),
                    overhead_words(r),
                    marks(r, &mut notes),
                ]);
            }
            t
        }
    };
    Some((fam.title().to_string(), t, notes))
}

/// Failed requests by kind, the non-zero ones: `timeout 3, status 2`.
fn errors_words(h: &crate::analysis::HttpFigures) -> String {
    let parts: Vec<String> = h
        .errors
        .iter()
        .filter(|(_, v)| **v > 0)
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    if parts.is_empty() {
        if h.errors.is_empty() && h.errors_total == 0 && h.error_pct.is_none() {
            "-".into()
        } else {
            "0".into()
        }
    } else {
        parts.join(", ")
    }
}

/// The overhead an mtu row's path adds, named: the encapsulation the record
/// gives, and the bytes fewer than the baseline path.
pub fn overhead_words(r: &Row) -> String {
    let m = r.mtu_path.as_ref();
    let encap = m.and_then(|m| m.encapsulation.clone());
    let less = r
        .base
        .as_ref()
        .and_then(|d| Some((d.d_bytes?, d.path.clone())))
        .filter(|(b, _)| *b != 0)
        .map(|(b, p)| {
            if b > 0 {
                format!("{b} B less than {p}")
            } else {
                format!("{} B more than {p}", -b)
            }
        });
    match (encap, less) {
        (Some(e), Some(l)) => format!("{e}; {l}"),
        (Some(e), None) => e,
        (None, Some(l)) => l,
        (None, None) => "-".into(),
    }
}

/// A direction's cells shared by the incast and bisection tables: the
/// direction, Gbit/s, the port share, Jain's index, the start skew and the
/// overlap of the common interval.
fn leg_cells(l: &Leg, with_port: bool) -> Vec<String> {
    let mut v = vec![l.direction_words(), opt(l.aggregate_gbps)];
    if with_port {
        v.push(opt(l.port_rate_gbps));
    }
    v.extend([
        match (l.pct_port, &l.port_finding) {
            (Some(p), _) => format!("{p:.0}"),
            (None, Some(_)) => ">port".into(),
            _ => "-".into(),
        },
        l.jain
            .map(|j| format!("{j:.3}"))
            .unwrap_or_else(|| "-".into()),
        l.start_skew_s
            .map(|k| format!("{:.1}", k * 1e3))
            .unwrap_or_else(|| "-".into()),
        l.overlap_pct
            .map(|o| format!("{o:.1}"))
            .unwrap_or_else(|| "-".into()),
    ]);
    v
}

/// The flows of a direction (`n2 43% (3.00)`), or why it has no figure.
fn leg_flows(l: &Leg, each: impl Fn(&crate::flows::FlowShare) -> String) -> String {
    if let Some(f) = &l.failed {
        return format!("FAILED: {f}");
    }
    let mut s = l.flows.iter().map(each).collect::<Vec<_>>().join(", ");
    if l.own_interval_flows > 0 {
        s.push_str(&format!(
            " ({} flow(s) without progress counts: over their own interval)",
            l.own_interval_flows
        ));
    }
    if let Some(n) = &l.note {
        if !s.is_empty() {
            s.push_str("; ");
        }
        s.push_str(n);
    }
    s
}

/// One line per incast cell and direction.
pub fn incast_table(rep: &Report) -> Option<Table> {
    if rep.incasts.is_empty() {
        return None;
    }
    let mut t = Table::new(
        &[
            "test",
            "path",
            "receiver",
            "rep",
            "direction",
            "Gbit/s",
            "%port",
            "Jain",
            "skew ms",
            "overlap%",
            "per-flow share (forward: senders; reverse: peers)",
        ],
        &[0, 1, 2, 4, 10],
    );
    for ic in &rep.incasts {
        let l = &ic.leg;
        let mut row = vec![
            ic.test.clone(),
            ic.path.clone(),
            ic.receiver.clone(),
            (ic.repeat + 1).to_string(),
        ];
        row.extend(leg_cells(l, false));
        let reverse = l.to_clients;
        row.push(leg_flows(l, |f| {
            format!(
                "{} {:.0}% ({})",
                if reverse { &f.dst } else { &f.src },
                f.share * 100.0,
                fmt_num(f.gbps)
            )
        }));
        t.rows.push(row);
    }
    Some(t)
}

/// One line per bisection cell and direction.
pub fn bisection_table(rep: &Report) -> Option<Table> {
    if rep.bisections.is_empty() {
        return None;
    }
    let mut t = Table::new(
        &[
            "test",
            "path",
            "cut",
            "rep",
            "direction",
            "Gbit/s",
            "port sum",
            "%",
            "Jain",
            "skew ms",
            "overlap%",
            "flows (where the data went)",
        ],
        &[0, 1, 4, 11],
    );
    for b in &rep.bisections {
        let mut row = vec![
            b.test.clone(),
            b.path.clone(),
            b.cut.to_string(),
            (b.repeat + 1).to_string(),
        ];
        row.extend(leg_cells(&b.leg, true));
        row.push(leg_flows(&b.leg, |f| {
            format!("{}->{} {}", f.src, f.dst, fmt_num(f.gbps))
        }));
        t.rows.push(row);
    }
    Some(t)
}

fn header(rep: &Report, md: bool) -> String {
    let r = &rep.run;
    let mut o = format!(
        "run {} of plan {} (started {}, {}), fabperf {}; cells: {} done, {} failed, {} pending",
        r.id,
        esc(&r.plan, md),
        esc(&r.started_at, md),
        r.ended_at
            .as_deref()
            .map(|e| format!("ended {}", esc(e, md)))
            .unwrap_or_else(|| "not finished".into()),
        esc(&r.fabperf_version, md),
        r.cells_done,
        r.cells_failed,
        r.cells_pending
    );
    match (&rep.baseline, rep.baseline_from) {
        (Some(raw), Some(from)) => {
            let b = esc(raw, md);
            if crate::analysis::dim_baseline(raw).is_some() {
                let _ = write!(
                    o,
                    "\nbaseline: {b} (each row against the same test, path and other dimensions \
                     at that value; from the {from})"
                );
            } else {
                let _ = write!(o, "\nbaseline path: {b} (from the {from})");
            }
        }
        _ => o.push_str("\nno baseline path (the plan's `baseline` or --baseline PATH sets one)"),
    }
    o
}

/// What the marks in the difference columns mean, for the marks used.
pub fn marks_legend(rep: &Report) -> Vec<String> {
    let mut out = Vec::new();
    let any = |f: &dyn Fn(&crate::analysis::Delta) -> bool| {
        rep.rows.iter().any(|r| r.base.as_ref().is_some_and(f))
    };
    if any(&|d| d.within_noise == Some(true) && d.unlike.is_empty()) {
        out.push(
            "~ the difference is not significant (Welch's two-sample t-test over the repeats, p ≥ 0.05): noise".to_string(),
        );
    }
    if any(&|d| !d.unlike.is_empty()) {
        out.push(
            "≠ compared with an unlike baseline row (--compare-unlike): the row's notes say what differs".to_string(),
        );
    }
    out
}

/// Render the report as text or Markdown.
pub fn render(rep: &Report, md: bool) -> String {
    let mut o = String::new();
    let h = |o: &mut String, title: &str| {
        if md {
            let _ = writeln!(o, "\n## {title}\n");
        } else {
            let _ = writeln!(o, "\n== {title}");
        }
    };
    if md {
        let _ = writeln!(o, "# fabperf report: {}\n", esc(&rep.run.plan, md));
        for l in header(rep, md).lines() {
            let _ = writeln!(o, "{l}  ");
        }
    } else {
        let _ = writeln!(o, "fabperf report: {}", header(rep, md));
    }
    for fam in Family::ALL {
        if let Some((title, t, notes)) = family_table(rep, fam) {
            h(&mut o, &title);
            o.push_str(&if md { t.markdown() } else { t.text() });
            if !notes.is_empty() {
                o.push('\n');
            }
            for (i, n) in notes.iter().enumerate() {
                let _ = writeln!(
                    o,
                    "{}[{}] {}",
                    if md { "- " } else { "  " },
                    i + 1,
                    esc(n, md)
                );
            }
        }
    }
    for l in marks_legend(rep) {
        let _ = writeln!(o, "{}{l}", if md { "\n" } else { "  " });
    }
    if !rep.meshes.is_empty() {
        h(&mut o, "Mesh (N×N)");
        for m in &rep.meshes {
            let s = fabperf_run::summary::render(m);
            if md {
                // A fence no stored text can close.
                let fence = escape::markdown_fence(&s);
                let _ = writeln!(o, "{fence}\n{s}{fence}");
            } else {
                o.push_str(&s);
            }
        }
    }
    if let Some(t) = incast_table(rep) {
        h(
            &mut o,
            "Incast (N−1 senders into one receiver; reverse: the receiver back to them; per cell and direction)",
        );
        o.push_str(&if md { t.markdown() } else { t.text() });
    }
    if let Some(t) = bisection_table(rep) {
        h(
            &mut o,
            "Bisection (half the nodes into the other half; per cell and direction)",
        );
        o.push_str(&if md { t.markdown() } else { t.text() });
    }
    if !rep.verdicts.is_empty() {
        h(&mut o, "Verdicts");
        let mut t = Table::new(&["", "", "verdict", "why"], &[0, 1, 2, 3]);
        for v in &rep.verdicts {
            t.rows.push(vec![
                v.scope.to_string(),
                v.subject.clone(),
                v.level.word().to_string(),
                v.text.clone(),
            ]);
        }
        if md {
            t.head = vec!["".into(), "subject".into(), "verdict".into(), "why".into()];
            o.push_str(&t.markdown());
        } else {
            // Long reasons stay on one line each: easier to grep.
            for r in &t.rows {
                let r: Vec<String> = r.iter().map(|c| escape::terminal(c)).collect();
                let _ = writeln!(o, "{:<4} {:<16} {:<4}  {}", r[0], r[1], r[2], r[3]);
            }
        }
    }
    let doctor: Vec<_> = rep.findings.iter().collect();
    if !doctor.is_empty() {
        h(&mut o, "Findings stored with the run");
        for f in doctor {
            let _ = writeln!(
                o,
                "{}{} [{}] {}{}",
                if md { "- " } else { "  " },
                esc(&f.label(), md),
                esc(f.severity.as_deref().unwrap_or(&f.kind), md),
                esc(f.summary.as_deref().unwrap_or(""), md),
                if f.fix.is_empty() {
                    String::new()
                } else {
                    format!(" — fix: {}", esc(&f.fix.join("; "), md))
                }
            );
        }
    }
    if !rep.failed.is_empty() {
        h(&mut o, "Failed cells");
        for f in &rep.failed {
            let _ = writeln!(
                o,
                "{}{} {} on {} ({}): {}",
                if md { "- " } else { "  " },
                esc(&f.cell, md),
                esc(&f.test, md),
                esc(&f.path, md),
                esc(
                    &f.flows
                        .iter()
                        .map(|(a, b)| format!("{a}->{b}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    md
                ),
                esc(&f.error, md)
            );
        }
    }
    if !rep.notes.is_empty() {
        h(&mut o, "Notes");
        for n in &rep.notes {
            let _ = writeln!(o, "{}{}", if md { "- " } else { "  " }, esc(n, md));
        }
    }
    if !rep.gates.is_empty() {
        h(&mut o, "Gates");
        o.push_str(&gates_text(rep, md));
    }
    o
}

/// The gates' results.
pub fn gates_text(rep: &Report, md: bool) -> String {
    let mut o = String::new();
    let li = if md { "- " } else { "" };
    for g in &rep.gates {
        let status = if g.not_applicable {
            "n/a "
        } else if g.passed() {
            "PASS"
        } else {
            "FAIL"
        };
        let _ = writeln!(
            o,
            "{li}{status} {}{} ({} checked{})",
            esc(&g.gate, md),
            g.preset
                .as_deref()
                .map(|p| format!(" [preset {}]", esc(p, md)))
                .unwrap_or_default(),
            g.checked,
            if g.not_applicable {
                ", nothing measured matches"
            } else {
                ""
            }
        );
        for n in &g.notes {
            let _ = writeln!(o, "{}  note: {n}", if md { "  " } else { "" });
        }
        for v in &g.violations {
            let _ = writeln!(
                o,
                "{}  {}: measured {}, required {}{}",
                if md { "  " } else { "" },
                esc(&v.subject, md),
                esc(&v.measured, md),
                esc(&v.required, md),
                if v.cells.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (cell{} {})",
                        if v.cells.len() == 1 { "" } else { "s" },
                        esc(&v.cells.join(", "), md)
                    )
                }
            );
        }
    }
    o
}

/// The rows as CSV (every cell through the CSV escaping rule).
pub fn csv(rep: &Report) -> Result<String, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "run_id",
        "family",
        "test",
        "kind",
        "path",
        "pattern",
        "flows",
        "size",
        "streams",
        "op",
        "direction",
        "mtu",
        "rate",
        "n",
        "unit",
        "mean",
        "stdev",
        "ci95",
        "min",
        "max",
        "port_rate_gbps",
        "pct_port",
        "cpu_client_pct_per_gbps",
        "cpu_agent_pct_per_gbps",
        "cpu_source",
        "retransmits",
        "loss_pct",
        "lat_p50_us",
        "lat_p90_us",
        "lat_p99_us",
        "lat_p999_us",
        "lat_mean_us",
        "lat_source",
        "baseline_path",
        "d_gbps",
        "d_pct",
        "d_p50_us",
        "d_p99_us",
        "d_loss_pp",
        "within_noise",
        "warnings",
        "cells",
        "instances",
        "instances_min",
        "instances_median",
        "instances_max",
        "welch_p",
        "unlike",
        "port_finding",
        "http_errors",
        "http_error_pct",
        "d_error_pp",
        "d_bytes",
        "overhead",
        "of_bidir",
        "overlap_pct_min",
        "overlap_pct_max",
        "start_skew_ms_min",
        "start_skew_ms_max",
        "failed_repeats",
        "unmeasured",
    ])?;
    let f = |v: Option<f64>| {
        v.filter(|x| x.is_finite())
            .map(|x| x.to_string())
            .unwrap_or_default()
    };
    let u = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_default();
    for r in &rep.rows {
        let s = r.stats.as_ref();
        let l = r.lat.as_ref();
        let d = r.base.as_ref();
        w.write_record(
            [
                rep.run.id.to_string(),
                format!("{:?}", r.family).to_lowercase(),
                r.test.clone(),
                r.kind.clone(),
                r.path.clone(),
                r.pattern.clone(),
                r.scope.clone(),
                u(r.size),
                u(r.streams),
                r.op.clone().unwrap_or_default(),
                r.direction.clone().unwrap_or_default(),
                u(r.mtu),
                r.rate.clone().unwrap_or_default(),
                s.map(|s| s.n.to_string()).unwrap_or_default(),
                r.family.unit().to_string(),
                f(s.map(|s| s.mean)),
                f(s.and_then(|s| s.stdev)),
                f(s.and_then(|s| s.ci95)),
                f(s.map(|s| s.min)),
                f(s.map(|s| s.max)),
                f(r.port_rate_gbps),
                f(r.pct_port),
                f(r.cpu.as_ref().and_then(|c| c.client)),
                f(r.cpu.as_ref().and_then(|c| c.agent)),
                r.cpu
                    .as_ref()
                    .map(|c| c.source.to_string())
                    .unwrap_or_default(),
                f(r.retransmits),
                f(r.loss_pct),
                f(l.and_then(|l| l.p50)),
                f(l.and_then(|l| l.p90)),
                f(l.and_then(|l| l.p99)),
                f(l.and_then(|l| l.p999)),
                f(l.and_then(|l| l.mean)),
                match l.map(|l| &l.source) {
                    Some(LatSource::Histograms { .. }) => "histograms".into(),
                    Some(LatSource::StoredPercentiles) => "stored_percentiles".into(),
                    None => String::new(),
                },
                d.map(|d| d.path.clone()).unwrap_or_default(),
                f(d.and_then(|d| d.d_gbps)),
                f(d.and_then(|d| d.d_pct)),
                f(d.and_then(|d| d.d_p50_us)),
                f(d.and_then(|d| d.d_p99_us)),
                f(d.and_then(|d| d.d_loss_pp)),
                d.and_then(|d| d.within_noise)
                    .map(|b| b.to_string())
                    .unwrap_or_default(),
                r.warnings.join(" | "),
                r.cells.join(" "),
                r.spread
                    .as_ref()
                    .map(|sp| format!("{} {}", sp.count, sp.of))
                    .unwrap_or_default(),
                f(r.spread.as_ref().map(|sp| sp.min)),
                f(r.spread.as_ref().map(|sp| sp.median)),
                f(r.spread.as_ref().map(|sp| sp.max)),
                f(d.and_then(|d| d.welch).map(|w| w.p)),
                d.map(|d| d.unlike.join("; ")).unwrap_or_default(),
                r.port_finding.clone().unwrap_or_default(),
                r.http.as_ref().map(errors_words).unwrap_or_default(),
                f(r.http.as_ref().and_then(|h| h.error_pct)),
                f(d.and_then(|d| d.d_error_pp)),
                d.and_then(|d| d.d_bytes)
                    .map(|b| b.to_string())
                    .unwrap_or_default(),
                if r.family == Family::Mtu {
                    overhead_words(r)
                } else {
                    String::new()
                },
                if r.of_bidir {
                    "true".into()
                } else {
                    String::new()
                },
                f(r.concurrency.as_ref().map(|c| c.overlap_pct_min)),
                f(r.concurrency.as_ref().map(|c| c.overlap_pct_max)),
                f(r.concurrency
                    .as_ref()
                    .and_then(|c| c.start_skew_s_min)
                    .map(|x| x * 1e3)),
                f(r.concurrency
                    .as_ref()
                    .and_then(|c| c.start_skew_s_max)
                    .map(|x| x * 1e3)),
                r.failed
                    .iter()
                    .map(|x| format!("{} (repeat {}): {}", x.cell, x.repeat + 1, x.reason))
                    .collect::<Vec<_>>()
                    .join(" | "),
                r.unmeasured.join(" | "),
            ]
            .iter()
            .map(|f| escape::csv_field(f).into_owned()),
        )?;
    }
    let bytes = w
        .into_inner()
        .map_err(|e| csv::Error::from(e.into_error()))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The verdict levels, worst first, for a one-line summary.
pub fn verdict_summary(rep: &Report) -> String {
    let n = |l: Level| rep.verdicts.iter().filter(|v| v.level == l).count();
    format!(
        "{} bad, {} warnings, {} ok",
        n(Level::Bad),
        n(Level::Warn),
        n(Level::Ok)
    )
}
