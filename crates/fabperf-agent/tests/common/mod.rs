//! What the agent's flood tests share: a test kind that echoes one value,
//! the agent run as a child process (the test binary started again on an
//! ignored test), its /proc figures and a real client's round trip.

#![allow(dead_code)] // each test binary uses its own part

use fabperf_proto::{connect_test, ClientConfig, Msg, ServeCtx, ServeError, TestKind};
use serde_json::json;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Echoes the one value the client sends.
pub struct Echo;

impl TestKind for Echo {
    fn name(&self) -> &'static str {
        "echo"
    }
    fn serve(&self, ctx: &mut ServeCtx<'_>, _p: serde_json::Value) -> Result<(), ServeError> {
        ctx.ctl.send(&Msg::Accept { info: json!({}) })?;
        let v: serde_json::Value = ctx.ctl.recv_test("ping")?;
        ctx.ctl.send_test(&v)?;
        Ok(())
    }
}

/// An agent in a child process, killed when dropped.
pub struct ChildAgent {
    child: Child,
    pub pid: u32,
    pub addr: SocketAddr,
}

impl Drop for ChildAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ChildAgent {
    /// Run this test binary's ignored test `test` as the agent; it writes
    /// its port to the file named by `env_var`.
    pub fn start(test: &str, env_var: &str, port_file: &Path) -> ChildAgent {
        let _ = std::fs::remove_file(port_file);
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--ignored", "--nocapture"])
            .env(env_var, port_file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut agent = ChildAgent {
            child,
            pid,
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        };
        let t0 = Instant::now();
        let port: u16 = loop {
            if let Ok(p) = std::fs::read_to_string(port_file) {
                if let Ok(p) = p.trim().parse() {
                    break p;
                }
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the agent did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let _ = std::fs::remove_file(port_file);
        agent.addr.set_port(port);
        agent
    }

    /// A field of /proc/PID/status (VmRSS: in KiB, Threads:).
    pub fn status(&self, key: &str) -> u64 {
        let pid = self.pid;
        let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        s.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
    }

    /// A real client's echo test (token "tok"), and how long it took.
    pub fn echo(&self) -> Result<Duration, fabperf_proto::ProtoError> {
        let c = ClientConfig {
            group: None,
            token: Some(b"tok".to_vec()),
            timeout: Duration::from_secs(5),
        };
        let t = Instant::now();
        let (mut ctl, _) = connect_test(self.addr, &c, "echo", json!({}))?;
        ctl.send_test(&json!(1))?;
        let _: serde_json::Value = ctl.recv_test("echo")?;
        let _ = ctl.send(&Msg::Bye);
        Ok(t.elapsed())
    }
}
