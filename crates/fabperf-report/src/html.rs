//! The report as one self-contained HTML file: inline CSS, hand-written SVG
//! charts (grouped bandwidth bars per size and path with the baseline
//! marked, latency percentile curves per path, the mesh heat-maps), the
//! tables and the verdicts. No script, no external resource: a Content
//! Security Policy forbids both, so the file views the same offline.

use crate::analysis::{fmt_num, Family, LatSource, Level, Report, Row};
use crate::text::{family_table, gates_text, Table};
use crate::units::size_label;
use fabperf_run::summary::{MeshGroup, Metric, SuspectState};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Escape text for HTML and SVG content and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => o.push('\u{fffd}'),
            c => o.push(c),
        }
    }
    o
}

/// Okabe–Ito colours (distinguishable with the common colour-vision
/// deficiencies), one per path.
const PALETTE: [&str; 8] = [
    "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000",
];

fn colour(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// A "nice" axis: (max, step) with step 1, 2 or 5 × 10^k.
fn nice_axis(max: f64) -> (f64, f64) {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    ((max / step).ceil() * step, step)
}

/// A coordinate or size for an SVG attribute: always a finite number (a
/// statistic that overflowed never writes `inf` or `NaN` into the file).
fn n(v: f64) -> String {
    let v = if v.is_finite() {
        v.clamp(-1e6, 1e6)
    } else {
        0.0
    };
    format!("{v:.1}")
}

/// A chart group's name: the test and sweep point, and the pair for the
/// pairs pattern (several pairs of one test are told apart by their nodes);
/// the path is not in it, each group holds one bar per path.
fn group_lines(r: &Row) -> (String, Option<String>) {
    let mut s = r.test.clone();
    if let Some(b) = r.size {
        s.push(' ');
        s.push_str(&size_label(b));
    }
    if let Some(op) = r.op.as_deref().filter(|o| *o != "ping-pong") {
        s.push(' ');
        s.push_str(op);
    }
    if let Some(k) = r.streams.filter(|k| *k > 1) {
        s.push_str(&format!(" x{k}"));
    }
    if let Some(d) = r.direction.as_deref().filter(|d| *d != "forward") {
        s.push(' ');
        s.push_str(d);
    }
    if let Some(rate) = &r.rate {
        s.push_str(&format!(" @{rate}"));
    }
    if let Some(v) = &r.variant {
        s.push(' ');
        s.push_str(v);
    }
    let pair = (r.pattern == "pairs" && !r.scope.is_empty()).then(|| r.scope.replace(" -> ", "→"));
    (s, pair)
}

/// [`group_lines`] on one line (the grouping key and the bars' titles).
fn group_label(r: &Row) -> String {
    match group_lines(r) {
        (s, Some(p)) => format!("{s} {p}"),
        (s, None) => s,
    }
}

/// Width of a text at font-size 11, roughly (for layout only).
fn text_w(s: &str) -> f64 {
    s.chars().count() as f64 * 6.4
}

/// Grouped bars: one group per test × size × sweep point, one bar per path,
/// error bars for the 95 % CI, the baseline's value as a dashed line over
/// its group and its bar outlined.
fn bars_chart(rep: &Report, fam: Family, id: &str) -> Option<String> {
    let rows: Vec<&Row> = rep
        .rows
        .iter()
        .filter(|r| r.family == fam && r.pattern == "pairs")
        // A mean that overflowed (or is not a figure at all) is not drawn.
        .filter(|r| {
            r.stats
                .as_ref()
                .is_some_and(|s| s.mean.is_finite() && s.mean >= 0.0)
        })
        .collect();
    if rows.is_empty() {
        return None;
    }
    let paths = rep.paths();
    let mut groups: Vec<(String, Vec<&Row>)> = Vec::new();
    for r in rows {
        // Bars of one group share the comparison key (the baseline's).
        let key = format!(
            "{}|{:?}|{:?}|{}",
            r.base
                .as_ref()
                .map(|d| d.test.clone())
                .unwrap_or_else(|| r.test.clone()),
            r.size,
            r.direction,
            r.scope_key
        );
        let key = if r.base.is_some() || Some(r.path.as_str()) == rep.baseline.as_deref() {
            key
        } else {
            format!("{key}|{}", group_label(r))
        };
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(r),
            None => groups.push((key, vec![r])),
        }
    }
    let top = groups
        .iter()
        .flat_map(|(_, v)| v.iter())
        .map(|r| {
            let s = r.stats.as_ref().expect("filtered");
            s.mean + s.ci95.filter(|c| c.is_finite()).unwrap_or(0.0)
        })
        .fold(0.0, f64::max);
    let (ymax, step) = nice_axis(top * 1.05);
    let bar_w = 22.0;
    let gap = 26.0;
    let left = 64.0;
    let plot_h = 260.0;
    let top_pad = 30.0;
    let label_h = 44.0;
    let widths: Vec<f64> = groups
        .iter()
        .map(|(_, v)| {
            let (a, b) = group_lines(v[0]);
            let text = text_w(&a).max(b.as_deref().map(text_w).unwrap_or(0.0)) + 14.0;
            (v.len() as f64 * bar_w + gap).max(text)
        })
        .collect();
    let width = (left + widths.iter().sum::<f64>() + 20.0).max(480.0);
    let height = top_pad + plot_h + label_h;
    let y = |v: f64| top_pad + plot_h - v / ymax * plot_h;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart" data-chart="{id}" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{title}"><title>{title}</title>"#,
        w = n(width),
        h = n(height),
        title = esc(&format!(
            "{}: mean per path with 95 % intervals",
            fam.title()
        ))
    );
    // Axis and grid.
    let mut t = 0.0;
    while t <= ymax + step * 0.001 {
        let yy = y(t);
        let _ = write!(
            s,
            r##"<line x1="{l}" y1="{yy}" x2="{r}" y2="{yy}" stroke="#ddd"/><text x="{tx}" y="{ty}" text-anchor="end" font-size="11">{v}</text>"##,
            l = n(left),
            r = n(width - 10.0),
            yy = n(yy),
            tx = n(left - 6.0),
            ty = n(yy + 4.0),
            v = esc(&fmt_num(t))
        );
        t += step;
    }
    let _ = write!(
        s,
        r#"<text x="14" y="{}" font-size="12" transform="rotate(-90 14 {})" text-anchor="middle">Gbit/s</text>"#,
        n(top_pad + plot_h / 2.0),
        n(top_pad + plot_h / 2.0)
    );
    let mut x0 = left;
    for ((_, rows), w) in groups.iter().zip(&widths) {
        // Bars centred in the group's slot.
        let x = x0 + (w - rows.len() as f64 * bar_w) / 2.0;
        let base_row = rows
            .iter()
            .find(|r| Some(r.path.as_str()) == rep.baseline.as_deref());
        for (i, r) in rows.iter().enumerate() {
            let st = r.stats.as_ref().expect("filtered");
            let pi = paths.iter().position(|p| *p == r.path).unwrap_or(0);
            let bx = x + i as f64 * bar_w;
            let is_base = Some(r.path.as_str()) == rep.baseline.as_deref();
            let tip = format!(
                "{} on {}: {} Gbit/s{}{}{}",
                group_label(r),
                r.path,
                fmt_num(st.mean),
                st.ci95
                    .map(|c| format!(" ± {}", fmt_num(c)))
                    .unwrap_or_default(),
                r.base
                    .as_ref()
                    .and_then(|d| d.d_pct)
                    .map(|p| format!(", {p:+.1} % vs baseline"))
                    .unwrap_or_default(),
                r.pct_port
                    .map(|p| format!(", {p:.0} % of the port rate"))
                    .unwrap_or_default()
            );
            let _ = write!(
                s,
                r#"<rect class="bar" data-path="{p}" x="{x}" y="{y}" width="{w}" height="{h}" fill="{c}"{outline}><title>{tip}</title></rect>"#,
                p = esc(&r.path),
                x = n(bx + 1.0),
                y = n(y(st.mean)),
                w = n(bar_w - 2.0),
                h = n((y(0.0) - y(st.mean)).max(0.0)),
                c = colour(pi),
                outline = if is_base {
                    r##" stroke="#000" stroke-width="2""##
                } else {
                    ""
                },
                tip = esc(&tip)
            );
            if let Some(ci) = st.ci95.filter(|c| c.is_finite()) {
                let cx = bx + bar_w / 2.0;
                let (lo, hi) = (y((st.mean - ci).max(0.0)), y(st.mean + ci));
                let _ = write!(
                    s,
                    r##"<path d="M{cx} {lo}V{hi}M{a} {hi}H{b}M{a} {lo}H{b}" stroke="#333" fill="none"/>"##,
                    cx = n(cx),
                    lo = n(lo),
                    hi = n(hi),
                    a = n(cx - 4.0),
                    b = n(cx + 4.0)
                );
            }
            if is_base {
                let _ = write!(
                    s,
                    r#"<text x="{}" y="{}" font-size="10" text-anchor="middle">base</text>"#,
                    n(bx + bar_w / 2.0),
                    n(y(st.mean + st.ci95.filter(|c| c.is_finite()).unwrap_or(0.0)) - 4.0)
                );
            }
        }
        if let Some(b) = base_row {
            let bm = b.stats.as_ref().expect("filtered").mean;
            let _ = write!(
                s,
                r##"<line class="baseline" x1="{}" x2="{}" y1="{yy}" y2="{yy}" stroke="#000" stroke-dasharray="4 3"/>"##,
                n(x - 4.0),
                n(x + rows.len() as f64 * bar_w + 4.0),
                yy = n(y(bm))
            );
        }
        let lx = x0 + w / 2.0;
        let ly = top_pad + plot_h + 16.0;
        let (head, pair) = group_lines(rows[0]);
        let _ = write!(
            s,
            r#"<text x="{lx}" y="{ly}" font-size="11" text-anchor="middle">{}</text>"#,
            esc(&head),
            lx = n(lx),
            ly = n(ly)
        );
        if let Some(p) = pair {
            let _ = write!(
                s,
                r##"<text x="{lx}" y="{ly}" font-size="10" fill="#555" text-anchor="middle">{}</text>"##,
                esc(&p),
                lx = n(lx),
                ly = n(ly + 14.0)
            );
        }
        x0 += w;
    }
    let _ = write!(
        s,
        r##"<line x1="{l}" y1="{b}" x2="{r}" y2="{b}" stroke="#333"/></svg>"##,
        l = n(left),
        r = n(width - 10.0),
        b = n(y(0.0))
    );
    Some(s)
}

fn legend(rep: &Report, paths: &[String], base_note: &str) -> String {
    let mut s = String::from(r#"<p class="legend">"#);
    let all = rep.paths();
    for p in paths {
        let i = all.iter().position(|x| x == p).unwrap_or(0);
        let _ = write!(
            s,
            r#"<span><i style="background:{}"></i>{}{}</span> "#,
            colour(i),
            esc(p),
            if Some(p.as_str()) == rep.baseline.as_deref() {
                base_note
            } else {
                ""
            }
        );
    }
    s.push_str("</p>");
    s
}

/// x position of a percentile on a "nines" scale: 0, 50, 90, 99, 99.9, …
fn nines(p: f64) -> f64 {
    -(1.0 - (p / 100.0).min(0.999_999)).log10()
}

/// A row's curve: (percentile, µs) points, drawn dashed when stored.
type Series<'a> = (&'a Row, Vec<(f64, f64)>, bool);

/// Latency percentile curves per path for one test × size × sweep point.
fn latency_chart(rep: &Report, rows: &[&Row], id: &str) -> Option<String> {
    let series: Vec<Series> = rows
        .iter()
        .filter_map(|r| {
            let l = r.lat.as_ref()?;
            let pts: Vec<(f64, f64)> = match l.source {
                LatSource::Histograms { .. } => l
                    .curve
                    .iter()
                    .copied()
                    .filter(|(q, _)| *q < 100.0)
                    .collect(),
                LatSource::StoredPercentiles => [
                    (0.0, l.min),
                    (50.0, l.p50),
                    (90.0, l.p90),
                    (99.0, l.p99),
                    (99.9, l.p999),
                ]
                .iter()
                .filter_map(|(q, v)| Some((*q, (*v)?)))
                .collect(),
            };
            let pts: Vec<(f64, f64)> = pts
                .into_iter()
                .filter(|(_, v)| *v > 0.0 && v.is_finite())
                .collect();
            (pts.len() >= 2).then(|| (*r, pts, l.source == LatSource::StoredPercentiles))
        })
        .collect();
    if series.is_empty() {
        return None;
    }
    let (w, h, left, right, top, bottom) = (470.0, 270.0, 58.0, 34.0, 28.0, 40.0);
    let xmax = series
        .iter()
        .flat_map(|(_, p, _)| p.iter().map(|(q, _)| nines(*q)))
        .fold(1.0f64, f64::max)
        .ceil();
    let lo = series
        .iter()
        .flat_map(|(_, p, _)| p.iter().map(|(_, v)| *v))
        .fold(f64::INFINITY, f64::min);
    let hi = series
        .iter()
        .flat_map(|(_, p, _)| p.iter().map(|(_, v)| *v))
        .fold(0.0f64, f64::max);
    let (d0, d1) = (
        lo.log10().floor(),
        hi.log10().ceil().max(lo.log10().floor() + 1.0),
    );
    let px = |q: f64| left + nines(q) / xmax * (w - left - right);
    let py = |v: f64| top + (d1 - v.log10()) / (d1 - d0) * (h - top - bottom);
    let title = format!("{}: µs by percentile (log)", group_label(rows[0]));
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart" data-chart="{id}" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{t}"><title>{t}</title><text x="{l}" y="16" font-size="12">{t}</text>"#,
        w = n(w),
        h = n(h),
        l = n(left),
        t = esc(&title)
    );
    let mut d = d0;
    while d <= d1 + 1e-9 {
        let yy = py(10f64.powf(d));
        let _ = write!(
            s,
            r##"<line x1="{l}" x2="{r}" y1="{yy}" y2="{yy}" stroke="#ddd"/><text x="{tx}" y="{ty}" font-size="11" text-anchor="end">{v}</text>"##,
            l = n(left),
            r = n(w - right),
            yy = n(yy),
            tx = n(left - 6.0),
            ty = n(yy + 4.0),
            v = esc(&fmt_num(10f64.powf(d)))
        );
        d += 1.0;
    }
    for k in 0..=(xmax as i32) {
        let q = 100.0 * (1.0 - 10f64.powi(-k));
        let xx = px(q);
        let label = match k {
            0 => "p0".to_string(),
            1 => "p90".into(),
            2 => "p99".into(),
            k => format!("p99.{}", "9".repeat(k as usize - 2)),
        };
        let _ = write!(
            s,
            r##"<line x1="{xx}" x2="{xx}" y1="{t}" y2="{b}" stroke="#eee"/><text x="{xx}" y="{ly}" font-size="11" text-anchor="middle">{label}</text>"##,
            xx = n(xx),
            t = n(top),
            b = n(h - bottom),
            ly = n(h - bottom + 16.0),
            label = esc(&label)
        );
    }
    let p50 = px(50.0);
    let _ = write!(
        s,
        r##"<text x="{}" y="{}" font-size="11" text-anchor="middle">p50</text>"##,
        n(p50),
        n(h - bottom + 16.0)
    );
    let all = rep.paths();
    for (r, pts, stored) in &series {
        let i = all.iter().position(|p| *p == r.path).unwrap_or(0);
        let d: String = pts
            .iter()
            .enumerate()
            .map(|(k, (q, v))| {
                format!(
                    "{}{} {}",
                    if k == 0 { "M" } else { "L" },
                    n(px(*q)),
                    n(py(*v))
                )
            })
            .collect();
        let _ = write!(
            s,
            r#"<path class="curve" data-path="{p}" d="{d}" fill="none" stroke="{c}" stroke-width="2"{dash}><title>{tip}</title></path>"#,
            p = esc(&r.path),
            c = colour(i),
            dash = if *stored {
                r#" stroke-dasharray="5 4""#
            } else {
                ""
            },
            tip = esc(&format!(
                "{} on {}: {}",
                group_label(r),
                r.path,
                pts.iter()
                    .map(|(q, v)| format!("p{q}={}", fmt_num(*v)))
                    .collect::<Vec<_>>()
                    .join(" ")
            ))
        );
        for (q, v) in pts {
            let _ = write!(
                s,
                r#"<circle cx="{}" cy="{}" r="2.5" fill="{}"/>"#,
                n(px(*q)),
                n(py(*v)),
                colour(i)
            );
        }
    }
    s.push_str("</svg>");
    Some(s)
}

/// A colour from red (0) through yellow to green (1).
fn heat(f: f64) -> String {
    let f = f.clamp(0.0, 1.0);
    let hue = 120.0 * f;
    format!("hsl({hue:.0},70%,{:.0}%)", 45.0 + 10.0 * (1.0 - f))
}

/// `heat`'s colour as RGB bytes.
fn heat_rgb(f: f64) -> [u8; 3] {
    let f = f.clamp(0.0, 1.0);
    let (h, sat, l) = (120.0 * f / 60.0, 0.70, (45.0 + 10.0 * (1.0 - f)) / 100.0);
    let c = (1.0 - (2.0 * l - 1.0_f64).abs()) * sat;
    let x = c * (1.0 - (h % 2.0 - 1.0).abs());
    let (r, g) = if h < 1.0 { (c, x) } else { (x, c) };
    let m = l - c / 2.0;
    let b = |v: f64| ((v + m) * 255.0).round().clamp(0.0, 255.0) as u8;
    [b(r), b(g), b(0.0)]
}

/// A pair's figure relative to the group's reference, 1 = as good or better.
fn relative(g: &MeshGroup, v: f64) -> f64 {
    match (g.metric, g.best) {
        (Metric::BandwidthGbps, Some(best)) if best > 0.0 => v / best,
        (Metric::LatencyP50Us, Some(best)) if v > 0.0 => best / v,
        _ => 1.0,
    }
}

/// A mesh of more nodes than SVG cells a browser draws well: the matrix
/// as a PNG (one pixel per pair, or per block of pairs showing the block's
/// worst above 1024 nodes), then the worst pairs and nodes.
fn raster_heatmap(g: &MeshGroup, id: &str) -> String {
    let k = g.nodes.len();
    let scale = k.div_ceil(1024).max(1);
    let side = k.div_ceil(scale) as u32;
    let index: BTreeMap<&str, usize> = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    // Worst relative figure per pixel (lower is worse); failed pairs grey.
    let mut worst = vec![f64::INFINITY; side as usize * side as usize];
    let mut img = crate::png::Rgb::new(side, side, [255, 255, 255]);
    for (a, row) in &g.values {
        let Some(&i) = index.get(a.as_str()) else {
            continue;
        };
        for (b, v) in row {
            let Some(&j) = index.get(b.as_str()) else {
                continue;
            };
            let (x, y) = ((j / scale) as u32, (i / scale) as u32);
            let cell = &mut worst[(y * side + x) as usize];
            *cell = cell.min(relative(g, *v));
        }
    }
    for (y, row) in worst.chunks(side as usize).enumerate() {
        for (x, rel) in row.iter().enumerate() {
            if rel.is_finite() {
                img.set(x as u32, y as u32, heat_rgb((rel - 0.5) * 2.0));
            }
        }
    }
    for (a, b, _) in &g.failed {
        if let (Some(&i), Some(&j)) = (index.get(a.as_str()), index.get(b.as_str())) {
            img.set((j / scale) as u32, (i / scale) as u32, [0x99, 0x99, 0x99]);
        }
    }
    for i in 0..side {
        img.set(i, i, [0xdd, 0xdd, 0xdd]);
    }
    use base64::Engine;
    let png = base64::engine::general_purpose::STANDARD.encode(img.encode());
    let title = format!(
        "mesh {} ({}) on path {}: {} per pair, from row to column, {k} nodes",
        g.test,
        g.kind,
        g.path,
        g.metric.unit()
    );
    let shown = side.clamp(256, 768);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<figure class="heatmap" data-chart="{id}"><img src="data:image/png;base64,{png}" width="{shown}" height="{shown}" style="image-rendering:pixelated" alt="{t}" title="{t}"><figcaption>{t}. Rows: the sending node, columns: the receiving node, both in name order ({first} … {last}){per}. Green: as good as the reference pair or better; red: half of it or worse; grey: failed; white: not measured. The worst pairs and nodes:</figcaption></figure>"#,
        t = esc(&title),
        first = esc(g.nodes.first().map(String::as_str).unwrap_or("")),
        last = esc(g.nodes.last().map(String::as_str).unwrap_or("")),
        per = if scale > 1 {
            format!("; a pixel is a block of {scale}×{scale} pairs, coloured by its worst")
        } else {
            String::new()
        }
    );
    let list = fabperf_run::summary::LIST_MAX;
    let state = |a: &str, b: &str| {
        g.suspects
            .iter()
            .find(|s| s.src == a && s.dst == b)
            .map(|s| s.state.word())
            .unwrap_or("")
    };
    s.push_str(r#"<div class="scroll"><table><thead><tr><th class="l">worst pairs</th><th>"#);
    let _ = write!(
        s,
        r#"{}</th><th class="l">suspect</th></tr></thead><tbody>"#,
        esc(g.metric.unit())
    );
    for (a, b, v) in g.worst_pairs(list) {
        let _ = write!(
            s,
            r#"<tr><td class="l">{} → {}</td><td class="r">{}</td><td class="l">{}</td></tr>"#,
            esc(&a),
            esc(&b),
            fmt_num(v),
            esc(state(&a, &b))
        );
    }
    s.push_str(r#"</tbody></table><table><thead><tr><th class="l">worst nodes</th><th>"#);
    let _ = write!(
        s,
        r#"median pair, {}</th><th>pairs</th><th class="l">named</th></tr></thead><tbody>"#,
        esc(g.metric.unit())
    );
    for (node, v, pairs) in g.worst_nodes(list) {
        let named = g
            .node_findings
            .iter()
            .find(|f| f.node == node)
            .map(|f| {
                if f.confirmed {
                    "SUSPECT NODE"
                } else {
                    "unconfirmed suspect node"
                }
            })
            .unwrap_or("");
        let _ = write!(
            s,
            r#"<tr><td class="l">{}</td><td class="r">{}</td><td class="r">{pairs}</td><td class="l">{}</td></tr>"#,
            esc(&node),
            fmt_num(v),
            named
        );
    }
    s.push_str("</tbody></table></div>");
    s
}

/// The N×N matrix of a mesh group, coloured by each pair's figure
/// relative to the reference pair (the rule's: the median or the best);
/// suspects outlined.
fn heatmap(g: &MeshGroup, id: &str) -> String {
    let k = g.nodes.len();
    let cell = if k > 16 { 28.0 } else { 48.0 };
    let lab = g
        .nodes
        .iter()
        .map(|n| n.chars().count().min(24))
        .max()
        .unwrap_or(4) as f64
        * 7.0
        + 12.0;
    let (w, h) = (
        (lab + cell * k as f64 + 10.0).max(520.0),
        lab + cell * k as f64 + 34.0,
    );
    let title = format!(
        "mesh {} ({}) on path {}: {} per pair, from row to column",
        g.test,
        g.kind,
        g.path,
        g.metric.unit()
    );
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart heatmap" data-chart="{id}" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{t}"><title>{t}</title>"#,
        w = n(w),
        h = n(h),
        t = esc(&title)
    );
    let short = |s: &str| -> String { s.chars().take(24).collect() };
    for (i, node) in g.nodes.iter().enumerate() {
        let c = lab + cell * (i as f64 + 0.5);
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" font-size="11" text-anchor="end">{}</text><text x="{c}" y="{}" font-size="11" text-anchor="start" transform="rotate(-45 {c} {})">{}</text>"#,
            n(lab - 6.0),
            n(c + 4.0),
            esc(&short(node)),
            n(lab - 6.0),
            n(lab - 6.0),
            esc(&short(node)),
            c = n(c)
        );
    }
    let suspect = |a: &str, b: &str| {
        g.suspects
            .iter()
            .find(|s| s.src == a && s.dst == b)
            .map(|s| s.state)
    };
    let failed = |a: &str, b: &str| g.failed.iter().any(|(x, y, _)| x == a && y == b);
    for (i, a) in g.nodes.iter().enumerate() {
        for (j, b) in g.nodes.iter().enumerate() {
            let (x, y) = (lab + cell * j as f64, lab + cell * i as f64);
            let v = g.values.get(a).and_then(|r| r.get(b)).copied();
            let (fill, label, tip) = match (i == j, v) {
                (true, _) => ("#f4f4f4".to_string(), String::new(), a.to_string()),
                (false, Some(v)) => {
                    let rel = match (g.metric, g.best) {
                        (Metric::BandwidthGbps, Some(best)) if best > 0.0 => v / best,
                        (Metric::LatencyP50Us, Some(best)) if v > 0.0 => best / v,
                        _ => 1.0,
                    };
                    (
                        heat((rel - 0.5) * 2.0),
                        fmt_num(v),
                        format!(
                            "{a} -> {b}: {} {}{}",
                            fmt_num(v),
                            g.metric.unit(),
                            match suspect(a, b) {
                                Some(SuspectState::Confirmed) => ", suspect (confirmed)",
                                Some(SuspectState::Unconfirmed) =>
                                    ", suspect, unconfirmed (no re-test gave a figure)",
                                Some(SuspectState::Cleared) => ", suspect cleared by a re-test",
                                Some(SuspectState::WithNode) =>
                                    ", suspect with its node (not re-tested: the re-tests of a sample of the node's pairs confirmed it)",
                                None => "",
                            }
                        ),
                    )
                }
                (false, None) if failed(a, b) => {
                    ("#bbb".into(), "FAIL".into(), format!("{a} -> {b}: failed"))
                }
                (false, None) => (
                    "#fff".into(),
                    String::new(),
                    format!("{a} -> {b}: not measured (this mesh measures each pair one way)"),
                ),
            };
            let outline = match suspect(a, b) {
                Some(SuspectState::Confirmed | SuspectState::WithNode) => {
                    r##" stroke="#b00" stroke-width="3""##
                }
                Some(SuspectState::Unconfirmed) => r##" stroke="#b00" stroke-width="1.5""##,
                Some(SuspectState::Cleared) => r##" stroke="#b00" stroke-dasharray="3 2""##,
                None => r##" stroke="#fff""##,
            };
            let _ = write!(
                s,
                r#"<rect class="cell" x="{}" y="{}" width="{}" height="{}" fill="{fill}"{outline}><title>{}</title></rect>"#,
                n(x),
                n(y),
                n(cell),
                n(cell),
                esc(&tip)
            );
            if !label.is_empty() && cell >= 40.0 {
                let _ = write!(
                    s,
                    r#"<text x="{}" y="{}" font-size="11" text-anchor="middle">{}</text>"#,
                    n(x + cell / 2.0),
                    n(y + cell / 2.0 + 4.0),
                    esc(&label)
                );
            }
        }
    }
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" font-size="11">green: as good as the reference pair or better; red: half of it or worse; outlined red: suspect (thick: confirmed, thin: unconfirmed, dashed: cleared)</text></svg>"#,
        n(6.0),
        n(h - 10.0)
    );
    s
}

fn table_html(t: &Table) -> String {
    let mut s = String::from("<table><thead><tr>");
    for (i, h) in t.head.iter().enumerate() {
        let _ = write!(
            s,
            r#"<th class="{}">{}</th>"#,
            if t.left.contains(&i) { "l" } else { "r" },
            esc(h)
        );
    }
    s.push_str("</tr></thead><tbody>");
    for r in &t.rows {
        s.push_str("<tr>");
        for (i, c) in r.iter().enumerate() {
            let _ = write!(
                s,
                r#"<td class="{}">{}</td>"#,
                if t.left.contains(&i) { "l" } else { "r" },
                esc(c)
            );
        }
        s.push_str("</tr>");
    }
    s.push_str("</tbody></table>");
    s
}

const CSS: &str = r#"
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1200px;padding:0 16px;color:#222}
h1{font-size:22px;margin-bottom:4px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd;padding-bottom:4px}
.meta{color:#555}table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{padding:3px 8px;border-bottom:1px solid #eee;white-space:nowrap}th{background:#f6f6f6}
td.l,th.l{text-align:left}td.r,th.r{text-align:right;font-variant-numeric:tabular-nums}
.scroll{overflow-x:auto}.charts{display:flex;flex-wrap:wrap;gap:12px}
.verdict td:last-child{white-space:normal}.lvl{font-weight:600;padding:1px 6px;border-radius:3px}
.ok{background:#e3f4e8;color:#17622f}.warn{background:#fff1cc;color:#7a5600}.bad{background:#fde2e1;color:#9b1c1c}
.legend span{margin-right:14px}.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}
pre{background:#f8f8f8;padding:8px;overflow-x:auto;font-size:12px}ol.notes{font-size:12px;color:#444}
.pass{color:#17622f;font-weight:600}.fail{color:#9b1c1c;font-weight:600}
"#;

/// Render the report as a self-contained HTML page.
pub fn render(rep: &Report) -> String {
    let mut s = String::new();
    let title = format!("fabperf report: {} (run {})", rep.run.plan, rep.run.id);
    let _ = write!(
        s,
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{t}</title><style>{CSS}</style></head><body>
<h1>{t}</h1>"#,
        t = esc(&title)
    );
    let r = &rep.run;
    let _ = write!(
        s,
        r#"<p class="meta">{}started {}, {}; fabperf {}; cells: {} done, {} failed, {} pending.<br>{}</p>"#,
        r.description
            .as_deref()
            .map(|d| format!("{}. ", esc(d)))
            .unwrap_or_default(),
        esc(&r.started_at),
        r.ended_at
            .as_deref()
            .map(|e| format!("ended {}", esc(e)))
            .unwrap_or_else(|| "not finished".into()),
        esc(&r.fabperf_version),
        r.cells_done,
        r.cells_failed,
        r.cells_pending,
        match (&rep.baseline, rep.baseline_from) {
            (Some(b), Some(f)) => format!("Baseline path: <b>{}</b> (from the {}).", esc(b), esc(f)),
            _ => "No baseline path (the plan's <code>baseline</code> or <code>--baseline PATH</code> sets one).".into(),
        }
    );
    if !rep.verdicts.is_empty() {
        s.push_str(r#"<h2 id="verdicts">Verdicts</h2><table class="verdict"><tbody>"#);
        for v in &rep.verdicts {
            let class = match v.level {
                Level::Ok => "ok",
                Level::Warn => "warn",
                Level::Bad => "bad",
            };
            let _ = write!(
                s,
                r#"<tr><td class="l">{}</td><td class="l"><b>{}</b></td><td class="l"><span class="lvl {class}">{}</span></td><td class="l">{}</td></tr>"#,
                esc(v.scope),
                esc(&v.subject),
                esc(v.level.word()),
                esc(&v.text)
            );
        }
        s.push_str("</tbody></table>");
    }
    if !rep.gates.is_empty() {
        s.push_str(r#"<h2 id="gates">Gates</h2>"#);
        let _ = write!(s, "<pre>{}</pre>", esc(&gates_text(rep, false)));
    }
    for (fam, id) in [(Family::Bandwidth, "bandwidth"), (Family::Udp, "udp")] {
        if let Some(chart) = bars_chart(rep, fam, id) {
            let paths: Vec<String> = rep
                .paths()
                .into_iter()
                .filter(|p| rep.rows.iter().any(|r| r.family == fam && &r.path == p))
                .collect();
            let _ = write!(
                s,
                r#"<h2 id="{id}-chart">{}: per size and path</h2>{}<div class="scroll">{chart}</div>"#,
                esc(fam.title()),
                legend(rep, &paths, " (baseline: outlined bar, dashed line)")
            );
        }
    }
    // Latency: one chart per test × size × sweep point.
    let mut lat_groups: BTreeMap<(usize, String), Vec<&Row>> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for r in rep
        .rows
        .iter()
        .filter(|r| r.family == Family::Latency && r.pattern == "pairs")
    {
        let key = format!(
            "{}|{:?}|{}",
            r.base
                .as_ref()
                .map(|d| d.test.clone())
                .unwrap_or_else(|| r.test.clone()),
            r.size,
            r.scope_key
        );
        let i = match order.iter().position(|k| *k == key) {
            Some(i) => i,
            None => {
                order.push(key.clone());
                order.len() - 1
            }
        };
        lat_groups.entry((i, key)).or_default().push(r);
    }
    let charts: Vec<String> = lat_groups
        .values()
        .enumerate()
        .filter_map(|(i, rows)| latency_chart(rep, rows, &format!("latency-{}", i + 1)))
        .collect();
    if !charts.is_empty() {
        let paths: Vec<String> = rep
            .paths()
            .into_iter()
            .filter(|p| {
                rep.rows
                    .iter()
                    .any(|r| r.family == Family::Latency && &r.path == p)
            })
            .collect();
        let _ = write!(
            s,
            r#"<h2 id="latency-chart">Latency percentiles per path</h2>{}<p class="meta">From every sample of every repeat (merged histograms); dashed: only the repeats' stored percentiles were available.</p><div class="charts">{}</div>"#,
            legend(rep, &paths, " (baseline)"),
            charts.join("")
        );
    }
    for fam in Family::ALL {
        if let Some((title, t, notes)) = family_table(rep, fam) {
            let _ = write!(
                s,
                r#"<h2>{}</h2><div class="scroll">{}</div>"#,
                esc(&title),
                table_html(&t)
            );
            if !notes.is_empty() {
                s.push_str(r#"<ol class="notes">"#);
                for n in notes {
                    let _ = write!(s, "<li>{}</li>", esc(&n));
                }
                s.push_str("</ol>");
            }
        }
    }
    let legend = crate::text::marks_legend(rep);
    if !legend.is_empty() {
        let _ = write!(s, r#"<p class="meta">{}</p>"#, esc(&legend.join(" ")));
    }
    if !rep.meshes.is_empty() {
        s.push_str(r#"<h2 id="mesh">Mesh (N×N)</h2>"#);
        let mut k = 0;
        for m in &rep.meshes {
            for g in &m.groups {
                k += 1;
                if g.nodes.len() > fabperf_run::summary::MATRIX_MAX_NODES {
                    s.push_str(&raster_heatmap(g, &format!("mesh-{k}")));
                } else {
                    let _ = write!(
                        s,
                        r#"<div class="scroll">{}</div>"#,
                        heatmap(g, &format!("mesh-{k}"))
                    );
                }
            }
            let _ = write!(s, "<pre>{}</pre>", esc(&fabperf_run::summary::render(m)));
        }
    }
    if let Some(t) = crate::text::incast_table(rep) {
        let _ = write!(
            s,
            r#"<h2 id="incast">Incast</h2><p class="meta">Per cell and direction: forward is the senders into the receiver, reverse the receiver back to them (a bidir test measures both at once); each direction's aggregate is over its flows' common interval, against the receiver's port one way; Jain's index over that direction's flows; skew: how far apart the senders started; overlap: the common interval in % of the longest flow's.</p><div class="scroll">{}</div>"#,
            table_html(&t)
        );
    }
    if let Some(t) = crate::text::bisection_table(rep) {
        let _ = write!(
            s,
            r#"<h2 id="bisection">Bisection</h2><p class="meta">Per cell and direction: the aggregate over the cut's common interval against the sum of its flows' port rates, Jain's index over that direction's flows.</p><div class="scroll">{}</div>"#,
            table_html(&t)
        );
    }
    if !rep.agents.is_empty() {
        s.push_str(r#"<h2 id="agents">Agents and inventories</h2><table><thead><tr><th class="l">node</th><th class="l">path</th><th class="l">address</th><th class="l">interface</th><th>port Gbit/s</th><th>MTU</th><th>NUMA</th></tr></thead><tbody>"#);
        for a in &rep.agents {
            let i = &a.inventory;
            let _ = write!(
                s,
                r#"<tr><td class="l">{}</td><td class="l">{}</td><td class="l">{}</td><td class="l">{}</td><td class="r">{}</td><td class="r">{}</td><td class="r">{}</td></tr>"#,
                esc(&a.name),
                esc(&a.path),
                esc(&a.addr),
                esc(i.iface.as_deref().unwrap_or(if a.unreachable.is_some() {
                    "unreachable"
                } else {
                    "-"
                })),
                match (i.port_rate_gbps, i.virtual_link) {
                    (Some(p), false) => fmt_num(p),
                    (Some(p), true) => format!("{} (tc cap, virtual link)", fmt_num(p)),
                    (None, true) => "virtual link".into(),
                    (None, false) => "-".into(),
                },
                i.mtu.map(|m| m.to_string()).unwrap_or_else(|| "-".into()),
                i.numa_node
                    .map(|m| m.to_string())
                    .unwrap_or_else(|| "-".into()),
            );
        }
        s.push_str("</tbody></table>");
    }
    if !rep.findings.is_empty() {
        s.push_str(r#"<h2 id="findings">Findings stored with the run</h2><ul>"#);
        for f in &rep.findings {
            let _ = write!(
                s,
                "<li><b>{}</b> [{}] {}{}</li>",
                esc(&f.label()),
                esc(f.severity.as_deref().unwrap_or(&f.kind)),
                esc(f.summary.as_deref().unwrap_or("")),
                if f.fix.is_empty() {
                    String::new()
                } else {
                    format!(" — fix: <code>{}</code>", esc(&f.fix.join("; ")))
                }
            );
        }
        s.push_str("</ul>");
    }
    if !rep.failed.is_empty() {
        s.push_str(r#"<h2 id="failed">Failed cells</h2><ul>"#);
        for f in &rep.failed {
            let _ = write!(
                s,
                "<li><code>{}</code> {} on {} ({}): {}</li>",
                esc(&f.cell),
                esc(&f.test),
                esc(&f.path),
                esc(&f
                    .flows
                    .iter()
                    .map(|(a, b)| format!("{a}→{b}"))
                    .collect::<Vec<_>>()
                    .join(", ")),
                esc(&f.error)
            );
        }
        s.push_str("</ul>");
    }
    if !rep.notes.is_empty() {
        s.push_str(r#"<h2 id="notes">Notes</h2><ul>"#);
        for n in &rep.notes {
            let _ = write!(s, "<li>{}</li>", esc(n));
        }
        s.push_str("</ul>");
    }
    s.push_str("</body></html>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping() {
        assert_eq!(
            esc("<script>alert('x')</script>&\"\u{1b}[31m"),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;\u{fffd}[31m"
        );
    }

    #[test]
    fn axes() {
        assert_eq!(nice_axis(9.7), (10.0, 2.0));
        assert_eq!(nice_axis(23.0), (25.0, 5.0));
        assert_eq!(nice_axis(0.0), (1.0, 0.2));
        assert_eq!(nice_axis(f64::NAN), (1.0, 0.2));
        assert!((nines(99.0) - 2.0).abs() < 1e-12);
        assert!((nines(50.0) - std::f64::consts::LOG10_2).abs() < 1e-12);
        assert!(nines(100.0).is_finite());
    }
}
