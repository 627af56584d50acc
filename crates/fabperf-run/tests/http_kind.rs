//! The `http-load` plan kind: sweeps of connections, sizes and request
//! rates, their errors, and a run in which one agent drives HTTP load
//! against another's HTTP server (and fails cleanly when it is off).

mod common;

use fabperf_agent::{Agent, AgentConfig, AgentHandle, HttpConfig};
use fabperf_proto::{Limits, TestKind};
use fabperf_run::plan::{parse, Kind};
use fabperf_store::Store;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

const AGENTS: &str =
    "name = \"h\"\n[[agents]]\nname = \"a\"\naddr = \"10.0.0.1\"\n[[agents]]\nname = \"b\"\naddr = \"10.0.0.2\"\n";

#[test]
fn http_load_sweeps_connections_sizes_and_rates() {
    let text = format!(
        "{AGENTS}[[tests]]\nkind = \"http-load\"\npattern = \"pairs\"\npairs = [[\"a\", \"b\"]]\n\
         connections = [10, 100, 3000]\nsizes = [\"0\", \"1K\", \"1M\"]\nrates = [\"max\", 20000, \"5K\"]\n\
         duration = \"5s\"\nparams = {{ threads = 4, warmup_s = 2.0 }}\n"
    );
    let p = parse(&text, "p.toml", Path::new("/")).unwrap_or_else(|e| panic!("{e}"));
    let t = &p.tests[0];
    assert_eq!(t.kind, Kind::HttpLoad);
    assert_eq!(t.points.len(), 27);
    let pt = &t.points[26];
    assert_eq!(pt.params["connections"], 3000);
    assert_eq!(pt.params["size"], 1 << 20);
    assert_eq!(pt.params["rate"], 5000.0);
    assert_eq!(pt.params["threads"], 4);
    assert_eq!(pt.params["duration_s"], 5.0);
    assert_eq!(pt.dims["connections"], 3000);
    assert!(t.points[0].params["rate"].is_null(), "max is closed loop");
    assert!((t.cell_secs - 7.0).abs() < 1e-9, "{}", t.cell_secs);
}

#[test]
fn http_load_mistakes_are_located() {
    let bad = |tests: &str| -> Vec<String> {
        match parse(&format!("{AGENTS}{tests}"), "p.toml", Path::new("/")) {
            Ok(_) => panic!("expected errors for {tests}"),
            Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
        }
    };
    let e = bad("[[tests]]\nkind = \"http-load\"\nconnections = [0, 70000]\n");
    assert!(
        e.iter()
            .any(|e| e.contains("connections 0 is out of range")),
        "{e:?}"
    );
    assert!(e.iter().any(|e| e.contains("connections 70000")), "{e:?}");
    let e = bad("[[tests]]\nkind = \"http-load\"\nrates = [\"10Gbit/s\", -5, true]\n");
    assert_eq!(e.len(), 3, "{e:?}");
    let e = bad("[[tests]]\nkind = \"tcp-bw\"\nconnections = [10]\n");
    assert!(
        e.iter()
            .any(|e| e.contains("`connections` applies to http-load")),
        "{e:?}"
    );
    let e = bad("[[tests]]\nkind = \"http-load\"\nstreams = [2]\n");
    assert!(e.iter().any(|e| e.contains("`streams` applies")), "{e:?}");
    let e = bad("[[tests]]\nkind = \"http-load\"\nparams = { conections = 5 }\n");
    assert!(e.iter().any(|e| e.contains("conections")), "{e:?}");
    let e = bad("[[tests]]\nkind = \"http-load\"\npattern = \"incast\"\n");
    assert!(e.iter().any(|e| e.contains("incast")), "{e:?}");
}

fn kinds() -> Vec<Box<dyn TestKind>> {
    let mut k = fabperf_sock::kinds();
    k.push(Box::new(fabperf_run::DriveKind::new(
        None,
        Duration::from_secs(5),
    )));
    k
}

/// Agents on 127.0.0.1 and 127.0.0.2 (one port); HTTP on the second only
/// when `http`.
fn agents(http: bool) -> (Vec<AgentHandle>, u16) {
    'retry: for _ in 0..20 {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = probe.local_addr().unwrap().port();
        drop(probe);
        let mut hs = Vec::new();
        for i in 1..=2 {
            let bind: SocketAddr = format!("127.0.0.{i}:{port}").parse().unwrap();
            let mut a = match Agent::bind(AgentConfig {
                bind,
                token: None,
                insecure: false,
                limits: Limits {
                    io_timeout: Duration::from_secs(5),
                    ..Limits::default()
                },
                kinds: kinds(),
                quiet: true,
                identity: None,
            }) {
                Ok(a) => a,
                Err(_) => continue 'retry,
            };
            if http && i == 2 {
                a.enable_http(HttpConfig::default()).unwrap();
            }
            hs.push(a.spawn());
        }
        return (hs, port);
    }
    panic!("no free port");
}

#[test]
fn a_run_drives_http_load_from_one_agent_to_another() {
    let (_agents, port) = agents(true);
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    let plan = common::plan(
        d.path(),
        "http",
        port,
        2,
        "[[tests]]\nkind = \"http-load\"\npattern = \"pairs\"\npairs = [[\"n1\", \"n2\"]]\n\
         connections = [1, 8]\nsizes = [\"1K\"]\nduration = \"0.5s\"\nparams = { warmup_s = 0.2 }\n",
    );
    let out = fabperf_run::run(&common::opts(&plan, &db)).unwrap();
    assert_eq!((out.done, out.failed), (2, 0), "{out:?}");
    let s = Store::open_read_only(&db).unwrap();
    let run = s.latest_run().unwrap().unwrap();
    let ms = s.measurements(run.id, None).unwrap();
    assert_eq!(ms.len(), 2);
    for (_, m) in &ms {
        let r = &m.record;
        assert_eq!(r.test, "http-load");
        assert!(r.requests_per_s.unwrap() > 0.0);
        assert_eq!(r.errors.as_ref().unwrap().total(), 0, "{r:?}");
        assert_eq!(r.size, 1024);
    }
    // The target without --http: the cell fails with what to do.
    let (_agents, port) = agents(false);
    let plan = common::plan(
        d.path(),
        "nohttp",
        port,
        2,
        "[[tests]]\nkind = \"http-load\"\npattern = \"pairs\"\npairs = [[\"n1\", \"n2\"]]\nduration = \"0.5s\"\n",
    );
    let out = fabperf_run::run(&common::opts(&plan, &db)).unwrap();
    assert_eq!(out.failed, 1, "{out:?}");
    let run = s.latest_run_for_plan("nohttp").unwrap().unwrap();
    let c = &s.cells(run.id).unwrap()[0];
    assert!(
        c.error
            .as_deref()
            .unwrap()
            .contains("fabperf server --http"),
        "{c:?}"
    );
}
