//! Cells of concurrent flows judged one direction at a time, on the
//! fixture's bidir incast and bidir bisection (stored through the runner's
//! own `cell_measurements`): one aggregate per direction against the port
//! that carries it one way, Jain's index over that direction's flows, each
//! flow once, a failed cell named and never averaged, and the start skew
//! and overlap the records carry. Read through the report's JSON, text,
//! gates and OpenMetrics.

mod common;

use fabperf_report::openmetrics::{self, Flavor};
use fabperf_report::{build, gate, html, text, Options, Report};
use fabperf_store::Store;
use serde_json::Value;

fn fixture() -> (tempfile::TempDir, Report, Value) {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("fixture.db");
    common::build(&db);
    let r = build(&Store::open_read_only(&db).unwrap(), &Options::default()).unwrap();
    let j = serde_json::to_value(&r).unwrap();
    (d, r, j)
}

fn close(a: f64, b: f64, eps: f64) -> bool {
    (a - b).abs() <= eps
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn rows<'a>(j: &'a Value, test: &str) -> Vec<&'a Value> {
    j["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["test"] == test)
        .collect()
}

fn entries<'a>(j: &'a Value, list: &str, cell: &str) -> Vec<&'a Value> {
    j[list]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["cell"] == cell)
        .collect()
}

/// Jain's index by hand.
fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    s * s / (x.len() as f64 * x.iter().map(|v| v * v).sum::<f64>())
}

#[test]
fn a_bidir_incast_is_two_directions_each_against_the_receivers_port() {
    let (_d, _r, j) = fixture();
    // One row per direction, each the mean of its own aggregate, against
    // the receiver's 10 Gbit/s port one way (not twice it).
    let ic = rows(&j, "incast-bidir");
    assert_eq!(ic.len(), 2, "{ic:#?}");
    let dir = |d: &str| *ic.iter().find(|r| r["direction"] == d).unwrap();
    let (fw, rv) = (dir("forward"), dir("reverse"));
    assert!(close(f(&fw["stats"]["mean"]), 8.0, 1e-6), "{fw}");
    assert!(close(f(&rv["stats"]["mean"]), 8.5, 1e-6), "{rv}");
    assert!(close(f(&fw["port_rate_gbps"]), 10.0, 1e-12), "{fw}");
    assert!(close(f(&fw["pct_port"]), 80.0, 1e-4), "{fw}");
    assert!(close(f(&rv["pct_port"]), 85.0, 1e-4), "{rv}");
    assert_eq!(fw["of_bidir"], true);
    // The failed repeat is named, not averaged: one repeat each.
    assert_eq!(fw["stats"]["n"], 1);
    for r in [fw, rv] {
        let w = r["warnings"].to_string();
        assert!(
            w.contains("repeat 2 (incast-bidir-n1-r1) has no")
                && w.contains("not averaged")
                && w.contains("overlap for 67 %"),
            "{w}"
        );
        assert_eq!(r["failed"][0]["cell"], "incast-bidir-n1-r1", "{r}");
    }
    // The start skew and overlap the aggregates carry: senders 0-4 ms
    // apart into n1, 0-6 ms out of it, each flow measuring 3 s (to the
    // precision of Unix seconds in an f64, ~0.2 µs).
    let c = &fw["concurrency"];
    assert!(close(f(&c["start_skew_s_max"]), 0.004, 1e-6), "{c}");
    assert!(
        close(f(&c["overlap_pct_min"]), 2.996 / 3.0 * 100.0, 1e-4),
        "{c}"
    );
    let c = &rv["concurrency"];
    assert!(close(f(&c["start_skew_s_max"]), 0.006, 1e-6), "{c}");
    assert!(
        close(f(&c["overlap_pct_min"]), 2.994 / 3.0 * 100.0, 1e-4),
        "{c}"
    );
    assert!(
        fw["warnings"]
            .to_string()
            .contains("start skew 4.0 ms, common interval 99.9 %"),
        "{fw}"
    );

    // The incast table: one entry per direction, each flow once, Jain's
    // index over that direction's flows only.
    let e = entries(&j, "incasts", "incast-bidir-n1-r0");
    assert_eq!(e.len(), 2, "{e:#?}");
    let want = [
        ("forward", [3.0, 3.0, 2.0], ["n2", "n3", "n4"], 8.0),
        ("reverse", [4.0, 3.5, 1.0], ["n2", "n3", "n4"], 8.5),
    ];
    for (x, (d, gbps, peers, agg)) in e.iter().zip(want) {
        assert_eq!(x["direction"], d);
        let fl = x["flows"].as_array().unwrap();
        assert_eq!(fl.len(), 3, "each flow once: {x}");
        let mut sum = 0.0;
        for ((flow, g), peer) in fl.iter().zip(gbps).zip(peers) {
            assert!(close(f(&flow["gbps"]), g, 1e-6), "{flow}");
            assert!(close(f(&flow["share"]), g / agg, 1e-6), "{flow}");
            // Where the data went: into n1, or out of it.
            let (src, dst) = if d == "forward" {
                (peer, "n1")
            } else {
                ("n1", peer)
            };
            assert_eq!(
                (flow["src"].as_str(), flow["dst"].as_str()),
                (Some(src), Some(dst))
            );
            sum += f(&flow["gbps"]);
        }
        // Over the common interval the shares add up to the aggregate.
        assert!(close(sum, f(&x["aggregate_gbps"]), 1e-6), "{x}");
        assert!(close(f(&x["jain"]), jain(&gbps), 1e-6), "{x}");
        assert!(close(f(&x["pct_port"]), agg * 10.0, 1e-4), "{x}");
    }
    // The failed repeat: one entry, its reason, no figure.
    let e = entries(&j, "incasts", "incast-bidir-n1-r1");
    assert_eq!(e.len(), 1, "{e:#?}");
    assert!(e[0]["aggregate_gbps"].is_null() && e[0]["jain"].is_null());
    assert!(
        e[0]["failed"]
            .as_str()
            .unwrap()
            .contains("overlap for 67 % of the longest, below 90 %"),
        "{}",
        e[0]
    );
}

#[test]
fn a_bidir_bisection_is_two_directions_and_a_failed_cut_is_not_in_the_minimum() {
    let (_d, _r, j) = fixture();
    let bi = rows(&j, "bisection-bidir");
    assert_eq!(bi.len(), 2, "{bi:#?}");
    for (r, mean, pct) in [(bi[0], 7.0, 35.0), (bi[1], 8.0, 40.0)] {
        assert!(close(f(&r["stats"]["mean"]), mean, 1e-6), "{r}");
        // The cut's flows' port rates one way: 2 × 10 Gbit/s.
        assert!(close(f(&r["pct_port"]), pct, 1e-4), "{r}");
        // The other cut failed: named, and not part of the minimum.
        assert_eq!(r["unmeasured"][0], "n1→n4, n2→n3", "{r}");
        assert!(
            r["warnings"]
                .to_string()
                .contains("a cut not measured may be slower"),
            "{r}"
        );
    }
    assert_eq!(
        (bi[0]["direction"].as_str(), bi[1]["direction"].as_str()),
        (Some("forward"), Some("reverse"))
    );
    let e = entries(&j, "bisections", "bisect-bidir-0");
    assert_eq!(e.len(), 2);
    assert!(close(f(&e[0]["jain"]), jain(&[4.0, 3.0]), 1e-6), "{}", e[0]);
    assert!(close(f(&e[1]["jain"]), jain(&[4.5, 3.5]), 1e-6), "{}", e[1]);
    // A reverse flow's data goes from the agent end back to the client.
    assert_eq!(e[1]["flows"][0]["src"], "n3");
    assert_eq!(e[1]["flows"][0]["dst"], "n1");
}

#[test]
fn gates_and_verdicts_go_by_direction() {
    let (_d, r, _j) = fixture();
    let run = |g: &str| gate::evaluate(&gate::parse(g).unwrap(), &r, None);
    // 82 % of the receiver's port: the reverse holds (8.5), the forward
    // not (8.0); the failed repeat is named, not checked.
    let o = run("test:incast-bidir incast bw >= 82% port_rate");
    assert_eq!(o.checked, 2, "{o:?}");
    assert_eq!(o.violations.len(), 1, "{o:?}");
    assert!(
        o.violations[0].subject.contains("forward of bidir"),
        "{o:?}"
    );
    assert!(
        o.violations[0]
            .required
            .contains(">= 8.20 Gbit/s (82 % of the receiver's 10.0 Gbit/s port)"),
        "{o:?}"
    );
    assert!(
        o.notes
            .iter()
            .any(|n| n.contains("repeat 2") && n.contains("not checked")),
        "{o:?}"
    );
    // Jain's index per direction: n4 gets an eighth of what n1 sends back.
    let o = run("test:incast-bidir direction:reverse incast jain >= 0.9");
    assert_eq!((o.checked, o.violations.len()), (1, 1), "{o:?}");
    assert_eq!(o.violations[0].measured, "0.823", "{o:?}");
    assert!(run("test:incast-bidir direction:forward incast jain >= 0.95").passed());
    assert!(run("direction:bidir incast min-share >= 0.35").passed());
    assert!(!run("direction:bidir incast min-share >= 0.36").passed());
    // The bisection bandwidth per direction: 7 one way, 8 the other.
    let o = run("test:bisection-bidir bisection bw >= 7.5Gbps");
    assert_eq!((o.checked, o.violations.len()), (2, 1), "{o:?}");
    assert!(
        o.violations[0].subject.contains("forward of bidir"),
        "{o:?}"
    );
    assert!(o.notes.iter().any(|n| n.contains("n1→n4, n2→n3")), "{o:?}");
    // Node verdict: n4's share of what n1 sent back, in words.
    let v = r.verdicts.iter().find(|v| v.subject == "n4").unwrap();
    assert!(
        v.text.contains(
            "got 12 % of the bandwidth out of n1 as one of its 3 incast peers (reverse of bidir"
        ),
        "{}",
        v.text
    );
    let host = r.verdicts.iter().find(|v| v.subject == "host").unwrap();
    assert!(
        host.text
            .contains("bisection (forward of bidir): 7.00 Gbit/s"),
        "{}",
        host.text
    );
}

#[test]
fn tables_and_html_show_each_direction_its_skew_and_overlap() {
    let (_d, r, _j) = fixture();
    let t = text::render(&r, false);
    // The incast table: from its heading to the next one.
    let incast: Vec<&str> = t
        .lines()
        .skip_while(|l| !l.contains("Incast (N−1 senders"))
        .take_while(|l| !l.contains("Bisection ("))
        .collect();
    let line = |needle: &str| {
        incast
            .iter()
            .find(|l| l.starts_with("incast-bidir") && l.contains(needle))
            .unwrap_or_else(|| panic!("no incast line with {needle:?}:\n{t}"))
            .to_string()
    };
    let fw = line("forward of bidir");
    assert!(
        fw.contains("8.00") && fw.contains(" 4.0 ") && fw.contains("99.9"),
        "{fw}"
    );
    let rv = line("reverse of bidir");
    assert!(rv.contains("n4 12% (1.00)") && rv.contains("0.823"), "{rv}");
    let failed = line("FAILED");
    assert!(failed.contains("overlap for 67 %"), "{failed}");
    // The bandwidth table's sweep column names the direction.
    assert!(
        t.contains("bidir: forward") || t.contains("forward of bidir"),
        "{t}"
    );
    let md = text::render(&r, true);
    assert!(md.contains("| reverse of bidir |"), "{md}");
    let csv = text::csv(&r).unwrap();
    assert!(
        csv.lines()
            .any(|l| l.contains(",incast-bidir,tcp-bw,host,incast,") && l.contains(",reverse,")),
        "{csv}"
    );
    let page = html::render(&r);
    assert!(page.contains("reverse of bidir") && page.contains("overlap%"));
}

#[test]
fn openmetrics_per_direction_with_overlap_skew_and_fairness() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("fixture.db");
    common::build(&db);
    let runs = openmetrics::load_runs(&Store::open_read_only(&db).unwrap(), None).unwrap();
    let (om, _) = openmetrics::exposition(&runs, Flavor::OpenMetrics);
    let series = |family: &str, test: &str, dir: &str, role: &str| -> Vec<f64> {
        om.lines()
            .filter(|l| {
                l.starts_with(&format!("{family}{{"))
                    && l.contains(&format!("test=\"{test}\""))
                    && l.contains(&format!("direction=\"{dir}\""))
                    && l.contains(&format!("role=\"{role}\""))
            })
            .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
            .collect()
    };
    let bw = "fabperf_bandwidth_bytes_per_second";
    // One aggregate per direction, in bytes per second.
    let a = series(bw, "incast-bidir", "forward", "aggregate");
    assert_eq!(a.len(), 1, "{om}");
    assert!(close(a[0], 8.0e9 / 8.0, 1e3), "{a:?}");
    let a = series(bw, "incast-bidir", "reverse", "aggregate");
    assert!(a.len() == 1 && close(a[0], 8.5e9 / 8.0, 1e3), "{a:?}");
    // Each flow once per direction, never as a bidir total.
    assert_eq!(series(bw, "incast-bidir", "forward", "flow").len(), 3);
    assert_eq!(series(bw, "incast-bidir", "reverse", "flow").len(), 3);
    assert!(
        series(bw, "incast-bidir", "bidir", "flow").is_empty(),
        "{om}"
    );
    let j = series(
        "fabperf_flows_jain_index",
        "incast-bidir",
        "reverse",
        "aggregate",
    );
    assert!(
        j.len() == 1 && close(j[0], jain(&[4.0, 3.5, 1.0]), 1e-6),
        "{j:?}"
    );
    let o = series(
        "fabperf_flows_overlap_ratio",
        "incast-bidir",
        "forward",
        "aggregate",
    );
    assert!(o.len() == 1 && close(o[0], 2.996 / 3.0, 1e-6), "{o:?}");
    let k = series(
        "fabperf_flows_start_skew_seconds",
        "bisection-bidir",
        "reverse",
        "aggregate",
    );
    assert!(k.len() == 1 && close(k[0], 0.003, 1e-6), "{k:?}");
}

// ---- Odd and hostile stores -------------------------------------------

/// A store with one bidir incast into n1 (into it 3 + 3 + 2 Gbit/s, out of
/// it 4 + 3.5 + 1) and one one-way incast into n2, stored as `fabperf run`
/// stores them, then changed with `sql` (each statement run in turn).
fn odd_store<S: AsRef<str>>(sql: &[S]) -> (tempfile::TempDir, Report) {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("odd.db");
    let agents: Vec<_> = ["n1", "n2", "n3", "n4"]
        .iter()
        .map(|n| common::agent(n, "host", Some(10.0), 9000))
        .collect();
    let mut b = common::open(&db, "name = \"custom\"\n", &agents);
    let t = common::T0;
    let bidir = |f: f64, r: f64| {
        common::drive_result(
            "tcp-bw",
            131072,
            &[("forward", f, t), ("reverse", r, t)],
            3.0,
        )
    };
    b.concurrent(
        "ic-bidir",
        "incast-bidir",
        "tcp-bw",
        "host",
        "incast",
        &[("n2", "n1"), ("n3", "n1"), ("n4", "n1")],
        serde_json::json!({"direction": "bidir"}),
        0,
        vec![bidir(3.0, 4.0), bidir(3.0, 3.5), bidir(2.0, 1.0)],
    )
    .unwrap();
    let one = |g: f64| common::drive_result("tcp-bw", 131072, &[("forward", g, t + 10.0)], 3.0);
    b.concurrent(
        "ic-n2",
        "incast",
        "tcp-bw",
        "host",
        "incast",
        &[("n1", "n2"), ("n3", "n2")],
        serde_json::json!({}),
        0,
        vec![one(4.0), one(4.0)],
    )
    .unwrap();
    b.finish(&db);
    let c = rusqlite::Connection::open(&db).unwrap();
    for q in sql {
        let q = q.as_ref();
        c.execute(q, []).unwrap_or_else(|e| panic!("{q}: {e}"));
    }
    drop(c);
    let r = build(&Store::open_read_only(&db).unwrap(), &Options::default()).unwrap();
    (d, r)
}

/// SQL that stores a second copy of the measurements `filter` selects,
/// changed by `set` (an UPDATE's assignments, or nothing).
fn copy(filter: &str, set: &str) -> Vec<String> {
    let mut q = vec![
        format!("CREATE TEMP TABLE dup AS SELECT * FROM measurements WHERE {filter}"),
        "UPDATE dup SET id = (SELECT max(id) FROM measurements) + rowid".to_string(),
    ];
    if !set.is_empty() {
        q.push(format!("UPDATE dup SET {set}"));
    }
    q.push("INSERT INTO measurements SELECT * FROM dup".into());
    q.push("DROP TABLE dup".into());
    q
}

fn leg<'a>(r: &'a Report, cell: &str, dir: &str) -> &'a fabperf_report::flows::Leg {
    &r.incasts
        .iter()
        .find(|i| i.cell == cell && i.leg.direction == dir)
        .unwrap_or_else(|| panic!("no {dir} entry of {cell}: {:#?}", r.incasts))
        .leg
}

fn row_of<'a>(r: &'a Report, test: &str, dir: &str) -> &'a fabperf_report::analysis::Row {
    r.rows
        .iter()
        .find(|x| x.test == test && x.direction.as_deref() == Some(dir))
        .unwrap_or_else(|| panic!("no {dir} row of {test}"))
}

#[test]
fn the_unchanged_odd_store_has_both_directions() {
    // The control for the tests below: every figure is there.
    let (_d, r) = odd_store::<&str>(&[]);
    for (d, agg) in [("forward", 8.0), ("reverse", 8.5)] {
        let l = leg(&r, "ic-bidir", d);
        assert!(l.failed.is_none() && l.note.is_none(), "{l:?}");
        assert!(close(l.aggregate_gbps.unwrap(), agg, 1e-6), "{l:?}");
        assert_eq!(l.flows.len(), 3);
        assert!(l.jain.is_some());
    }
    let l = leg(&r, "ic-n2", "forward");
    assert!(close(l.jain.unwrap(), 1.0, 1e-9), "{l:?}");
}

#[test]
fn a_flow_record_without_a_direction_in_a_bidir_cell_is_not_guessed() {
    // n4's reverse record loses its direction: it could be either, so
    // neither direction's shares or fairness are given; the aggregates,
    // which name theirs, still are.
    let (_d, r) = odd_store(&[
        "UPDATE measurements SET record = json_remove(record, '$.direction'), direction = NULL \
         WHERE cell_id = 'ic-bidir' AND role = 'flow' AND src = 'n4' AND json_extract(record, '$.direction') = 'reverse'",
    ]);
    for (d, agg) in [("forward", 8.0), ("reverse", 8.5)] {
        let l = leg(&r, "ic-bidir", d);
        assert!(close(l.aggregate_gbps.unwrap(), agg, 1e-6), "{l:?}");
        assert!(l.jain.is_none() && l.flows.is_empty(), "{l:?}");
        assert!(
            l.note
                .as_deref()
                .unwrap_or_default()
                .contains("1 flow record(s) of this bidir cell name no direction"),
            "{l:?}"
        );
    }
    // A gate on the fairness has no figure to pass with.
    let o = gate::evaluate(
        &gate::parse("test:incast-bidir incast jain >= 0.5").unwrap(),
        &r,
        None,
    );
    assert!(!o.passed(), "{o:?}");
    assert!(
        format!("{o:?}").contains("name no direction"),
        "the reason is given: {o:?}"
    );
    // In a one-way cell a record without a direction is the forward one
    // (older writers named none).
    let (_d, r) = odd_store(&[
        "UPDATE measurements SET record = json_remove(record, '$.direction'), direction = NULL WHERE cell_id = 'ic-n2'",
    ]);
    let l = leg(&r, "ic-n2", "forward");
    assert!(
        close(l.aggregate_gbps.unwrap(), 8.0, 1e-6) && l.jain.is_some(),
        "{l:?}"
    );
}

#[test]
fn an_aggregate_without_a_direction_in_a_bidir_cell_is_no_figure() {
    let (_d, r) = odd_store(&[
        "UPDATE measurements SET record = json_remove(record, '$.direction'), direction = NULL \
         WHERE cell_id = 'ic-bidir' AND role = 'aggregate' AND json_extract(record, '$.direction') = 'reverse'",
    ]);
    let l = leg(&r, "ic-bidir", "reverse");
    assert!(l.aggregate_gbps.is_none(), "{l:?}");
    assert!(
        l.failed
            .as_deref()
            .unwrap_or_default()
            .contains("name no direction"),
        "{l:?}"
    );
    // The forward direction is untouched; the reverse row has no figure
    // and names why.
    assert!(close(
        leg(&r, "ic-bidir", "forward").aggregate_gbps.unwrap(),
        8.0,
        1e-6
    ));
    let rv = row_of(&r, "incast-bidir", "reverse");
    assert!(rv.mean().is_none(), "{rv:?}");
    assert_eq!(rv.failed.len(), 1, "{rv:?}");
}

#[test]
fn an_aggregate_without_its_flows_keeps_its_figure_but_no_fairness() {
    let (_d, r) =
        odd_store(&["DELETE FROM measurements WHERE cell_id = 'ic-n2' AND role = 'flow'"]);
    let l = leg(&r, "ic-n2", "forward");
    assert!(close(l.aggregate_gbps.unwrap(), 8.0, 1e-6), "{l:?}");
    assert!(l.jain.is_none() && l.flows.is_empty(), "{l:?}");
    assert!(
        l.note
            .as_deref()
            .unwrap_or_default()
            .contains("0 of the cell's 2 flows have a forward figure"),
        "{l:?}"
    );
    let o = gate::evaluate(
        &gate::parse("test:incast incast min-share >= 0.1").unwrap(),
        &r,
        None,
    );
    assert!(!o.passed(), "{o:?}");
    assert!(gate::evaluate(
        &gate::parse("test:incast incast bw >= 7Gbps").unwrap(),
        &r,
        None
    )
    .passed());
    // The table says so rather than showing an empty share list.
    let t = text::render(&r, false);
    assert!(
        t.contains("0 of the cell's 2 flows have a forward figure"),
        "{t}"
    );
}

#[test]
fn flows_the_cell_does_not_have_or_counted_twice_give_no_shares() {
    // A second copy of n3's forward record: one flow twice.
    let (_d, r) = odd_store(&copy(
        "cell_id = 'ic-n2' AND role = 'flow' AND src = 'n3'",
        "",
    ));
    let l = leg(&r, "ic-n2", "forward");
    assert!(l.jain.is_none(), "{l:?}");
    assert!(
        l.note
            .as_deref()
            .unwrap_or_default()
            .contains("n3 -> n2 have more than one forward record"),
        "{l:?}"
    );
    // n3's record said to come from n4, a node the cell has no flow from.
    let (_d, r) = odd_store(&[
        "UPDATE measurements SET src = 'n4' WHERE cell_id = 'ic-n2' AND role = 'flow' AND src = 'n3'",
    ]);
    let l = leg(&r, "ic-n2", "forward");
    assert!(l.jain.is_none(), "{l:?}");
    assert!(
        l.note.as_deref().unwrap_or_default().contains("(n4 -> n2)"),
        "{l:?}"
    );
}

#[test]
fn non_finite_and_out_of_range_figures_are_no_figure() {
    // A record that is not JSON (NaN is not a JSON number) is skipped by
    // the store: the reverse direction then has no aggregate.
    let (_d, r) = odd_store(&[
        "UPDATE measurements SET record = replace(record, '\"bw_gbps\":', '\"bw_gbps\":NaN,\"x\":') \
         WHERE cell_id = 'ic-bidir' AND role = 'aggregate' AND json_extract(record, '$.direction') = 'reverse'",
    ]);
    let l = leg(&r, "ic-bidir", "reverse");
    assert!(l.aggregate_gbps.is_none(), "{l:?}");
    assert!(
        l.failed
            .as_deref()
            .unwrap_or_default()
            .contains("no reverse aggregate stored"),
        "{l:?}"
    );
    assert!(close(
        leg(&r, "ic-bidir", "forward").aggregate_gbps.unwrap(),
        8.0,
        1e-6
    ));
    // An overlap that is no percentage, a negative skew, a negative
    // figure: the aggregate is not used, the skew not shown.
    let (_d, r) = odd_store(&[
        "UPDATE measurements SET record = json_set(record, '$.flows.overlap_pct', 1e300) \
         WHERE cell_id = 'ic-bidir' AND role = 'aggregate' AND json_extract(record, '$.direction') = 'forward'",
        "UPDATE measurements SET record = json_set(record, '$.flows.start_skew_s', -0.5) \
         WHERE cell_id = 'ic-bidir' AND role = 'aggregate' AND json_extract(record, '$.direction') = 'reverse'",
        "UPDATE measurements SET record = json_set(record, '$.bw_gbps', -8.0) WHERE cell_id = 'ic-n2' AND role = 'aggregate'",
    ]);
    let l = leg(&r, "ic-bidir", "forward");
    assert!(l.aggregate_gbps.is_none(), "{l:?}");
    assert!(
        l.failed
            .as_deref()
            .unwrap_or_default()
            .contains("does not say how its flows overlapped"),
        "{l:?}"
    );
    let l = leg(&r, "ic-bidir", "reverse");
    assert!(
        l.aggregate_gbps.is_some() && l.start_skew_s.is_none(),
        "{l:?}"
    );
    assert!(
        row_of(&r, "incast-bidir", "reverse")
            .warnings
            .iter()
            .any(|w| w.contains("start skew not recorded")),
        "{:?}",
        row_of(&r, "incast-bidir", "reverse").warnings
    );
    let l = leg(&r, "ic-n2", "forward");
    assert!(
        l.failed
            .as_deref()
            .unwrap_or_default()
            .contains("has no bandwidth figure"),
        "{l:?}"
    );
    // Progress counts that go nowhere (a zero tick): the flows fall back
    // to their own interval's rate, never a NaN share.
    let (_d, r) = odd_store(&[
        "UPDATE measurements SET record = json_set(record, '$.interval.progress.tick_s', 0) WHERE cell_id = 'ic-n2' AND role = 'flow'",
    ]);
    let l = leg(&r, "ic-n2", "forward");
    for f in &l.flows {
        assert!(f.gbps.is_finite() && f.share.is_finite(), "{l:?}");
    }
    assert!(l.jain.is_none_or(|j| j.is_finite()), "{l:?}");
    // Every output renders without a NaN or an inf.
    for out in [
        text::render(&r, false),
        text::render(&r, true),
        text::csv(&r).unwrap(),
        html::render(&r),
        serde_json::to_string(&r).unwrap(),
    ] {
        assert!(!out.contains("NaN") && !out.contains("inf"), "{out}");
    }
}

#[test]
fn an_older_writers_total_of_both_directions_is_not_counted_twice() {
    // The store as an older fabperf wrote a bidir incast: each flow's
    // bidir total next to its two directions, one aggregate over all
    // three (2x the traffic) and no common interval.
    let (_d, r) = odd_store(&[
        "DELETE FROM measurements WHERE cell_id = 'ic-bidir' AND role = 'aggregate' AND json_extract(record, '$.direction') = 'reverse'",
        "UPDATE measurements SET record = json_remove(json_set(record, '$.direction', 'bidir', '$.bw_gbps', 33.0), '$.flows'), direction = 'bidir' \
         WHERE cell_id = 'ic-bidir' AND role = 'aggregate'",
    ]
    .into_iter()
    .map(String::from)
    .chain(copy(
        "cell_id = 'ic-bidir' AND role = 'flow' AND json_extract(record, '$.direction') = 'forward'",
        "direction = 'bidir', record = json_set(record, '$.direction', 'bidir', '$.bw_gbps', 7.0)",
    ))
    .collect::<Vec<_>>());
    for d in ["forward", "reverse"] {
        let l = leg(&r, "ic-bidir", d);
        assert!(l.aggregate_gbps.is_none(), "{l:?}");
        assert!(
            l.failed
                .as_deref()
                .unwrap_or_default()
                .contains("of both directions at once"),
            "{l:?}"
        );
        let row = row_of(&r, "incast-bidir", d);
        assert!(row.mean().is_none(), "{row:?}");
    }
    assert!(!r.incasts.iter().any(|i| i.leg.aggregate_gbps == Some(33.0)));
    let o = gate::evaluate(
        &gate::parse("test:incast-bidir incast bw >= 1Gbps").unwrap(),
        &r,
        None,
    );
    assert!(!o.passed() && o.checked == 0, "{o:?}");
}

#[test]
fn a_direction_above_the_port_one_way_is_a_finding_in_that_direction_only() {
    // 12 Gbit/s back out of n1 through its 10 Gbit/s port: a finding (the
    // port one way, not twice it for a bidir test), never a percentage;
    // the forward direction keeps its share.
    let (_d, r) = odd_store(&[
        "UPDATE measurements SET record = json_set(record, '$.bw_gbps', 12.0) \
         WHERE cell_id = 'ic-bidir' AND role = 'aggregate' AND json_extract(record, '$.direction') = 'reverse'",
    ]);
    let rv = leg(&r, "ic-bidir", "reverse");
    assert!(rv.pct_port.is_none(), "{rv:?}");
    assert!(
        rv.port_finding
            .as_deref()
            .unwrap_or_default()
            .contains("above the 10.0 Gbit/s port rate"),
        "{rv:?}"
    );
    let fw = leg(&r, "ic-bidir", "forward");
    assert!(
        fw.port_finding.is_none() && close(fw.pct_port.unwrap(), 80.0, 1e-4),
        "{fw:?}"
    );
    let host = r.verdicts.iter().find(|v| v.subject == "host").unwrap();
    assert!(
        host.text
            .contains("incast into n1 (repeat 1, reverse of bidir): 12.0 Gbit/s measured is above"),
        "{}",
        host.text
    );
    let o = gate::evaluate(
        &gate::parse("test:incast-bidir direction:reverse incast bw >= 50% port_rate").unwrap(),
        &r,
        None,
    );
    assert!(!o.passed(), "{o:?}");
    assert!(gate::evaluate(
        &gate::parse("test:incast-bidir direction:forward incast bw >= 50% port_rate").unwrap(),
        &r,
        None
    )
    .passed());
}

#[test]
fn an_outcast_from_an_older_store_is_labelled_and_its_shares_go_out_of_the_receiver() {
    // The plan check now refuses an incast whose data leaves the
    // receiver; a store written before may hold one: a reverse incast out
    // of n1 (n4 gets 1 of 8 Gbit/s) and an RDMA read incast pulling from n2.
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("outcast.db");
    let agents: Vec<_> = ["n1", "n2", "n3", "n4"]
        .iter()
        .map(|n| common::agent(n, "host", Some(10.0), 9000))
        .collect();
    let mut b = common::open(&db, "name = \"custom\"\n", &agents);
    let t = common::T0;
    let rev = |g: f64| common::drive_result("tcp-bw", 131072, &[("reverse", g, t)], 3.0);
    b.concurrent(
        "out-n1",
        "outcast-rev",
        "tcp-bw",
        "host",
        "incast",
        &[("n2", "n1"), ("n3", "n1"), ("n4", "n1")],
        serde_json::json!({"direction": "reverse"}),
        0,
        vec![rev(4.0), rev(3.0), rev(1.0)],
    )
    .unwrap();
    let read = |g: f64| common::drive_result("rdma-bw", 131072, &[("forward", g, t + 10.0)], 3.0);
    b.concurrent(
        "read-n2",
        "outcast-read",
        "rdma-bw",
        "host",
        "incast",
        &[("n1", "n2"), ("n3", "n2"), ("n4", "n2")],
        serde_json::json!({}),
        0,
        vec![read(4.0), read(4.0), read(0.5)],
    )
    .unwrap();
    b.finish(&db);
    let c = rusqlite::Connection::open(&db).unwrap();
    c.execute(
        "UPDATE measurements SET record = json_set(record, '$.op', 'read'), op = 'read' WHERE cell_id = 'read-n2'",
        [],
    )
    .unwrap();
    drop(c);
    let r = build(&Store::open_read_only(&db).unwrap(), &Options::default()).unwrap();
    let l = leg(&r, "out-n1", "reverse");
    assert!(
        l.outcast
            .as_deref()
            .unwrap_or_default()
            .contains("its direction is reverse"),
        "{l:?}"
    );
    assert_eq!(l.direction_words(), "reverse (outcast)");
    // Where the data went: out of n1.
    assert!(l.flows.iter().all(|f| f.src == "n1"), "{l:?}");
    let l = leg(&r, "read-n2", "forward");
    assert!(
        l.outcast
            .as_deref()
            .unwrap_or_default()
            .contains("RDMA read"),
        "{l:?}"
    );
    assert!(
        l.flows.iter().all(|f| f.src == "n2"),
        "an RDMA read's data leaves n2: {l:?}"
    );
    // The row, the table and the verdicts say so.
    let row = r.rows.iter().find(|x| x.test == "outcast-read").unwrap();
    assert!(
        row.warnings
            .iter()
            .any(|w| w.starts_with("outcast: an RDMA read")),
        "{:?}",
        row.warnings
    );
    let t = text::render(&r, false);
    assert!(
        t.contains("forward (outcast)") && t.contains("reverse (outcast)"),
        "{t}"
    );
    let host = r.verdicts.iter().find(|v| v.subject == "host").unwrap();
    assert!(
        host.text
            .contains("incast outcast-rev into n1: its direction is reverse"),
        "{}",
        host.text
    );
    assert_eq!(
        host.level,
        fabperf_report::analysis::Level::Warn,
        "{}",
        host.text
    );
    // n4 is named as the peer that got little of what left n1 and n2, not
    // as a sender into them.
    let n4 = r.verdicts.iter().find(|v| v.subject == "n4").unwrap();
    assert!(
        n4.text.contains("out of n1 as one of its 3 incast peers"),
        "{}",
        n4.text
    );
    assert!(
        n4.text.contains("out of n2 as one of its 3 incast peers"),
        "{}",
        n4.text
    );
    assert!(!n4.text.contains("into n"), "{}", n4.text);
    // A gate against the port says the receiver was sending.
    let o = gate::evaluate(
        &gate::parse("test:outcast-rev incast bw >= 90% port_rate").unwrap(),
        &r,
        None,
    );
    assert!(o.violations[0].required.contains("port, sending"), "{o:?}");
    // Records that name no direction in a one-way cell measured the
    // cell's planned one (here reverse), in the report and the export.
    let c = rusqlite::Connection::open(&db).unwrap();
    c.execute(
        "UPDATE measurements SET record = json_remove(record, '$.direction'), direction = NULL WHERE cell_id = 'out-n1'",
        [],
    )
    .unwrap();
    drop(c);
    let s = Store::open_read_only(&db).unwrap();
    let r = build(&s, &Options::default()).unwrap();
    assert_eq!(r.incasts.iter().filter(|i| i.cell == "out-n1").count(), 1);
    let l = leg(&r, "out-n1", "reverse");
    assert!(
        close(l.aggregate_gbps.unwrap(), 8.0, 1e-6) && l.jain.is_some(),
        "{l:?}"
    );
    let runs = openmetrics::load_runs(&s, None).unwrap();
    let (om, _) = openmetrics::exposition(&runs, Flavor::OpenMetrics);
    let jain_lines: Vec<&str> = om
        .lines()
        .filter(|l| {
            l.starts_with("fabperf_flows_jain_index{") && l.contains("test=\"outcast-rev\"")
        })
        .collect();
    assert!(
        jain_lines.len() == 1 && jain_lines[0].contains("direction=\"reverse\""),
        "{jain_lines:?}"
    );
}
