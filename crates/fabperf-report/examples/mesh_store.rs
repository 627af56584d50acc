//! A synthetic results store of a large mesh, for the scale benchmark
//! (`bench/store-scale.sh`): the run an N-node `tcp-lat` mesh plan makes —
//! every ordered pair (both directions), each sweep size, each repeat —
//! with records as the agents write them (latency summary, histogram,
//! placement), a few slow nodes and links, and one round of re-tests of
//! the pairs they slow down, so that the summary and the report have
//! suspects to find.
//!
//! ```text
//! cargo run --release -p fabperf-report --example mesh_store -- \
//!     --db /tmp/mesh1024.db --nodes 1024 --sizes 64,4096 --repeats 3
//! ```
//!
//! Cells are written through `fabperf-store`, many per transaction, in the
//! order and with the ids `fabperf run` gives them.

use fabperf_results::{LatencyHistogram, LatencyKind, Placement, Record, Transport};
use fabperf_run::plan::TestDecl;
use fabperf_store::{Attempt, CellSpec, Measurement, NewRun, Role, Store, RETEST};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Instant;

struct Args {
    db: PathBuf,
    nodes: usize,
    sizes: Vec<u64>,
    repeats: u32,
    slow_nodes: usize,
    slow_links: usize,
    chunk: usize,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        db: PathBuf::new(),
        nodes: 1024,
        sizes: vec![64, 4096],
        repeats: 3,
        slow_nodes: 3,
        slow_links: 5,
        chunk: 20_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or_else(|| format!("{k} needs a value"));
        let num = |s: String| {
            s.parse::<usize>()
                .map_err(|_| format!("{k}: {s:?} is not a number"))
        };
        match k.as_str() {
            "--db" => a.db = PathBuf::from(v()?),
            "--nodes" => a.nodes = num(v()?)?,
            "--repeats" => a.repeats = num(v()?)? as u32,
            "--slow-nodes" => a.slow_nodes = num(v()?)?,
            "--slow-links" => a.slow_links = num(v()?)?,
            "--chunk" => a.chunk = num(v()?)?.max(1),
            "--sizes" => {
                a.sizes = v()?
                    .split(',')
                    .map(|s| {
                        s.parse::<u64>()
                            .map_err(|_| format!("--sizes: {s:?} is not a number"))
                    })
                    .collect::<Result<_, _>>()?
            }
            _ => return Err(format!("unknown argument {k:?}")),
        }
    }
    if a.db.as_os_str().is_empty() {
        return Err("--db FILE is required (a new file)".into());
    }
    if a.db.exists() {
        return Err(format!("{} exists; give a new file", a.db.display()));
    }
    if !(2..=100_000).contains(&a.nodes) || a.sizes.is_empty() || a.repeats == 0 {
        return Err("--nodes 2..100000, at least one size and one repeat".into());
    }
    if 2 * a.slow_nodes + 2 * a.slow_links > a.nodes / 2 {
        return Err("too many slow nodes and links for that many nodes".into());
    }
    Ok(a)
}

fn node(i: usize) -> String {
    format!("node{:04}", i + 1)
}

/// A deterministic generator (SplitMix64).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Latency records to pick from: `VARIANTS` healthy ones per size (half
/// round trips around 3-5 µs plus a tail) and as many slow ones (+40 µs).
const VARIANTS: usize = 64;

fn templates(size: u64, slow: bool, rng: &mut Rng) -> Vec<Record> {
    (0..VARIANTS)
        .map(|v| {
            let base_ns = 3_000.0 + 2_000.0 * v as f64 / VARIANTS as f64 + size as f64 * 0.25;
            let extra = if slow { 40_000.0 } else { 0.0 };
            let mut h = LatencyHistogram::new(LatencyKind::HalfRtt);
            let n = 20_000u64;
            for _ in 0..n {
                let u = rng.unit();
                // Mostly near the base, a long thin tail.
                let tail = if u > 0.99 {
                    30_000.0 * rng.unit()
                } else {
                    800.0 * u
                };
                h.record_rtt_ns((2.0 * (base_ns + extra + tail)) as u64);
            }
            let mut r = Record::new("tcp-lat", Transport::Tcp, size, 1);
            r.op = Some("ping-pong".into());
            r.duration_s = 1.0;
            r.iterations = Some(n);
            r.bytes = n * size * 2;
            r.set_latency(&h);
            r.msg_rate_mpps = Some(n as f64 / 1e6);
            r.cpu_local_pct = Some(31.0 + v as f64 / 10.0);
            r.cpu_remote_pct = Some(30.0 + v as f64 / 10.0);
            let p = Placement {
                cpu: "auto".into(),
                cpu_list: Some("0-15".into()),
                numa_node: Some(0),
                interface: Some("ens1f0np0".into()),
                port_rate_gbps: Some(100.0),
                port_rate_source: Some("netdev speed".into()),
                ..Placement::default()
            };
            r.placement_local = Some(p.clone());
            r.placement_remote = Some(p);
            r.started_at = "2026-12-01T00:00:00.000Z".into();
            r
        })
        .collect()
}

fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("mesh_store: {e}");
            std::process::exit(2);
        }
    };
    let t0 = Instant::now();
    // The plan the run would have come from.
    let mut plan =
        String::from("name = \"mesh-scale\"\ndescription = \"synthetic: bench/store-scale.sh\"\n");
    for i in 0..a.nodes {
        plan.push_str(&format!(
            "[[agents]]\nname = \"{}\"\naddr = \"10.{}.{}.{}\"\npath = \"fabric\"\n",
            node(i),
            (i >> 16) & 255,
            (i >> 8) & 255,
            i & 255
        ));
    }
    plan.push_str(&format!(
        "[[tests]]\nname = \"lat\"\nkind = \"tcp-lat\"\npattern = \"mesh\"\nsizes = [{}]\nrepeats = {}\nduration = \"1s\"\nretest = 1\n",
        a.sizes.iter().map(u64::to_string).collect::<Vec<_>>().join(", "),
        a.repeats
    ));
    let parsed = fabperf_run::parse(&plan, "mesh-scale.toml", std::path::Path::new("."))
        .unwrap_or_else(|e| panic!("the generated plan does not parse: {e}"));
    let t: &TestDecl = &parsed.tests[0];
    let mut store = Store::open(&a.db).expect("create the store");
    let run = store
        .create_run(&NewRun {
            plan_name: &parsed.name,
            plan_hash: &parsed.hash,
            plan_file: None,
            plan_text: &plan,
        })
        .expect("create the run")
        .id;
    let mut rng = Rng(0x0005_EED0_FFAB_9E2F);
    // Slow nodes and links, all distinct.
    let mut picked = BTreeSet::new();
    let mut pick = |rng: &mut Rng| loop {
        let i = (rng.next() % a.nodes as u64) as usize;
        if picked.insert(i) {
            return i;
        }
    };
    let slow_nodes: Vec<usize> = (0..a.slow_nodes).map(|_| pick(&mut rng)).collect();
    let slow_links: Vec<(usize, usize)> = (0..a.slow_links)
        .map(|_| (pick(&mut rng), pick(&mut rng)))
        .collect();
    let is_slow = |x: usize, y: usize| {
        slow_nodes.contains(&x)
            || slow_nodes.contains(&y)
            || slow_links
                .iter()
                .any(|&(p, q)| (p, q) == (x, y) || (p, q) == (y, x))
    };
    let names: Vec<String> = (0..a.nodes).map(node).collect();
    let rounds = fabperf_run::schedule::round_robin_ordered(a.nodes);
    let healthy: Vec<Vec<Record>> = a
        .sizes
        .iter()
        .map(|&s| templates(s, false, &mut rng))
        .collect();
    let slow: Vec<Vec<Record>> = a
        .sizes
        .iter()
        .map(|&s| templates(s, true, &mut rng))
        .collect();
    let attempt = Attempt {
        attempts: 1,
        started_at: "2026-12-01T00:00:00.000Z".into(),
        ended_at: "2026-12-01T00:00:01.100Z".into(),
        wall_s: 1.1,
    };
    let mut seq: i64 = 0;
    let mut batch: i64 = 0;
    let mut cells = 0usize;
    let mut chunk: Vec<(CellSpec, Measurement)> = Vec::with_capacity(a.chunk);
    let flush = |store: &mut Store, chunk: &mut Vec<(CellSpec, Measurement)>| {
        let specs: Vec<CellSpec> = chunk.iter().map(|(c, _)| c.clone()).collect();
        store.add_cells(run, &specs).expect("add cells");
        let done: Vec<(&str, &Attempt, &[Measurement])> = chunk
            .iter()
            .map(|(c, m)| (c.cell_id.as_str(), &attempt, std::slice::from_ref(m)))
            .collect();
        store.finish_cells_done(run, &done).expect("store cells");
        chunk.clear();
    };
    let record = |size_idx: usize, x: usize, y: usize, rng: &mut Rng| -> Record {
        let pool = if is_slow(x, y) {
            &slow[size_idx]
        } else {
            &healthy[size_idx]
        };
        let mut r = pool[(rng.next() % VARIANTS as u64) as usize].clone();
        r.local = Some(format!(
            "10.{}.{}.{}:{}",
            (x >> 16) & 255,
            (x >> 8) & 255,
            x & 255,
            40000 + (y % 20000)
        ));
        r.remote = Some(format!(
            "10.{}.{}.{}:5301",
            (y >> 16) & 255,
            (y >> 8) & 255,
            y & 255
        ));
        r
    };
    let spec = |pattern: &str,
                instance: Value,
                point: &fabperf_run::plan::SweepPoint,
                x: usize,
                y: usize,
                repeat: u32,
                seq: i64,
                batch: i64| {
        CellSpec {
            cell_id: fabperf_run::cells::cell_id(
                &parsed.name,
                t,
                "fabric",
                &instance,
                &point.params,
                repeat,
                None,
            ),
            seq,
            batch,
            test: t.name.clone(),
            kind: t.kind.name().to_string(),
            path: "fabric".into(),
            pattern: pattern.into(),
            flows: vec![(names[x].clone(), names[y].clone())],
            params: point.params.clone(),
            dims: Value::Object(point.dims.clone()),
            repeat,
        }
    };
    for repeat in 0..a.repeats {
        for (si, point) in t.points.iter().enumerate() {
            for r in &rounds {
                for &(x, y) in r {
                    let c = spec(
                        "mesh",
                        json!({"pair": [names[x], names[y]]}),
                        point,
                        x,
                        y,
                        repeat,
                        seq,
                        batch,
                    );
                    seq += 1;
                    let m = Measurement {
                        role: Role::Total,
                        src: Some(names[x].clone()),
                        dst: Some(names[y].clone()),
                        record: record(si, x, y, &mut rng),
                    };
                    chunk.push((c, m));
                    cells += 1;
                    if chunk.len() >= a.chunk {
                        flush(&mut store, &mut chunk);
                    }
                }
                batch += 1;
            }
        }
        eprintln!(
            "mesh_store: repeat {} of {}: {cells} cells, {:.0} s",
            repeat + 1,
            a.repeats,
            t0.elapsed().as_secs_f64()
        );
    }
    // One round of re-tests of the slow pairs, as the runner adds them
    // (the slow ones stay slow: confirmed).
    let mut retests = 0usize;
    let base = 1_000_000_000i64;
    for (si, point) in t.points.iter().enumerate() {
        for x in 0..a.nodes {
            for y in 0..a.nodes {
                if x == y || !is_slow(x, y) {
                    continue;
                }
                let c = spec(
                    RETEST,
                    json!({"retest": 0, "pair": [names[x], names[y]]}),
                    point,
                    x,
                    y,
                    0,
                    base + retests as i64,
                    base + retests as i64,
                );
                let m = Measurement {
                    role: Role::Total,
                    src: Some(names[x].clone()),
                    dst: Some(names[y].clone()),
                    record: record(si, x, y, &mut rng),
                };
                chunk.push((c, m));
                retests += 1;
                if chunk.len() >= a.chunk {
                    flush(&mut store, &mut chunk);
                }
            }
        }
    }
    flush(&mut store, &mut chunk);
    store.end_run(run).expect("end the run");
    drop(store);
    let bytes = std::fs::metadata(&a.db).map(|m| m.len()).unwrap_or(0);
    println!(
        "mesh_store: {} nodes, {} sizes, {} repeats: {cells} mesh cells and {retests} re-tests in {} ({:.2} GiB) in {:.0} s; slow nodes {}; slow links {}",
        a.nodes,
        a.sizes.len(),
        a.repeats,
        a.db.display(),
        bytes as f64 / (1u64 << 30) as f64,
        t0.elapsed().as_secs_f64(),
        slow_nodes.iter().map(|&i| names[i].as_str()).collect::<Vec<_>>().join(", "),
        slow_links
            .iter()
            .map(|&(p, q)| format!("{} - {}", names[p], names[q]))
            .collect::<Vec<_>>()
            .join(", ")
    );
}
