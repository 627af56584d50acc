//! `fabperf cni-bench` stopped by SIGTERM or SIGINT: the sandbox being set
//! up is deleted (every plugin it had ADDed gets its DEL) and its network
//! namespace removed before the process exits. Needs root (network
//! namespaces); as another user the test says so and returns.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fabperf");

fn fake(dir: &Path, name: &str, body: &str) {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn netns_of(pid: u32) -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&format!("fabperf-cnibench-{pid}-")))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_signal_deletes_the_sandbox_being_set_up() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root for network namespaces");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let state = d.path().join("state");
    std::fs::create_dir(&state).unwrap();
    // The first plugin's ADD leaves a mark its DEL removes; the second is
    // slow, so a signal lands in the middle of a sandbox's set-up.
    fake(
        d.path(),
        "marks",
        &format!(
            r#"cat >/dev/null; if [ "$CNI_COMMAND" = ADD ]; then touch {s}/$CNI_CONTAINERID; echo '{{"cniVersion":"1.0.0","interfaces":[],"ips":[]}}'; else rm -f {s}/$CNI_CONTAINERID; fi"#,
            s = state.display()
        ),
    );
    fake(
        d.path(),
        "slow",
        r#"cat >/dev/null; if [ "$CNI_COMMAND" = ADD ]; then sleep 0.4; echo '{"cniVersion":"1.0.0","interfaces":[],"ips":[]}'; fi"#,
    );
    let conf = d.path().join("c.conflist");
    std::fs::write(
        &conf,
        r#"{"cniVersion":"1.0.0","name":"fpcb-sig","plugins":[{"type":"marks"},{"type":"slow"}]}"#,
    )
    .unwrap();
    for sig in [rustix::process::Signal::TERM, rustix::process::Signal::INT] {
        let mut child = Command::new(BIN)
            .args(["cni-bench", "-q", "-n", "1000", "--warmup", "0", "-c"])
            .arg(&conf)
            .arg("--cni-path")
            .arg(d.path())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        // Wait until a sandbox is being set up (a mark exists), then signal.
        let t0 = Instant::now();
        while std::fs::read_dir(&state).unwrap().next().is_none() {
            assert!(t0.elapsed() < Duration::from_secs(20), "no sandbox started");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(100));
        rustix::process::kill_process(rustix::process::Pid::from_raw(pid as i32).unwrap(), sig)
            .unwrap();
        let t1 = Instant::now();
        let st = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            assert!(
                t1.elapsed() < Duration::from_secs(20),
                "{sig:?}: did not stop"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        use std::io::Read;
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert_eq!(st.code(), Some(130), "{sig:?}: {err}");
        assert!(err.contains("interrupted"), "{sig:?}: {err}");
        let left: Vec<_> = std::fs::read_dir(&state)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(left.is_empty(), "{sig:?}: ADDs without their DEL: {left:?}");
        assert!(
            netns_of(pid).is_empty(),
            "{sig:?}: namespaces left: {:?}",
            netns_of(pid)
        );
    }
}
