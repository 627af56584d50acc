//! The runner Job's script and the agents' rendered command lines, run here
//! with the real binary: agents started with the DaemonSet's arguments (the
//! kubelet's `$(NODE_NAME)` expansion done by hand, loopback addresses for
//! the pod IPs), the rendered run plan with its DNS names pointed at them,
//! and the Job's shell script with the Job's environment. What `kubectl logs
//! job/fabperf-run` would show, the store it leaves, its exit statuses.

use fabperf_k8s::api::test_support::FakeApiServer;
use fabperf_k8s::plan::{parse_plan, PathKind, Plan};
use fabperf_k8s::runner::objects::job;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fabperf");
const TOKEN: &str = "k8s-runner-test-0123456789abcdef";
const JOB_UID: &str = "0a1b2c3d-4e5f-6789-abcd-ef0123456789";

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fabperf-k8s-runner-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("data")).unwrap();
    d
}

/// A port free for TCP and UDP on 127.0.0.1 and 127.0.0.2.
fn free_port() -> u16 {
    'next: loop {
        let t = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = t.local_addr().unwrap().port();
        drop(t);
        for i in 1..=2 {
            let ip = Ipv4Addr::new(127, 0, 0, i);
            if TcpListener::bind((ip, port)).is_err() || UdpSocket::bind((ip, port)).is_err() {
                continue 'next;
            }
        }
        return port;
    }
}

/// A k8s plan with the pod path only and these `[runner]` lines.
fn plan(runner: &str) -> Plan {
    let text = format!(
        "image = \"registry.example.com/fabperf:1\"\npaths = [\"pod\"]\n\n[runner]\n{runner}"
    );
    parse_plan(&text, "plan.toml", Path::new(".")).unwrap_or_else(|e| panic!("{e}"))
}

struct Agents(Vec<Child>);

impl Drop for Agents {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Two pod agents (node-a on 127.0.0.1, node-b on 127.0.0.2) started with
/// the rendered DaemonSet's command line.
fn start_agents(plan: &Plan, dir: &Path, port: u16) -> Agents {
    let token = dir.join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    let ds = fabperf_k8s::objects::agent_daemonset(plan, PathKind::Pod);
    let cmd = ds.spec.template.spec.unwrap().containers[0]
        .command
        .clone()
        .unwrap();
    assert_eq!(cmd[..2], ["fabperf", "server"]);
    let mut kids = Vec::new();
    for (i, node) in [(1u8, "node-a"), (2, "node-b")] {
        let args: Vec<String> = cmd[2..]
            .iter()
            .map(|a| match a.as_str() {
                "0.0.0.0" => format!("127.0.0.{i}"),
                "$(NODE_NAME)" => node.to_string(),
                "5301" => port.to_string(),
                "/etc/fabperf/token" => token.display().to_string(),
                other => other.to_string(),
            })
            .collect();
        kids.push(
            Command::new(BIN)
                .arg("server")
                .args(&args)
                .arg("--quiet")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let addr = SocketAddr::from((Ipv4Addr::new(127, 0, 0, i), port));
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(Instant::now() < deadline, "agent {node} did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Agents(kids)
}

/// The rendered run plan, its Service name pointed at the two agents (the
/// A records the headless Service would have) and its token at `dir`.
fn local_run_plan(plan: &Plan, dir: &Path, port: u16, extra_agent: bool) -> PathBuf {
    let r = plan.runner.as_ref().unwrap();
    let svc = "dns = \"fabperf-pod.fabperf.svc\"\nport = 5301\npath = \"pod\"\n";
    assert!(r.run_plan.contains(svc), "{}", r.run_plan);
    let mut agents = format!(
        "dns = \"127.0.0.1\"\nport = {port}\npath = \"pod\"\n\n[[agents]]\ndns = \"127.0.0.2\"\nport = {port}\npath = \"pod\"\n"
    );
    if extra_agent {
        // An agent that is not there: its cells fail.
        agents.push_str(&format!(
            "\n[[agents]]\ndns = \"127.0.0.3\"\nport = {port}\npath = \"pod\"\n"
        ));
    }
    let text = r.run_plan.replace(svc, &agents).replace(
        "token_file = \"/etc/fabperf/token\"",
        &format!("token_file = \"{}\"", dir.join("token").display()),
    );
    let p = dir.join("plan.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// The Job's container: its script and its literal environment.
fn job_script(plan: &Plan) -> (String, BTreeMap<String, String>) {
    let j = job(plan, plan.runner.as_ref().unwrap());
    let c = j.spec.unwrap().template.spec.unwrap().containers[0].clone();
    let cmd = c.command.unwrap();
    assert_eq!(cmd[..2], ["/bin/sh", "-c"]);
    let env = c
        .env
        .unwrap()
        .into_iter()
        .filter_map(|e| e.value.map(|v| (e.name, v)))
        .collect();
    (cmd[2].clone(), env)
}

/// The stand-in API server of a test (the run Lease), kept for its life.
fn api() -> &'static FakeApiServer {
    static API: std::sync::OnceLock<FakeApiServer> = std::sync::OnceLock::new();
    API.get_or_init(FakeApiServer::start)
}

/// Start the Job's script as the kubelet would, with the downward-API
/// variables a Job pod gets and the paths pointed into `dir`; its Lease is
/// taken from the stand-in API server in a namespace of its own.
fn spawn_job(plan: &Plan, dir: &Path, run_plan: &Path) -> Child {
    spawn_job_in(
        plan,
        dir,
        run_plan,
        &dir.display().to_string().replace('/', "-"),
    )
}

fn spawn_job_in(plan: &Plan, dir: &Path, run_plan: &Path, namespace: &str) -> Child {
    let (script, env) = job_script(plan);
    let bin_dir = Path::new(BIN).parent().unwrap();
    let mut c = Command::new("/bin/sh");
    c.arg("-c").arg(script);
    for (k, v) in &env {
        c.env(k, v);
    }
    c.env("FABPERF_RUN_PLAN", run_plan)
        .env("FABPERF_DATA", dir.join("data"))
        .env("TMPDIR", dir)
        .env("JOB_NAME", "fabperf-run")
        .env("JOB_UID", JOB_UID)
        .env("NODE_NAME", "node-r")
        .env("POD_NAME", "fabperf-run-abcde")
        .env("POD_NAMESPACE", namespace)
        .env("FABPERF_K8S_API", api().url())
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin_dir.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c.spawn().unwrap()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).to_string(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    )
}

const TESTS: &str = "retries = 0\n[[runner.tests]]\nname = \"bw\"\nkind = \"tcp-bw\"\nduration = \"0.4s\"\nparams = { omit_s = 0.1 }\nretest = 0\n\n[[runner.tests]]\nname = \"lat\"\nkind = \"tcp-lat\"\nduration = \"0.3s\"\nretest = 0\n";

#[test]
fn the_job_runs_the_rendered_plan_and_prints_summary_and_results() {
    let dir = tmpdir("ok");
    let p = plan(TESTS);
    let port = free_port();
    let _agents = start_agents(&p, &dir, port);
    let rp = local_run_plan(&p, &dir, port, false);
    let o = spawn_job(&p, &dir, &rp).wait_with_output().unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    // Progress (one line per cell, on stderr like `kubectl logs` shows it),
    // the summary, the measurements.
    assert!(err.contains("fabperf run"), "{err}");
    assert!(
        out.contains("fabperf-runner: job fabperf-run on node node-r"),
        "{out}"
    );
    assert!(out.contains("==> mesh summary"), "{out}");
    assert!(
        out.contains("==> measurements (JSON Lines, one per line)"),
        "{out}"
    );
    assert!(out.contains("fabperf-runner: done, exit status 0"), "{out}");
    let records: Vec<serde_json::Value> = out
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    // Two bw and two lat cells between the two nodes (mesh of 2, both
    // directions).
    let tests: Vec<&str> = records
        .iter()
        .filter(|r| r["role"] == "total")
        .map(|r| r["plan_test"].as_str().unwrap())
        .collect();
    assert_eq!(tests, ["bw", "bw", "lat", "lat"], "{out}");
    for r in &records {
        assert_eq!(r["path"], "pod");
        let mut nodes = [
            r["src_node"].as_str().unwrap(),
            r["dst_node"].as_str().unwrap(),
        ];
        nodes.sort();
        assert_eq!(nodes, ["node-a", "node-b"], "{r}");
    }
    // The store is the Job's own: <job>-<first group of its uid>.db; the
    // agents named themselves by node (--node-name) and path (--path-label).
    let db = dir.join("data/fabperf-run-0a1b2c3d.db");
    let store = fabperf_store::Store::open_read_only(&db).unwrap();
    let run = store.latest_run().unwrap().unwrap();
    assert_eq!(run.plan_name, "k8s-fabperf");
    // The run held the namespace's Lease and gave it back.
    let ns = dir.display().to_string().replace('/', "-");
    let lease = api().state.lock().unwrap().leases[&format!("{ns}/fabperf-run")].clone();
    assert!(lease["spec"].get("holderIdentity").is_none(), "{lease}");
    assert!(err.contains("holding the Lease"), "{err}");
    assert!(err.contains("released the Lease"), "{err}");
    let agents = store.agents(run.id).unwrap();
    let mut seen: Vec<(String, String)> = agents
        .iter()
        .map(|a| {
            (
                a.hello["agent"]["node"].as_str().unwrap().to_string(),
                a.hello["agent"]["path"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("node-a".to_string(), "pod".to_string()),
            ("node-b".into(), "pod".into())
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_job_exit_statuses() {
    let port = free_port();

    // 1: a cell failed (an agent the Service lists is gone); the summary
    // and the measurements still come out.
    let dir = tmpdir("fail");
    let p = plan(TESTS);
    let _agents = start_agents(&p, &dir, port);
    let rp = local_run_plan(&p, &dir, port, true);
    let o = spawn_job(&p, &dir, &rp).wait_with_output().unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
    // Said at the start, before any cell: which agent, and why.
    let warn = err
        .lines()
        .position(|l| l.contains("127.0.0.3") && l.contains("is unreachable"))
        .unwrap_or_else(|| panic!("{err}"));
    let first_cell = err.lines().position(|l| l.contains("] running ")).unwrap();
    assert!(warn < first_cell, "{err}");
    assert!(err.lines().nth(warn).unwrap().contains("refused"), "{err}");
    assert!(out.contains("==> measurements"), "{out}");
    assert!(out.lines().any(|l| l.starts_with('{')), "{out}");
    let _ = std::fs::remove_dir_all(&dir);

    // 2: a plan fabperf run refuses; no store, nothing to export.
    let dir = tmpdir("bad");
    let bad = dir.join("plan.toml");
    std::fs::write(&bad, "name = \"x\"\n[[agents]]\n").unwrap();
    let o = spawn_job(&p, &dir, &bad).wait_with_output().unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}\n{err}");
    assert!(err.contains("nothing to export"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);

    // 3: every cell done, but the OpenMetrics push could not be delivered
    // (nothing listens there).
    let dir = tmpdir("push");
    let closed = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let url = format!("http://127.0.0.1:{}", closed.local_addr().unwrap().port());
    drop(closed);
    let p = plan(&format!("pushgateway = \"{url}\"\n{TESTS}"));
    drop(_agents);
    let port = free_port();
    let _agents = start_agents(&p, &dir, port);
    let rp = local_run_plan(&p, &dir, port, false);
    let o = spawn_job(&p, &dir, &rp).wait_with_output().unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(3), "{out}\n{err}");
    assert!(err.contains("fabperf-runner: an export failed"), "{err}");
    // The log export came out all the same.
    assert!(out.lines().any(|l| l.starts_with('{')), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn policy_scale_cells_hold_their_count_of_networkpolicies_through_the_api() {
    let dir = tmpdir("policies");
    let p = plan(
        "retries = 0\n[[runner.tests]]\nname = \"lat\"\nkind = \"tcp-lat\"\nduration = \"0.2s\"\nretest = 0\npolicies = [0, 3]\n",
    );
    let r = p.runner.as_ref().unwrap();
    assert!(r.policy_api);
    assert!(
        r.run_plan.contains("command = [\"fabperf\", \"k8s\", \"policy-scale\", \"--apply\", \"--namespace\", \"fabperf\", \"--port\", \"5301\"]"),
        "{}",
        r.run_plan
    );
    let port = free_port();
    let _agents = start_agents(&p, &dir, port);
    let rp = local_run_plan(&p, &dir, port, false);
    let before = api().state.lock().unwrap().requests.len();
    let o = spawn_job_in(&p, &dir, &rp, "policies")
        .wait_with_output()
        .unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    // Before the cells of 3: three created; at the end of the run: none.
    let s = api().state.lock().unwrap();
    let posts = s.requests[before..]
        .iter()
        .filter(|r| {
            r.starts_with("POST /apis/networking.k8s.io/v1/namespaces/fabperf/networkpolicies")
        })
        .count();
    assert_eq!(posts, 3, "{:?}", &s.requests[before..]);
    assert!(s.policies.is_empty(), "{:?}", s.policies.keys());
    assert!(err.contains("policy command: 3 policies"), "{err}");
    // Both counts measured.
    let counts: std::collections::BTreeSet<String> = out
        .lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["role"] == "total")
        .map(|r| r["dims"]["policies"].to_string())
        .collect();
    assert_eq!(counts.len(), 2, "{counts:?}\n{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_second_run_finds_the_lease_held_and_says_by_whom() {
    let dir = tmpdir("lease");
    let p = plan(TESTS);
    let port = free_port();
    let _agents = start_agents(&p, &dir, port);
    let rp = local_run_plan(&p, &dir, port, false);
    // Another run holds the namespace's Lease (a one-off Job beside the
    // CronJob's run).
    let ns = "lease-held";
    api().put_lease(
        "fabperf-run",
        serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"namespace": ns},
            "spec": {"holderIdentity": "fabperf-run-28001234-xyz12", "leaseDurationSeconds": 60,
                     "renewTime": fabperf_results::now_rfc3339()}}),
    );
    let o = spawn_job_in(&p, &dir, &rp, ns).wait_with_output().unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(4), "{out}\n{err}");
    assert!(
        err.contains("another run holds the Lease lease-held/fabperf-run: fabperf-run-28001234-xyz12 (renewed"),
        "{err}"
    );
    assert!(err.contains("Not starting"), "{err}");
    // Nothing measured, nothing exported.
    assert!(!out.lines().any(|l| l.starts_with('{')), "{out}");
    assert!(!dir.join("data/fabperf-run-0a1b2c3d.db").exists());
    // The first run's Lease is untouched.
    assert_eq!(
        api().state.lock().unwrap().leases["lease-held/fabperf-run"]["spec"]["holderIdentity"],
        "fabperf-run-28001234-xyz12"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_aborts_the_run_and_still_exports_what_finished() {
    let dir = tmpdir("term");
    // Long cells: the pod is stopped in the middle of the second.
    let p = plan(
        "[[runner.tests]]\nname = \"bw\"\nkind = \"tcp-bw\"\nduration = \"0.3s\"\nparams = { omit_s = 0.1 }\nretest = 0\n\n[[runner.tests]]\nname = \"long\"\nkind = \"tcp-bw\"\nduration = \"60s\"\nretest = 0\n",
    );
    let port = free_port();
    let _agents = start_agents(&p, &dir, port);
    let rp = local_run_plan(&p, &dir, port, false);
    let child = spawn_job(&p, &dir, &rp);
    let pid = child.id();
    // Wait until the first cell is stored, then stop the pod (the kubelet
    // sends SIGTERM to the container's first process: the shell).
    let db = dir.join("data/fabperf-run-0a1b2c3d.db");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "the first cell never finished");
        let done = fabperf_store::Store::open_read_only(&db)
            .ok()
            .and_then(|s| {
                let run = s.latest_run().ok()??;
                let cells = s.cells(run.id).ok()?;
                Some(
                    cells
                        .iter()
                        .filter(|c| c.state == fabperf_store::CellState::Done)
                        .count(),
                )
            })
            .unwrap_or(0);
        if done >= 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    let t0 = Instant::now();
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    let o = child.wait_with_output().unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(130), "{out}\n{err}");
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "the run did not stop on SIGTERM within the pod's grace period: {:?}",
        t0.elapsed()
    );
    assert!(out.contains("fabperf run exited with status 130"), "{out}");
    let records: Vec<&str> = out.lines().filter(|l| l.starts_with('{')).collect();
    assert!(
        records.iter().any(|l| l.contains("\"plan_test\":\"bw\"")),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_rendered_agent_command_line_is_accepted_by_fabperf_server() {
    // The agents' flags reach the real argument parser: with a token file
    // that does not exist, the agent gets past clap and stops at the token.
    let dir = tmpdir("args");
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/two-node-roce-ipoib.toml"),
    )
    .unwrap();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let plan = parse_plan(&text, "p.toml", &examples).unwrap();
    let missing = dir.join("no-such-token");
    for path in [PathKind::Pod, PathKind::Ipoib, PathKind::Roce] {
        let cmd = fabperf_k8s::objects::agent_daemonset(&plan, path)
            .spec
            .template
            .spec
            .unwrap()
            .containers[0]
            .command
            .clone()
            .unwrap();
        let args: Vec<String> = cmd[2..]
            .iter()
            .map(|a| match a.as_str() {
                "$(NODE_NAME)" => "node-a".to_string(),
                "/etc/fabperf/token" => missing.display().to_string(),
                other => other.to_string(),
            })
            .collect();
        let o = Command::new(BIN)
            .arg("server")
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_ne!(o.status.code(), Some(2), "{path:?}: usage error: {err}");
        assert!(err.contains("no-such-token"), "{path:?}: {err}");
    }
    // The host agent's shell line, with the real binary.
    let cmd = fabperf_k8s::objects::host_fabric_command(&plan);
    std::fs::create_dir_all(dir.join("addr")).unwrap();
    std::fs::write(dir.join("addr/node-a"), "127.0.0.1").unwrap();
    let script = cmd[2]
        .replace("/etc/fabperf-host", &dir.join("addr").display().to_string())
        .replace("/etc/fabperf/token", &missing.display().to_string());
    let o = Command::new("/bin/sh")
        .arg("-c")
        .arg(&script)
        .env(
            "PATH",
            format!(
                "{}:/usr/bin:/bin",
                Path::new(BIN).parent().unwrap().display()
            ),
        )
        .env("NODE_NAME", "node-a")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(2), "usage error: {err}");
    assert!(err.contains("no-such-token"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
