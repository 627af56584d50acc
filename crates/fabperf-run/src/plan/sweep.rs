//! A test's sweep: the engine's default parameters, the fixed `params`,
//! the duration, the dimensions (sizes, streams, ops, mtus, directions,
//! rates, connections) and their cross product, counted against the plan's
//! budget before it is built; each point checked as its engine will.

use super::*;

/// What is left of a plan's sweep points and cells while its tests are
/// expanded: each test is counted before its points are built.
pub(super) struct Budget {
    pub(super) points: usize,
    pub(super) cells: usize,
}

/// A sweep point under construction: its dims, its params, where it came from.
pub(super) type Point = (Map<String, Value>, Value, Option<Range<usize>>);

/// Why a sweep point's data flows from the agent to the client (the
/// receiver of an incast to its senders): `reverse`, or an RDMA read.
pub(super) fn outcast(params: &Value) -> Option<String> {
    if params.get("direction").and_then(Value::as_str) == Some("reverse") {
        return Some("its direction is reverse".into());
    }
    if params.get("op").and_then(Value::as_str) == Some("read") {
        return Some("an RDMA read pulls from the receiver".into());
    }
    None
}

/// Seconds one cell is expected to take (measured interval + warm-up).
pub(super) fn expected_secs(kind: Kind, params: &Value) -> f64 {
    crate::drive::inner_secs(kind, params)
}

/// The engine's default parameters for a kind, as JSON.
pub(super) fn defaults(kind: Kind) -> Value {
    let v = match kind {
        Kind::TcpBw => serde_json::to_value(fabperf_sock::TcpBwParams::default()),
        Kind::TcpLat => serde_json::to_value(fabperf_sock::TcpLatParams::default()),
        Kind::UdpBw => serde_json::to_value(fabperf_sock::UdpBwParams::default()),
        Kind::UdpLat => serde_json::to_value(fabperf_sock::UdpLatParams::default()),
        Kind::RdmaBw => serde_json::to_value(fabperf_rdma::BwParams::default()),
        Kind::RdmaLat => serde_json::to_value(fabperf_rdma::LatParams::default()),
        Kind::HttpLoad => serde_json::to_value(fabperf_http::LoadParams::default()),
        Kind::Mtu => serde_json::to_value(fabperf_mtu::plan::PlanParams::default()),
    };
    v.unwrap_or(Value::Null)
}

/// Check engine parameters by decoding them as the engine will.
pub fn validate_params(kind: Kind, params: &Value) -> Result<(), String> {
    fn go<T: serde::de::DeserializeOwned>(
        v: &Value,
        check: impl Fn(&T) -> Result<(), String>,
    ) -> Result<(), String> {
        let p: T = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
        check(&p)
    }
    match kind {
        Kind::TcpBw => go::<fabperf_sock::TcpBwParams>(params, |p| p.validate()),
        Kind::TcpLat => go::<fabperf_sock::TcpLatParams>(params, |p| p.validate()),
        Kind::UdpBw => go::<fabperf_sock::UdpBwParams>(params, |p| p.validate()),
        Kind::UdpLat => go::<fabperf_sock::UdpLatParams>(params, |p| p.validate()),
        Kind::RdmaBw => go::<fabperf_rdma::BwParams>(params, |p| p.validate()),
        Kind::RdmaLat => go::<fabperf_rdma::LatParams>(params, |p| p.validate()),
        Kind::HttpLoad => go::<fabperf_http::LoadParams>(params, |p| p.validate()),
        Kind::Mtu => go::<fabperf_mtu::plan::PlanParams>(params, |p| p.validate()),
    }
}

/// The sweep's points: the cross product of the listed dimensions, in the
/// order sizes × streams × ops × mtus × directions × rates.
pub(super) fn sweep(
    cx: &mut Diagnostics,
    t: &RawTest,
    kind: Kind,
    name: &str,
    per_point: usize,
    budget: &mut Budget,
) -> Vec<SweepPoint> {
    let mut base = defaults(kind);
    let tspan = t.kind.span();
    // Plan-wide fixed parameters.
    if let Some(p) = &t.params {
        if let (Some(obj), Value::Object(extra)) = (
            base.as_object_mut(),
            toml_to_json(&toml::Value::Table(p.get_ref().clone())),
        ) {
            for (k, v) in extra {
                if !obj.contains_key(&k) {
                    let known: Vec<&String> = obj.keys().collect();
                    cx.at(
                        p.span(),
                        format!(
                            "test {name:?}: {} has no parameter {k:?}; it has: {}",
                            kind.name(),
                            known
                                .iter()
                                .map(|s| s.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    );
                    continue;
                }
                obj.insert(k, v);
            }
        }
    }
    // The duration (every cell must be bounded).
    let dur_key = if kind.is_rdma() {
        "duration"
    } else {
        "duration_s"
    };
    match &t.duration {
        Some(d) => match parse_duration(d.get_ref()) {
            Ok(s) if s > 0.0 => base[dur_key] = json!(s),
            Ok(_) => cx.at(d.span(), "duration must be more than zero"),
            Err(e) => cx.at(d.span(), format!("duration: {e}")),
        },
        None => {
            if kind.is_rdma() && base.get("duration").is_none_or(Value::is_null) {
                // Iteration mode is bounded by its count; give cells a
                // duration anyway so the agent's limit and ETAs apply.
                base["duration"] = json!(5.0);
            }
        }
    }
    // Dimensions.
    type Dim = (&'static str, Vec<(Value, Range<usize>)>);
    let mut dims: Vec<Dim> = Vec::new();
    if let Some(sz) = &t.sizes {
        let mut vals = Vec::new();
        for s in sz.get_ref() {
            match size_value(s.get_ref()) {
                Ok(b) => vals.push((json!(b), s.span())),
                Err(e) => cx.at(s.span(), e),
            }
        }
        if sz.get_ref().is_empty() {
            cx.at(sz.span(), "`sizes` is empty");
        }
        dims.push(("size", vals));
    }
    if let Some(st) = &t.streams {
        if !matches!(kind, Kind::TcpBw | Kind::RdmaBw) {
            cx.at(
                st.span(),
                format!(
                    "`streams` applies to tcp-bw (streams) and rdma-bw (QPs), not {}",
                    kind.name()
                ),
            );
        }
        let mut vals = Vec::new();
        for s in st.get_ref() {
            if let Some(n) = cx.int_in(s, "streams", 1, 1024) {
                vals.push((json!(n), s.span()));
            }
        }
        if matches!(kind, Kind::TcpBw | Kind::RdmaBw) {
            dims.push(("streams", vals));
        }
    }
    if let Some(ops) = &t.ops {
        if !kind.is_rdma() {
            cx.at(
                ops.span(),
                format!("`ops` applies to rdma-bw and rdma-lat, not {}", kind.name()),
            );
        }
        let mut vals = Vec::new();
        for o in ops.get_ref() {
            if ["write", "read", "send"].contains(&o.get_ref().as_str()) {
                vals.push((json!(o.get_ref()), o.span()));
            } else {
                cx.at(
                    o.span(),
                    format!("unknown op {:?}; one of: write, read, send", o.get_ref()),
                );
            }
        }
        if kind.is_rdma() {
            dims.push(("op", vals));
        }
    }
    if let Some(m) = &t.mtus {
        if !kind.is_rdma() {
            cx.at(m.span(), format!("`mtus` applies to RDMA tests (the path MTU of the QPs); a socket path's MTU is the interface's (set it with a tuning profile), not {}", kind.name()));
        }
        let mut vals = Vec::new();
        for v in m.get_ref() {
            if [256, 512, 1024, 2048, 4096].contains(v.get_ref()) {
                vals.push((json!(v.get_ref()), v.span()));
            } else {
                cx.at(
                    v.span(),
                    format!(
                        "RDMA MTU {} is not one of 256, 512, 1024, 2048, 4096",
                        v.get_ref()
                    ),
                );
            }
        }
        if kind.is_rdma() {
            dims.push(("mtu", vals));
        }
    }
    if let Some(d) = &t.directions {
        if !matches!(kind, Kind::TcpBw | Kind::UdpBw | Kind::RdmaBw) {
            cx.at(
                d.span(),
                format!(
                    "`directions` applies to bandwidth tests, not {}",
                    kind.name()
                ),
            );
        }
        let mut vals = Vec::new();
        for v in d.get_ref() {
            let ok = if kind == Kind::RdmaBw {
                ["forward", "bidir"].contains(&v.get_ref().as_str())
            } else {
                ["forward", "reverse", "bidir"].contains(&v.get_ref().as_str())
            };
            if ok {
                vals.push((json!(v.get_ref()), v.span()));
            } else {
                cx.at(
                    v.span(),
                    format!(
                        "direction {:?}: use {}",
                        v.get_ref(),
                        if kind == Kind::RdmaBw {
                            "forward or bidir"
                        } else {
                            "forward, reverse or bidir"
                        }
                    ),
                );
            }
        }
        if matches!(kind, Kind::TcpBw | Kind::UdpBw | Kind::RdmaBw) {
            dims.push(("direction", vals));
        }
    }
    if let Some(r) = &t.rates {
        if !matches!(kind, Kind::UdpBw | Kind::HttpLoad) {
            cx.at(
                r.span(),
                format!(
                    "`rates` applies to udp-bw (bits/s) and http-load (requests/s), not {}",
                    kind.name()
                ),
            );
        }
        let mut vals = Vec::new();
        for v in r.get_ref() {
            let x = if kind == Kind::HttpLoad {
                request_rate_value(v.get_ref()).map(|x| json!(x))
            } else {
                rate_value(v.get_ref()).map(|x| json!(x))
            };
            match x {
                Ok(x) => vals.push((x, v.span())),
                Err(e) => cx.at(v.span(), e),
            }
        }
        if matches!(kind, Kind::UdpBw | Kind::HttpLoad) {
            dims.push(("rate", vals));
        }
    }
    if let Some(c) = &t.connections {
        if kind != Kind::HttpLoad {
            cx.at(
                c.span(),
                format!("`connections` applies to http-load, not {}", kind.name()),
            );
        }
        let mut vals = Vec::new();
        for v in c.get_ref() {
            let max = i64::from(fabperf_http::params::MAX_CONNECTIONS);
            if let Some(n) = cx.int_in(v, "connections", 1, max) {
                vals.push((json!(n), v.span()));
            }
        }
        if c.get_ref().is_empty() {
            cx.at(c.span(), "`connections` is empty");
        }
        if kind == Kind::HttpLoad {
            dims.push(("connections", vals));
        }
    }
    // Count before building: the cross product, each point under every
    // profile and policy count, each of those repeats × paths cells.
    let env = t.profiles.as_ref().map_or(1, |l| l.get_ref().len().max(1))
        * t.policies.as_ref().map_or(1, |l| l.get_ref().len().max(1));
    let n_points = dims
        .iter()
        .fold(env, |n, (_, vals)| n.saturating_mul(vals.len().max(1)));
    let n_cells = n_points.saturating_mul(per_point);
    if n_points > budget.points || n_cells > budget.cells {
        let mut factors: Vec<String> = dims
            .iter()
            .filter(|(_, v)| v.len() > 1)
            .map(|(d, v)| {
                let plural = if d.ends_with('s') { "" } else { "s" };
                format!("{} {d}{plural}", v.len())
            })
            .collect();
        if env > 1 {
            factors.push(format!("{env} profile/policy settings"));
        }
        let what = if n_points > budget.points {
            format!(
                "{n_points} sweep points ({}), more than the {} left of the {MAX_POINTS} a plan may have",
                factors.join(" × "),
                budget.points
            )
        } else {
            format!(
                "{n_cells} cells ({n_points} sweep points × {per_point} repeats and paths), more than the {} left of the {MAX_CELLS} a plan may have",
                budget.cells
            )
        };
        cx.at(
            tspan.clone(),
            format!("test {name:?} expands to {what}; shorten its lists"),
        );
        return Vec::new();
    }
    budget.points -= n_points;
    budget.cells -= n_cells;
    // Cross product.
    let mut points: Vec<Point> = vec![(Map::new(), base, None)];
    for (dim, vals) in &dims {
        let mut next = Vec::new();
        for (d, p, sp) in &points {
            for (v, vspan) in vals {
                let mut d = d.clone();
                let mut p = p.clone();
                d.insert((*dim).to_string(), v.clone());
                apply_dim(kind, &mut p, dim, v);
                next.push((d, p, sp.clone().or(Some(vspan.clone()))));
            }
        }
        points = next;
        if points.len() > MAX_CELLS {
            cx.at(
                tspan.clone(),
                format!("test {name:?}: the sweep has more than {MAX_CELLS} points"),
            );
            return Vec::new();
        }
    }
    let mut out = Vec::new();
    for (dims, params, sp) in points {
        if let Err(e) = validate_params(kind, &params) {
            cx.at(
                sp.unwrap_or(tspan.clone()),
                format!(
                    "test {name:?}: {} rejects these parameters: {e}",
                    kind.name()
                ),
            );
            continue;
        }
        out.push(SweepPoint {
            dims,
            params,
            env: CellEnv::default(),
        });
    }
    out
}

pub(super) fn apply_dim(kind: Kind, p: &mut Value, dim: &str, v: &Value) {
    match (dim, kind.is_rdma()) {
        ("size", false) => p["size"] = v.clone(),
        ("size", true) => p["sizes"] = json!([v]),
        ("streams", false) => p["streams"] = v.clone(),
        ("streams", true) => p["qps"] = v.clone(),
        ("op", _) => p["op"] = v.clone(),
        ("mtu", _) => p["mtu"] = v.clone(),
        ("direction", false) => p["direction"] = v.clone(),
        ("direction", true) => p["bidir"] = json!(v == "bidir"),
        ("rate", _) if kind == Kind::HttpLoad => p["rate"] = v.clone(),
        ("rate", _) => p["rate_bps"] = v.clone(),
        ("connections", _) => p["connections"] = v.clone(),
        _ => {}
    }
}
