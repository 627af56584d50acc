//! The gate parser: a recursive descent over the lexer's tokens, one
//! method per part of the grammar (see the module's grammar), each error
//! at its column.

use super::error::GateError;
use super::lexer::{lex, Tok};
use super::syntax::{Gate, Metric, Reference, Rhs, Selectors, Stat};
use crate::units::{factor, Dim};

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
                    sel.size = Some(fabperf_units::parse_size(&v).map_err(|_| {
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
#[cfg(test)]
mod tests {
    use super::super::{Cmp, MAX_GATE_LEN, PRESETS};
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

    #[test]
    fn size_selectors_take_the_command_lines_sizes() {
        let size = |s: &str| parse(&format!("size:{s} tcp-bw >= 5")).map(|g| g.selectors.size);
        for (s, b) in [
            ("64K", 65536),
            ("1M", 1 << 20),
            ("1472", 1472),
            ("1.5K", 1536),
            ("64kib", 65536),
            ("1e3", 1000),
            ("1T", 1 << 40),
        ] {
            assert_eq!(size(s).unwrap(), Some(b), "{s}");
        }
        for s in ["0.3", "K", "64Q", "99999999999999999999999G"] {
            let e = size(s).unwrap_err();
            assert_eq!(e.col, 6, "{s}");
            assert!(e.msg.contains("is not a size"), "{s}: {}", e.msg);
        }
    }
}
