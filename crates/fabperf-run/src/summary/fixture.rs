//! Test fixtures: a store holding one run of mesh cells, re-tests and
//! their outcomes, and the summary of it.

pub(crate) use super::{
    analyze, render, MeshAnalysis, MeshGroup, NodeFault, Rule, RuleKind, SuspectState,
    DEFAULT_BW_FRACTION, DEFAULT_LAT_FACTOR,
};
pub(crate) use fabperf_results::{Placement, Record, Transport};
pub(crate) use fabperf_store::Role;
use fabperf_store::{Attempt, NewRun, Store};
pub(crate) use fabperf_store::{CellSpec, Measurement, RETEST};
pub(crate) use serde_json::{json, Value};

pub(crate) const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];

pub(crate) fn spec(
    id: &str,
    pattern: &str,
    a: &str,
    b: &str,
    params: Value,
    repeat: u32,
) -> CellSpec {
    let dims = match params.get("direction") {
        Some(d) => json!({"size": 65536, "direction": d}),
        None => json!({"size": 65536}),
    };
    CellSpec {
        cell_id: id.into(),
        seq: 0,
        batch: 0,
        test: "mesh".into(),
        kind: params
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("tcp-bw")
            .into(),
        path: "host".into(),
        pattern: pattern.into(),
        flows: vec![(a.into(), b.into())],
        params,
        dims,
        repeat,
    }
}

pub(crate) fn rec(gbps: f64, direction: &str) -> Record {
    let mut r = Record::new("tcp-bw", Transport::Tcp, 65536, 1);
    r.set_throughput((gbps * 1e9 / 8.0) as u64, 1.0, None);
    r.direction = Some(direction.into());
    r
}

pub(crate) fn attempt() -> Attempt {
    Attempt {
        attempts: 1,
        started_at: String::new(),
        ended_at: String::new(),
        wall_s: 1.0,
    }
}

/// A store holding one run of the given mesh cells (all in its plan),
/// the given re-test cells, and each cell's outcome: `Ok(records)` or
/// `Err(error)`.
pub(crate) struct Fixture {
    _dir: tempfile::TempDir,
    pub(crate) store: Store,
    pub(crate) run: i64,
}

pub(crate) type Outcome = Result<Vec<Record>, &'static str>;

pub(crate) fn fixture(
    mesh: Vec<(CellSpec, Outcome)>,
    retests: Vec<(CellSpec, Outcome)>,
) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("m.db")).unwrap();
    let run = store
        .create_run(&NewRun {
            plan_name: "p",
            plan_hash: "h",
            plan_file: None,
            plan_text: "",
        })
        .unwrap()
        .id;
    let specs: Vec<CellSpec> = mesh.iter().map(|(c, _)| c.clone()).collect();
    store.sync_cells(run, &specs, false).unwrap();
    let rt: Vec<CellSpec> = retests.iter().map(|(c, _)| c.clone()).collect();
    store.add_cells(run, &rt).unwrap();
    for (c, out) in mesh.into_iter().chain(retests) {
        let (a, b) = c.flows[0].clone();
        match out {
            Ok(recs) => {
                let ms: Vec<Measurement> = recs
                    .into_iter()
                    .map(|record| Measurement {
                        role: Role::Total,
                        src: Some(a.clone()),
                        dst: Some(b.clone()),
                        record,
                    })
                    .collect();
                store
                    .finish_cell_done(run, &c.cell_id, &attempt(), &ms)
                    .unwrap()
            }
            Err(e) => store
                .finish_cell_failed(run, &c.cell_id, &attempt(), e)
                .unwrap(),
        }
    }
    Fixture {
        _dir: dir,
        store,
        run,
    }
}

/// Every ordered pair of NODES, forward, with `fig(a, b)` Gbit/s.
pub(crate) fn mesh_cells(fig: impl Fn(&str, &str) -> Outcome) -> Vec<(CellSpec, Outcome)> {
    let mut v = Vec::new();
    for a in NODES {
        for b in NODES {
            if a != b {
                v.push((
                    spec(&format!("{a}{b}"), "mesh", a, b, json!({"size": 65536}), 0),
                    fig(a, b),
                ));
            }
        }
    }
    v
}

pub(crate) fn retest(a: &str, b: &str, round: u32, out: Outcome) -> (CellSpec, Outcome) {
    (
        spec(
            &format!("rt{round}-{a}{b}"),
            RETEST,
            a,
            b,
            json!({"size": 65536}),
            round,
        ),
        out,
    )
}

pub(crate) fn analyze_one(f: &Fixture) -> (MeshAnalysis, MeshGroup, String) {
    analyze_by(f, Rule::default())
}

pub(crate) fn analyze_by(f: &Fixture, rule: Rule) -> (MeshAnalysis, MeshGroup, String) {
    let a = analyze(&f.store, f.run, "mesh", &rule).unwrap();
    assert_eq!(a.groups.len(), 1, "{a:#?}");
    let g = a.groups[0].clone();
    let text = render(&a);
    eprintln!("{text}");
    (a, g, text)
}

pub(crate) fn state(g: &MeshGroup, a: &str, b: &str) -> Option<SuspectState> {
    g.suspects
        .iter()
        .find(|s| s.src == a && s.dst == b)
        .map(|s| s.state)
}

/// A mesh of `nodes` where every pair with `slow` measures 2 Gbit/s
/// (the rest 10), and re-tests of the `sampled` pairs only, at `again`.
pub(crate) fn sampled_mesh(
    nodes: &[&str],
    slow: &str,
    sampled: &[(&str, &str)],
    again: f64,
) -> Fixture {
    let mut mesh = Vec::new();
    for a in nodes {
        for b in nodes.iter().filter(|b| *b != a) {
            let v = if *a == slow || *b == slow { 2.0 } else { 10.0 };
            mesh.push((
                spec(&format!("{a}{b}"), "mesh", a, b, json!({"size": 65536}), 0),
                Ok(vec![rec(v, "forward")]),
            ));
        }
    }
    let rts = sampled
        .iter()
        .map(|(a, b)| retest(a, b, 0, Ok(vec![rec(again, "forward")])))
        .collect();
    fixture(mesh, rts)
}

pub(crate) const EIGHT: [&str; 8] = ["n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8"];
