//! Every secret and plan file goes through one reader: a FIFO is refused at
//! once (never waited on), `/dev/zero` and a sparse 1 GiB file are refused
//! before they are read, whatever the command (a client's or the agent's
//! token, `run`'s plan, `k8s render --plan`, `doctor --mtu-results`,
//! `tune check`). The commands run with a 1 GiB address-space limit and a
//! deadline, so a reader without the checks fails the test instead of
//! eating the machine's memory or hanging it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fabperf");

/// Run fabperf with `args` under a memory limit; its exit code and stderr,
/// or `None` when it was still running after `secs` (then killed).
fn bounded(args: &[&str], secs: u64) -> (Option<i32>, String) {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs in the child.
    unsafe {
        cmd.pre_exec(|| {
            let lim = rustix::process::Rlimit {
                current: Some(1 << 30),
                maximum: Some(1 << 30),
            };
            rustix::process::setrlimit(rustix::process::Resource::As, lim)?;
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (st.code(), err);
        }
        if t0.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            let _ = child.wait();
            return (None, String::new());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn mkfifo(p: &Path) {
    let st = Command::new("mkfifo").arg(p).status().unwrap();
    assert!(st.success());
}

fn hostile_files(dir: &Path) -> Vec<(&'static str, PathBuf)> {
    let fifo = dir.join("fifo");
    mkfifo(&fifo);
    let sparse = dir.join("sparse");
    std::fs::File::create(&sparse)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    vec![
        ("/dev/zero", PathBuf::from("/dev/zero")),
        ("a FIFO", fifo),
        ("a sparse 1 GiB file", sparse),
    ]
}

#[test]
fn secret_and_plan_files_are_small_regular_files_or_refused() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("s.db");
    let db = db.to_str().unwrap();
    for (what, p) in hostile_files(d.path()) {
        let p = p.to_str().unwrap();
        let cases: Vec<Vec<&str>> = vec![
            vec!["tcp-lat", "127.0.0.1", "-p", "9", "--token-file", p],
            vec![
                "server",
                "--bind",
                "127.0.0.1",
                "--port",
                "0",
                "--token-file",
                p,
            ],
            vec!["run", p, "--db", db],
            vec!["k8s", "render", "--plan", p],
            vec!["doctor", "--mtu-results", p],
            vec!["tune", "check", p],
        ];
        for args in cases {
            let (code, err) = bounded(&args, 10);
            let code =
                code.unwrap_or_else(|| panic!("{args:?} on {what}: still running after 10 s"));
            assert_ne!(code, 0, "{args:?} on {what}: {err}");
            assert!(
                err.contains("not a regular file") || err.contains("larger than"),
                "{args:?} on {what}: {err}"
            );
        }
    }
}
