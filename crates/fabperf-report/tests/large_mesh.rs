//! A mesh of more nodes than a matrix can show: the text summary lists the
//! worst pairs and nodes instead of printing 70 columns, the HTML report
//! draws the matrix as one PNG image instead of an SVG rectangle per pair,
//! and the slow node is named and listed first.

use fabperf_report::analysis::{build, Options};
use fabperf_results::{LatencyHistogram, LatencyKind, Record, Transport};
use fabperf_run::summary::{self, Rule};
use fabperf_store::{Attempt, CellSpec, Measurement, NewRun, Role, Store};
use serde_json::json;

const NODES: usize = 70;
const SLOW: &str = "n017";

fn lat(us: u64) -> Record {
    let mut h = LatencyHistogram::new(LatencyKind::HalfRtt);
    for i in 0..200 {
        h.record_rtt_ns(2 * (us * 1000 + i));
    }
    let mut r = Record::new("tcp-lat", Transport::Tcp, 64, 1);
    r.duration_s = 1.0;
    r.set_latency(&h);
    r.started_at = "2026-01-02T03:04:05Z".into();
    r
}

fn store() -> (tempfile::TempDir, std::path::PathBuf) {
    store_with(&[])
}

/// The mesh, its cells of `no_records` (sender, receiver) finished without
/// a single record.
fn store_with(no_records: &[(&str, &str)]) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("big.db");
    let mut s = Store::open(&db).unwrap();
    let mut plan = String::from("name = \"big\"\n");
    for i in 1..=NODES {
        plan.push_str(&format!(
            "[[agents]]\nname = \"n{i:03}\"\naddr = \"10.0.0.{i}\"\n"
        ));
    }
    plan.push_str(
        "[[tests]]\nname = \"lat\"\nkind = \"tcp-lat\"\npattern = \"mesh\"\nduration = \"1s\"\n",
    );
    let run = s
        .create_run(&NewRun {
            plan_name: "big",
            plan_hash: "h",
            plan_file: None,
            plan_text: &plan,
        })
        .unwrap()
        .id;
    let names: Vec<String> = (1..=NODES).map(|i| format!("n{i:03}")).collect();
    let mut cells = Vec::new();
    let mut ms = Vec::new();
    for a in &names {
        for b in &names {
            if a == b {
                continue;
            }
            cells.push(CellSpec {
                cell_id: format!("{a}-{b}"),
                seq: cells.len() as i64,
                batch: 0,
                test: "lat".into(),
                kind: "tcp-lat".into(),
                path: "host".into(),
                pattern: "mesh".into(),
                flows: vec![(a.clone(), b.clone())],
                params: json!({"size": 64, "duration_s": 1.0}),
                dims: json!({"size": 64}),
                repeat: 0,
            });
            if no_records.contains(&(a.as_str(), b.as_str())) {
                ms.push(Vec::new());
                continue;
            }
            let slow = a == SLOW || b == SLOW;
            ms.push(vec![Measurement {
                role: Role::Total,
                src: Some(a.clone()),
                dst: Some(b.clone()),
                record: lat(if slow {
                    90
                } else {
                    5 + (a.len() + b.len()) as u64 % 3
                }),
            }]);
        }
    }
    s.sync_cells(run, &cells, false).unwrap();
    let at = Attempt {
        attempts: 1,
        started_at: "2026-01-02T03:04:05Z".into(),
        ended_at: "2026-01-02T03:04:06Z".into(),
        wall_s: 1.0,
    };
    let done: Vec<(&str, &Attempt, &[Measurement])> = cells
        .iter()
        .zip(&ms)
        .map(|(c, m)| (c.cell_id.as_str(), &at, m.as_slice()))
        .collect();
    s.finish_cells_done(run, &done).unwrap();
    s.end_run(run).unwrap();
    (dir, db)
}

#[test]
fn a_large_mesh_is_listed_and_drawn_not_tabulated() {
    let (_d, db) = store();
    let s = Store::open_read_only(&db).unwrap();
    let a = summary::analyze(&s, 1, "lat", &Rule::default()).unwrap();
    let g = &a.groups[0];
    assert_eq!(g.nodes.len(), NODES);
    assert_eq!(
        g.values.values().map(|r| r.len()).sum::<usize>(),
        NODES * (NODES - 1)
    );
    // No re-tests ran: the slow node is named, unconfirmed.
    let named: Vec<&str> = g.node_findings.iter().map(|f| f.node.as_str()).collect();
    assert_eq!(named, vec![SLOW]);
    assert_eq!(g.worst_nodes(1)[0].0, SLOW);
    let text = summary::render(&a);
    assert!(!text.contains("from \\ to"), "no matrix: {text}");
    assert!(
        text.contains("70 nodes, 4830 pairs measured: the matrix is not printed above 64 nodes"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "worst nodes (the median of the pairs each sends or receives in): {SLOW} "
        )),
        "{text}"
    );
    // 138 unconfirmed suspect pairs: 20 lines and a count.
    assert_eq!(text.matches("\n  unconfirmed n").count(), 20, "{text}");
    assert!(
        text.contains("... and 118 more unconfirmed suspects"),
        "{text}"
    );
    assert!(
        text.lines().all(|l| l.len() < 2000),
        "no line holds a matrix row"
    );

    let rep = build(&s, &Options::default()).unwrap();
    // The report reads the run once, its matrix fed by the same pass as its
    // tables: the analysis is the mesh summary's own.
    assert_eq!(rep.meshes.len(), 1);
    assert_eq!(
        serde_json::to_value(&rep.meshes[0]).unwrap(),
        serde_json::to_value(&a).unwrap()
    );
    assert_eq!(summary::render(&rep.meshes[0]), text);
    let html = fabperf_report::html::render(&rep);
    assert!(
        html.contains("<img src=\"data:image/png;base64,iVBORw0KGgo"),
        "a PNG heat map"
    );
    assert!(
        !html.contains("<rect class=\"cell\""),
        "no SVG cell per pair"
    );
    assert!(html.contains("worst nodes"), "the worst nodes are listed");
    let first_row = html.split("worst nodes").nth(1).unwrap();
    assert!(
        first_row.find(SLOW).is_some_and(|i| i < 400),
        "{SLOW} is listed first"
    );
    assert!(html.len() < 2_000_000, "{} bytes", html.len());
}

/// The report feeds the mesh analysis each cell with its records at once,
/// keeping nothing per finished cell: a cell that finished without a record
/// is still a failure of its pair, the same as `mesh-summary` finds.
#[test]
fn a_finished_cell_without_records_fails_its_pair_in_the_report_too() {
    let gone = [("n002", "n005"), ("n040", "n001"), (SLOW, "n003")];
    let (_d, db) = store_with(&gone);
    let s = Store::open_read_only(&db).unwrap();
    let a = summary::analyze(&s, 1, "lat", &Rule::default()).unwrap();
    let rep = build(&s, &Options::default()).unwrap();
    assert_eq!(
        serde_json::to_value(&rep.meshes[0]).unwrap(),
        serde_json::to_value(&a).unwrap()
    );
    let failed = serde_json::to_string(&a.groups[0]).unwrap();
    assert_eq!(
        failed.matches("the cell finished without a figure").count(),
        gone.len(),
        "{failed}"
    );
    assert_eq!(
        a.groups[0].values.values().map(|r| r.len()).sum::<usize>(),
        NODES * (NODES - 1) - gone.len()
    );
}

/// The store is read on one thread and analysed on another: every cell comes
/// once, in plan order, with its records; an error of the analysis stops the
/// reading and is the one returned, however many cells were read ahead.
#[test]
fn cells_come_in_plan_order_and_an_analysis_error_stops_the_reading() {
    use fabperf_report::data::{each_cell, each_cell_feeding, load_head, ReportError};
    let (_dir, db) = store();
    let s = Store::open_read_only(&db).unwrap();
    let mut data = load_head(&s, None).unwrap();
    let mut seqs = Vec::new();
    let mut with_hist = 0usize;
    each_cell_feeding(&s, &mut data, &mut [], &mut |_, c, samples| {
        seqs.push(c.spec.seq);
        with_hist += samples.iter().filter(|m| m.rec.lat_hist.is_some()).count();
        Ok(())
    })
    .unwrap();
    assert_eq!(seqs, (0..(NODES * (NODES - 1)) as i64).collect::<Vec<_>>());
    assert_eq!(
        with_hist,
        NODES * (NODES - 1),
        "each cell's record, with its histogram"
    );
    for stop_at in [0usize, 1000, NODES * (NODES - 1) - 1] {
        let mut data = load_head(&s, None).unwrap();
        let mut seen = 0usize;
        let e = each_cell(&s, &mut data, &mut |_, _, _| {
            if seen == stop_at {
                return Err(ReportError::Usage(format!("stop at {stop_at}")));
            }
            seen += 1;
            Ok(())
        })
        .unwrap_err();
        assert_eq!(e.to_string(), format!("stop at {stop_at}"));
        assert_eq!(seen, stop_at, "no cell after the error is analysed");
    }
}
