//! Hostile and careless `--root` snapshots: FIFOs, huge sparse files, symlinks that leave the
//! snapshot or point at devices, unreadable directories.
//!
//! Each detection runs in a child process (this test binary, re-executed) with a time limit and
//! an address-space limit, so that a detector that blocks on a FIFO or reads `/dev/zero` until
//! memory runs out fails the test instead of hanging it or the machine. The assertions read the
//! child's JSON output, so they need nothing but the `detect --json` / `doctor --json` format.

mod common;

use common::scratch;
use serde_json::Value;
use std::fs;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "FABPERF_HOSTILE_ROOT";
const CHILD_LIMIT: Duration = Duration::from_secs(90);
const MARK: &str = "=====FABPERF-CHILD-JSON=====";

/// In the child: detect `root`, print inventory and doctor report, and exit.
fn child_main(root: &str) {
    // 4 GiB of address space: plenty for detect, far less than "read /dev/zero whole".
    let _ = rustix::process::setrlimit(
        rustix::process::Resource::As,
        rustix::process::Rlimit {
            current: Some(4 << 30),
            maximum: Some(4 << 30),
        },
    );
    let inv = match fabperf_detect::detect_root(Path::new(root), &Default::default()) {
        Ok(i) => i,
        Err(e) => {
            let msg = serde_json::to_string(&e.to_string()).unwrap();
            println!("{MARK}\n{{\"error\": {msg}}}\n{MARK}");
            return;
        }
    };
    let rep = fabperf_detect::doctor::diagnose(&inv);
    println!(
        "{MARK}\n{{\"inventory\": {}, \"doctor\": {}}}\n{MARK}",
        inv.to_json_pretty(),
        rep.to_json_pretty()
    );
}

/// Run `test` (this test's own name) as a child on `root`, optionally as another user.
/// Returns the child's `{"inventory", "doctor"}` or panics with what went wrong.
fn detect_in_child(test: &str, root: &Path, uid: Option<u32>) -> Result<Value, String> {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, root)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(u) = uid {
        use std::os::unix::process::CommandExt;
        cmd.uid(u).gid(u);
    }
    let mut child = cmd.spawn().map_err(|e| format!("spawn: {e}"))?;
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut out = String::new();
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .unwrap();
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            let json = out.split(MARK).nth(1).ok_or_else(|| {
                format!("child exited {status} without a result\nstdout:\n{out}\nstderr:\n{err}")
            })?;
            let v: Value = serde_json::from_str(json).map_err(|e| format!("child JSON: {e}"))?;
            if let Some(e) = v.get("error") {
                return Err(format!("detect failed in the child: {e}"));
            }
            return Ok(v);
        }
        if start.elapsed() > CHILD_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "detect did not finish within {CHILD_LIMIT:?} (blocked on an input?)"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn child_root() -> Option<String> {
    std::env::var(CHILD_ENV).ok()
}

fn netdev<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["inventory"]["netdevs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == name)
        .unwrap_or_else(|| panic!("no netdev {name}"))
}

fn warnings(v: &Value) -> Vec<String> {
    v["inventory"]["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect()
}

fn has_warning(v: &Value, parts: &[&str]) -> bool {
    warnings(v)
        .iter()
        .any(|w| parts.iter().all(|p| w.contains(p)))
}

fn addresses(v: &Value) -> Vec<String> {
    v["inventory"]["netdevs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|n| n["ipv4"].as_array().unwrap().clone())
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

fn mkfifo(p: &Path) {
    let _ = fs::remove_file(p);
    rustix::fs::mkfifoat(rustix::fs::CWD, p, rustix::fs::Mode::from(0o644)).unwrap();
}

/// The real file behind a host path of the snapshot (following the snapshot's own links).
fn real(root: &Path, host_path: &str) -> std::path::PathBuf {
    let p = root.join(host_path.trim_start_matches('/'));
    let parent = fs::canonicalize(p.parent().unwrap()).unwrap();
    parent.join(p.file_name().unwrap())
}

#[test]
fn fifos_are_refused_not_waited_on() {
    if let Some(r) = child_root() {
        return child_main(&r);
    }
    let d = scratch("cx5-roce");
    mkfifo(&real(d.path(), "/sys/class/net/ens1f0np0/mtu"));
    mkfifo(&d.path().join("ip-addr.json"));
    let v = detect_in_child("fifos_are_refused_not_waited_on", d.path(), None).unwrap();
    assert!(netdev(&v, "ens1f0np0")["mtu"].is_null());
    assert!(
        has_warning(&v, &["ens1f0np0/mtu", "FIFO", "refused"]),
        "{:#?}",
        warnings(&v)
    );
    assert!(
        has_warning(&v, &["ip-addr.json", "FIFO", "addresses unknown"]),
        "{:#?}",
        warnings(&v)
    );
    // The rest of the inventory is intact.
    assert_eq!(netdev(&v, "ens1f0np0")["speed_mbps"], 100000);
}

#[test]
fn huge_sparse_files_are_refused_unread() {
    if let Some(r) = child_root() {
        return child_main(&r);
    }
    let d = scratch("cx5-roce");
    for p in [
        real(d.path(), "/sys/class/net/ens1f0np0/mtu"),
        d.path().join("ip-route.json"),
    ] {
        let f = fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&p)
            .unwrap();
        f.set_len(1 << 30).unwrap();
    }
    let v = detect_in_child("huge_sparse_files_are_refused_unread", d.path(), None).unwrap();
    assert!(netdev(&v, "ens1f0np0")["mtu"].is_null());
    assert!(
        has_warning(&v, &["ens1f0np0/mtu", "larger than"]),
        "{:#?}",
        warnings(&v)
    );
    assert!(
        has_warning(&v, &["ip-route.json", "larger than", "routes unknown"]),
        "{:#?}",
        warnings(&v)
    );
}

#[test]
fn json_symlinks_cannot_leave_the_snapshot() {
    if let Some(r) = child_root() {
        return child_main(&r);
    }
    let d = scratch("cx5-roce");
    // A valid `ip -j addr show` outside the snapshot, with an address no fixture has.
    let outside = tempfile::tempdir().unwrap();
    let decoy = outside.path().join("addr.json");
    fs::write(
        &decoy,
        r#"[{"ifindex":2,"ifname":"ens1f0np0","addr_info":[{"family":"inet","local":"203.0.113.77","prefixlen":24,"scope":"global"}]}]"#,
    )
    .unwrap();
    let addr = d.path().join("ip-addr.json");
    fs::remove_file(&addr).unwrap();
    std::os::unix::fs::symlink(&decoy, &addr).unwrap();
    // And a relative one climbing out with `..`.
    let route = d.path().join("ip-route.json");
    fs::remove_file(&route).unwrap();
    let depth = d.path().components().count();
    let rel = format!(
        "{}{}",
        "../".repeat(depth + 2),
        decoy.to_str().unwrap().trim_start_matches('/')
    );
    std::os::unix::fs::symlink(&rel, &route).unwrap();
    let v = detect_in_child("json_symlinks_cannot_leave_the_snapshot", d.path(), None).unwrap();
    assert!(
        !addresses(&v).iter().any(|a| a.starts_with("203.0.113.77")),
        "address read from outside the snapshot: {:?}",
        addresses(&v)
    );
    assert!(
        has_warning(&v, &["ip-addr.json", "addresses unknown"]),
        "{:#?}",
        warnings(&v)
    );
    assert!(
        has_warning(&v, &["ip-route.json", "routes unknown"]),
        "{:#?}",
        warnings(&v)
    );
}

#[test]
fn symlinks_to_dev_zero_are_not_read() {
    if let Some(r) = child_root() {
        return child_main(&r);
    }
    let d = scratch("cx5-roce");
    // Absolute: resolved inside the snapshot, where there is no dev/zero.
    let addr = d.path().join("ip-addr.json");
    fs::remove_file(&addr).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &addr).unwrap();
    // A character device inside the snapshot (tar as root recreates device nodes).
    let route = d.path().join("ip-route.json");
    fs::remove_file(&route).unwrap();
    let node = d.path().join("zero");
    let made = rustix::fs::mknodat(
        rustix::fs::CWD,
        &node,
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from(0o666),
        rustix::fs::makedev(1, 5),
    );
    if made.is_err() {
        // Not root: a plain symlink to the real /dev/zero still must not be followed.
        std::os::unix::fs::symlink("/dev/zero", &route).unwrap();
    } else {
        std::os::unix::fs::symlink("zero", &route).unwrap();
    }
    // A sysfs attribute too.
    let mtu = real(d.path(), "/sys/class/net/ens1f0np0/mtu");
    fs::remove_file(&mtu).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &mtu).unwrap();
    let v = detect_in_child("symlinks_to_dev_zero_are_not_read", d.path(), None).unwrap();
    assert!(netdev(&v, "ens1f0np0")["mtu"].is_null());
    assert!(
        has_warning(&v, &["ip-addr.json", "addresses unknown"]),
        "{:#?}",
        warnings(&v)
    );
    if made.is_ok() {
        assert!(
            has_warning(&v, &["ip-route.json", "character device", "refused"]),
            "{:#?}",
            warnings(&v)
        );
    }
}

#[test]
fn unreadable_infiniband_directory_is_incomplete_not_empty() {
    if let Some(r) = child_root() {
        return child_main(&r);
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIPPED: needs root to run the detector as user nobody (uid 65534)");
        return;
    }
    let d = scratch("cx5-roce");
    // nobody must reach the snapshot (tempdirs are 0700) but not list sys/class/infiniband.
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let ib = d.path().join("sys/class/infiniband");
    fs::set_permissions(&ib, fs::Permissions::from_mode(0o000)).unwrap();
    let v = match detect_in_child(
        "unreadable_infiniband_directory_is_incomplete_not_empty",
        d.path(),
        Some(65534),
    ) {
        Ok(v) => v,
        Err(e) if e.starts_with("spawn:") || e.starts_with("detect failed in the child: ") => {
            // The binary or the temporary directory is not reachable by nobody here (a
            // checkout under /root, a private TMPDIR).
            eprintln!("SKIPPED: cannot run the detector as nobody on the snapshot ({e})");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    fs::set_permissions(&ib, fs::Permissions::from_mode(0o755)).unwrap();
    let inv = &v["inventory"];
    let note = inv["rdma_note"].as_str().unwrap_or("");
    assert!(
        !note.contains("is empty")
            && note.contains("unreadable")
            && note.contains("permission denied"),
        "{note}"
    );
    assert!(
        has_warning(&v, &["sys/class/infiniband", "permission denied"]),
        "{:#?}",
        warnings(&v)
    );
    let doc = &v["doctor"];
    assert!(
        doc["errors"].as_u64().unwrap() >= 1,
        "doctor must not pass an incomplete inventory: {doc:#}"
    );
    let ids: Vec<&str> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"inventory-incomplete"), "{ids:?}");
    assert!(!ids.contains(&"no-rdma"), "{ids:?}");
    let f = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "inventory-incomplete")
        .unwrap();
    assert_eq!(f["severity"], "error");
    assert!(f["evidence"][0]["path"]
        .as_str()
        .unwrap()
        .ends_with("sys/class/infiniband"));
}
