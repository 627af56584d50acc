//! Guaranteed restore, end to end with real processes in network
//! namespaces (the host is never touched; skipped with the reason when not
//! root): `fabperf run` runs a cell under a profile and 5 policy rules
//! between two agents; one agent is killed with SIGKILL in the middle of
//! the tuned cell, its settings stay changed, and every value is back after
//! it starts again; the other agent gets SIGTERM and restores before it
//! exits; a second kill is undone by `fabperf tune restore`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fabperf");

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc_geteuid() == 0 }
}

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn sh(cmd: &str) -> String {
    let out = Command::new("sh").args(["-c", cmd]).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

struct Netns {
    a: String,
    b: String,
}

impl Netns {
    fn new() -> Netns {
        let id = std::process::id();
        let n = Netns {
            a: format!("fpt{id}a"),
            b: format!("fpt{id}b"),
        };
        sh(&format!(
            "ip netns add {a} && ip netns add {b} && \
             ip -n {a} link set lo up && ip -n {b} link set lo up && \
             ip -n {a} link add tva type veth peer name tvb netns {b} && \
             ip -n {a} addr add 10.231.0.1/24 dev tva && ip -n {b} addr add 10.231.0.2/24 dev tvb && \
             ip -n {a} link set tva up && ip -n {b} link set tvb up",
            a = n.a,
            b = n.b
        ));
        n
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Every process left in them first, then the namespaces.
        for ns in [&self.a, &self.b] {
            let _ = Command::new("sh")
                .args([
                    "-c",
                    &format!("ip netns pids {ns} | xargs -r kill -9; ip netns del {ns}"),
                ])
                .status();
        }
    }
}

/// Every value the profile and the rules touch, in one namespace.
fn snapshot(ns: &str, dev: &str) -> String {
    sh(&format!(
        "ip netns exec {ns} sh -c 'for k in ipv4/tcp_rmem ipv4/tcp_wmem ipv4/tcp_fin_timeout core/somaxconn core/rmem_max; do \
           echo $k $(cat /proc/sys/net/$k); done; \
           ip -o link show {dev} | grep -o \"mtu [0-9]*\"; \
           ethtool -k {dev} | grep -E \"^(generic-receive-offload|tcp-segmentation-offload):\"; \
           ethtool -l {dev} | tail -4 | head -2; \
           nft list tables'"
    ))
}

fn agent(ns: &str, addr: &str, name: &str, state: &Path, log: &Path) -> Child {
    Command::new("ip")
        .args(["netns", "exec", ns, BIN, "server", "--bind", addr])
        .args(["--port", "5301", "--insecure", "--allow-tune", "all"])
        .arg("--state-dir")
        .arg(state)
        .args(["--node-name", name])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < Duration::from_secs(secs),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn listening(ns: &str, addr: &str) -> bool {
    Command::new("ip")
        .args(["netns", "exec", ns, "ss", "-Hltn"])
        .arg(format!("src {addr}:5301"))
        .output()
        .is_ok_and(|o| !o.stdout.is_empty())
}

const PROFILE: &str = r#"
name = "restore-test"
[sysctl]
net.ipv4.tcp_rmem = "4096 87380 16777216"
net.ipv4.tcp_wmem = "4096 65536 16777216"
net.ipv4.tcp_fin_timeout = 17
net.core.somaxconn = ">8191"
net.core.rmem_max = 16777216
net.core.busy_poll = 50
[nic]
gro = true
tso = false
channels = { rx = 2, tx = 2 }
[link]
mtu = 4000
"#;

fn plan(dir: &Path, secs: u32) -> PathBuf {
    std::fs::write(dir.join("p.toml"), PROFILE).unwrap();
    let text = format!(
        "name = \"restore\"\ntimeout = \"5s\"\nretries = 0\n\
         [[agents]]\nname = \"a\"\naddr = \"10.231.0.1\"\n\
         [[agents]]\nname = \"b\"\naddr = \"10.231.0.2\"\n\
         [[tests]]\nkind = \"tcp-bw\"\npattern = \"pairs\"\npairs = [[\"a\", \"b\"]]\n\
         duration = \"{secs}s\"\nprofiles = [\"p.toml\"]\npolicies = [5]\n"
    );
    let p = dir.join("plan.toml");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn sigkill_in_a_tuned_cell_then_restart_restores_every_value() {
    if !root() {
        eprintln!("skipped: needs root (network namespaces, sysctls, ethtool, nft)");
        return;
    }
    for tool in ["ip", "ss", "ethtool", "nft"] {
        if !have(tool) {
            eprintln!("skipped: {tool} is not installed (ci/install-deps.sh installs it)");
            return;
        }
    }
    let ns = Netns::new();
    let d = tempfile::tempdir().unwrap();
    let (sa, sb) = (d.path().join("state-a"), d.path().join("state-b"));
    let before_a = snapshot(&ns.a, "tva");
    let before_b = snapshot(&ns.b, "tvb");
    let mut a = agent(&ns.a, "10.231.0.1", "a", &sa, &d.path().join("a.log"));
    let mut b = agent(&ns.b, "10.231.0.2", "b", &sb, &d.path().join("b.log"));
    wait_for("the agents", 20, || {
        listening(&ns.a, "10.231.0.1") && listening(&ns.b, "10.231.0.2")
    });

    // A long tuned cell; the runner sits in a's namespace.
    let plan = plan(d.path(), 60);
    let mut run = Command::new("ip")
        .args(["netns", "exec", &ns.a, BIN, "run"])
        .arg(&plan)
        .arg("--db")
        .arg(d.path().join("r.db"))
        .arg("--plain")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.path().join("run.log")).unwrap())
        .spawn()
        .unwrap();
    wait_for("b to be tuned", 30, || {
        let s = snapshot(&ns.b, "tvb");
        s.contains("tcp_fin_timeout 17") && s.contains("fabperf_policy")
    });
    let tuned_b = snapshot(&ns.b, "tvb");
    assert!(tuned_b.contains("mtu 4000"), "{tuned_b}");
    assert!(
        tuned_b.contains("tcp-segmentation-offload: off"),
        "{tuned_b}"
    );
    assert!(snapshot(&ns.a, "tva").contains("tcp_fin_timeout 17"));

    // SIGKILL b in the middle of the cell: nothing restores its values...
    b.kill().unwrap();
    b.wait().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        snapshot(&ns.b, "tvb"),
        tuned_b,
        "a killed agent restores nothing"
    );
    let journals: Vec<_> = std::fs::read_dir(sb.join("tune"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".journal"))
        .collect();
    assert_eq!(journals.len(), 1, "the journal survives the kill");

    // ... SIGTERM a: it restores, then exits 128 + 15.
    let _ = run.kill();
    let _ = run.wait();
    sh(&format!("kill -TERM {}", a.id()));
    let st = a.wait().unwrap();
    assert_eq!(st.code(), Some(143), "{st:?}");
    assert_eq!(snapshot(&ns.a, "tva"), before_a, "SIGTERM restores");

    // b starts again: every value is back before it serves.
    let blog = d.path().join("b2.log");
    let mut b2 = agent(&ns.b, "10.231.0.2", "b", &sb, &blog);
    wait_for("b to start again", 20, || listening(&ns.b, "10.231.0.2"));
    assert_eq!(snapshot(&ns.b, "tvb"), before_b, "restored at start");
    let log = std::fs::read_to_string(&blog).unwrap();
    assert!(
        log.contains("restored the settings of profile restore-test + 5 policy rules"),
        "{log}"
    );
    assert!(log.contains("restored and verified"), "{log}");

    // Once more, and this time `fabperf tune restore` cleans up.
    let mut a2 = agent(&ns.a, "10.231.0.1", "a", &sa, &d.path().join("a2.log"));
    wait_for("a again", 20, || listening(&ns.a, "10.231.0.1"));
    let mut run2 = Command::new("ip")
        .args(["netns", "exec", &ns.a, BIN, "run"])
        .arg(plan)
        .arg("--db")
        .arg(d.path().join("r2.db"))
        .arg("--plain")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.path().join("run2.log")).unwrap())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !snapshot(&ns.b, "tvb").contains("tcp_fin_timeout 17") {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "b was not tuned again; run: {}\nb: {}\na: {}",
            std::fs::read_to_string(d.path().join("run2.log")).unwrap_or_default(),
            std::fs::read_to_string(&blog).unwrap_or_default(),
            std::fs::read_to_string(d.path().join("a2.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    b2.kill().unwrap();
    b2.wait().unwrap();
    let _ = run2.kill();
    let _ = run2.wait();
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.b,
            BIN,
            "tune",
            "restore",
            "--state-dir",
        ])
        .arg(&sb)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("restored and verified"), "{text}");
    assert_eq!(
        snapshot(&ns.b, "tvb"),
        before_b,
        "restored by fabperf tune restore"
    );
    // Nothing left to do the second time.
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.b,
            BIN,
            "tune",
            "restore",
            "--state-dir",
        ])
        .arg(&sb)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing to restore"));
    sh(&format!("kill -TERM {}", a2.id()));
    let _ = a2.wait();
    assert_eq!(snapshot(&ns.a, "tva"), before_a);
}
