//! The runner's threads and open files do not grow with a batch's flows
//! beyond the formula of `fabperf_run::ctlplane`: a bisection of more flows
//! than `FLOW_WORKERS` is driven from a process whose only threads are the
//! runner's (the agents run in a second process: this test binary run
//! again), and its peak is sampled while the batch runs. (A bisection, not
//! an incast: on loopback every connection to a receiver comes from
//! 127.0.0.1, and an agent caps the connections of one source.)

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "FABPERF_RUNNER_THREADS_PORT_FILE";
/// Flows of the bisection, more than `FLOW_WORKERS`; twice as many agents.
const FLOWS: usize = fabperf_run::ctlplane::FLOW_WORKERS + 32;

/// The agents' process: started by the test below; not a test of its own.
#[test]
#[ignore = "the agents of a_batch_of_many_flows_is_driven_by_a_bounded_number_of_threads"]
fn agents_process() {
    let path = std::env::var(CHILD_ENV).expect("run by the runner's thread test");
    let _ = fabperf_http::rlimit::raise_to_hard();
    let agents = common::start(2 * FLOWS, None);
    std::fs::write(&path, agents.port.to_string()).unwrap();
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

struct Agents(Child);

impl Drop for Agents {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn threads_now() -> u64 {
    fabperf_run::ctlplane::Usage::now().threads
}

#[test]
fn a_batch_of_many_flows_is_driven_by_a_bounded_number_of_threads() {
    let dir = tempfile::tempdir().unwrap();
    let port_file = dir.path().join("port");
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "agents_process", "--ignored", "--nocapture"])
        .env(CHILD_ENV, &port_file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _agents = Agents(child);
    let t0 = Instant::now();
    let port: u16 = loop {
        if let Some(p) = std::fs::read_to_string(&port_file)
            .ok()
            .and_then(|p| p.trim().parse().ok())
        {
            break p;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the agents did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // One half of the agents to the other at once. On two cores some of
    // these flows may be starved of CPU and measure no interval (the cell
    // then fails): what is checked is what the runner held meanwhile.
    let plan = common::plan(
        dir.path(),
        "threads",
        port,
        2 * FLOWS,
        "[[tests]]\nname = \"bi\"\nkind = \"tcp-bw\"\npattern = \"bisection\"\nsplits = 1\n\
         duration = \"1s\"\nparams = { omit_s = 0.2 }\n",
    );
    let base = threads_now();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(threads_now());
                std::thread::sleep(Duration::from_millis(2));
            }
            peak
        })
    };
    let out = fabperf_run::run(&common::opts(&plan, &dir.path().join("t.db")));
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let peak = sampler.join().unwrap();
    let out = out.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.done + out.failed, 1, "{out:?}");
    // The run's own threads: the formula's, less the command line's signal
    // watcher (not installed here) and the main thread (in `base`), and the
    // sampler.
    let formula = fabperf_run::ctlplane::max_threads(FLOWS) as u64;
    let own = peak - base;
    println!(
        "{FLOWS} flows in one batch: {own} threads of the run's at the peak (formula {formula}), \
         usage {:?}, phases {:?}",
        out.usage, out.phases
    );
    assert!(
        own <= formula - 2 + 1,
        "{own} threads for {FLOWS} flows, above the formula's {formula}"
    );
    // The pool was used: more than a handful of workers ran at once.
    assert!(own > 8, "only {own} threads: was the batch run at once?");
    assert!(
        out.usage.threads >= own && out.usage.threads <= base + formula,
        "{:?}",
        out.usage
    );
    // Open files: each flow's session and its duplicate at most.
    assert!(
        out.usage.fds <= fabperf_run::ctlplane::fds_needed(FLOWS, 0),
        "{:?}",
        out.usage
    );
    assert!(out.usage.fds as usize > FLOWS, "{:?}", out.usage);
    let ph = out.phases;
    assert!(ph.tests_s >= 1.0 && ph.setup_s > 0.0, "{ph:?}");
    assert!(
        (ph.total() - out.wall_s).abs() < 0.05 * out.wall_s + 0.05,
        "phases {} s against a wall time of {} s: {ph:?}",
        ph.total(),
        out.wall_s
    );
}
