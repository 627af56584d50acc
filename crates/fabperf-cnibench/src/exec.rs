//! Executing one CNI plugin the way a container runtime does (CNI spec v1.0,
//! "Execution protocol"): parameters in `CNI_*` environment variables, the
//! network config on stdin, a result or an error object on stdout.

use rustix::process::{kill_process, kill_process_group, Pid, Signal};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Most of a plugin's stdout (or stderr) that is kept.
pub const MAX_OUTPUT_BYTES: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CniCommand {
    Add,
    Del,
}

impl CniCommand {
    pub fn as_str(self) -> &'static str {
        match self {
            CniCommand::Add => "ADD",
            CniCommand::Del => "DEL",
        }
    }
}

/// Everything that can go wrong running a plugin.
#[derive(Debug, Clone, PartialEq)]
pub enum PluginError {
    NotFound {
        plugin: String,
        path: String,
    },
    Spawn {
        plugin: String,
        error: String,
    },
    /// The plugin answered with a CNI error object (and a non-zero exit).
    Cni {
        plugin: String,
        command: &'static str,
        code: i64,
        msg: String,
        details: String,
    },
    /// Non-zero exit without a parseable error object.
    Failed {
        plugin: String,
        command: &'static str,
        status: String,
        stderr: String,
    },
    /// Exit 0 but stdout is not a result.
    BadResult {
        plugin: String,
        command: &'static str,
        why: String,
    },
    Timeout {
        plugin: String,
        command: &'static str,
        after: Duration,
    },
    /// The plugin exited, but something it started still held its stdout
    /// or stderr open at the timeout (a daemon it left running).
    Lingering {
        plugin: String,
        command: &'static str,
        after: Duration,
    },
}

/// Text from a plugin, made safe for a terminal: control and bidirectional
/// characters escaped (fabperf-results' one escaping rule), length capped.
pub fn clean(s: &str) -> String {
    fabperf_results::escape::terminal_cut(s, 2000)
}

impl std::fmt::Display for PluginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PluginError::NotFound { plugin, path } => write!(
                f,
                "CNI plugin {plugin:?} not found in {path}; install it (Debian: containernetworking-plugins, in /usr/lib/cni) or point --cni-path at the directory holding it"
            ),
            PluginError::Spawn { plugin, error } => {
                write!(f, "cannot run CNI plugin {plugin}: {error}")
            }
            PluginError::Cni {
                plugin,
                command,
                code,
                msg,
                details,
            } => {
                write!(f, "{plugin} {command} failed: CNI error {code}: {}", clean(msg))?;
                if !details.is_empty() {
                    write!(f, " ({})", clean(details))?;
                }
                Ok(())
            }
            PluginError::Failed {
                plugin,
                command,
                status,
                stderr,
            } => {
                write!(f, "{plugin} {command} failed ({status}) without a CNI error object")?;
                if !stderr.trim().is_empty() {
                    write!(f, "; stderr: {}", clean(stderr.trim()))?;
                }
                Ok(())
            }
            PluginError::BadResult {
                plugin,
                command,
                why,
            } => write!(f, "{plugin} {command} exited 0 but its output is not a CNI result: {why}"),
            PluginError::Timeout {
                plugin,
                command,
                after,
            } => write!(
                f,
                "{plugin} {command} did not finish within {:.1} s and was killed; raise --timeout if the plugin is just slow",
                after.as_secs_f64()
            ),
            PluginError::Lingering {
                plugin,
                command,
                after,
            } => write!(
                f,
                "{plugin} {command} exited, but a process it started still held its output open after {:.1} s (a daemon left running with the plugin's stdout or stderr); what was left in its process group was killed. A plugin must close its output (or redirect its children's) before it exits",
                after.as_secs_f64()
            ),
        }
    }
}

impl std::error::Error for PluginError {}

/// The first `dir/plugin` that is an executable file, in path order.
pub fn find_plugin(plugin: &str, cni_path: &[PathBuf]) -> Result<PathBuf, PluginError> {
    for d in cni_path {
        let p = d.join(plugin);
        if let Ok(m) = std::fs::metadata(&p) {
            #[cfg(unix)]
            let exec = {
                use std::os::unix::fs::PermissionsExt;
                m.permissions().mode() & 0o111 != 0
            };
            #[cfg(not(unix))]
            let exec = true;
            if m.is_file() && exec {
                return Ok(p);
            }
        }
    }
    Err(PluginError::NotFound {
        plugin: plugin.to_string(),
        path: join_path(cni_path),
    })
}

pub fn join_path(p: &[PathBuf]) -> String {
    p.iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(":")
}

/// Parameters of one invocation.
pub struct Invocation<'a> {
    pub plugin: &'a str,
    pub binary: &'a Path,
    pub command: CniCommand,
    pub container_id: &'a str,
    pub netns: &'a Path,
    pub ifname: &'a str,
    pub cni_path: &'a str,
    /// The config on stdin (with name, cniVersion and prevResult filled in).
    pub stdin: &'a [u8],
    pub timeout: Duration,
}

fn read_capped(mut r: impl Read) -> Vec<u8> {
    let mut buf = Vec::new();
    let _ = (&mut r).take(MAX_OUTPUT_BYTES as u64).read_to_end(&mut buf);
    // Drain the rest so the plugin never blocks on a full pipe.
    let _ = std::io::copy(&mut r, &mut std::io::sink());
    buf
}

/// Run a plugin; `Ok(result)` (`Value::Null` for DEL, which prints nothing)
/// and the wall time from spawn to exit.
pub fn invoke(inv: &Invocation) -> Result<(Value, Duration), PluginError> {
    let plugin = inv.plugin.to_string();
    let command = inv.command.as_str();
    let start = Instant::now();
    let mut cmd = Command::new(inv.binary);
    // Own process group: a timeout kills the plugin and anything it started.
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    let mut child = cmd
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", inv.container_id)
        .env("CNI_NETNS", inv.netns)
        .env("CNI_IFNAME", inv.ifname)
        .env("CNI_PATH", inv.cni_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| PluginError::Spawn {
            plugin: plugin.clone(),
            error: e.to_string(),
        })?;
    let pid = Pid::from_child(&child);
    let mut stdin = child.stdin.take().expect("piped");
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let input = inv.stdin.to_vec();
    // Writer and readers in threads: a plugin that never reads stdin or
    // floods stdout must not block us past the timeout.
    let w = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    // The readers end at EOF: when the last holder of the pipe closes it,
    // which may be a child the plugin left running. They are waited for
    // only until the invocation's deadline.
    let (out_tx, out_rx) = mpsc::channel();
    let (err_tx, err_rx) = mpsc::channel();
    let out_t = std::thread::spawn(move || {
        let _ = out_tx.send(read_capped(stdout));
    });
    let err_t = std::thread::spawn(move || {
        let _ = err_tx.send(read_capped(stderr));
    });
    let deadline = start + inv.timeout;
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let r = child.wait();
        let _ = tx.send(r);
    });
    let status = match rx.recv_timeout(inv.timeout) {
        Ok(r) => r,
        Err(_) => {
            // pid is our child, the leader of its own process group, not
            // yet reaped (the waiter has not returned), so neither id can
            // have been reused. Errors (already gone) change nothing.
            let _ = kill_process_group(pid, Signal::KILL);
            let _ = kill_process(pid, Signal::KILL);
            let _ = waiter.join();
            // The readers end when the last holder of the pipes is gone; not
            // waited for, in case something escaped the process group.
            drop((w, out_t, err_t));
            return Err(PluginError::Timeout {
                plugin,
                command,
                after: inv.timeout,
            });
        }
    };
    let elapsed = start.elapsed();
    let _ = waiter.join();
    let left = || deadline.saturating_duration_since(Instant::now());
    let (out, err) = match (out_rx.recv_timeout(left()), err_rx.recv_timeout(left())) {
        (Ok(o), Ok(e)) => (o, e),
        _ => {
            // Whatever is left in the plugin's process group holds the
            // output: killed (the group outlives its reaped leader while a
            // member lives, so the id is not reused). A process that left
            // the group is not reachable; the readers are not waited for.
            let _ = kill_process_group(pid, Signal::KILL);
            drop((w, out_t, err_t));
            return Err(PluginError::Lingering {
                plugin,
                command,
                after: inv.timeout,
            });
        }
    };
    let _ = w.join();
    let _ = out_t.join();
    let _ = err_t.join();
    let status = status.map_err(|e| PluginError::Spawn {
        plugin: plugin.clone(),
        error: e.to_string(),
    })?;
    let stdout = String::from_utf8_lossy(&out);
    if !status.success() {
        if let Ok(v) = serde_json::from_str::<Value>(&stdout) {
            if let Some(code) = v.get("code").and_then(Value::as_i64) {
                return Err(PluginError::Cni {
                    plugin,
                    command,
                    code,
                    msg: v
                        .get("msg")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    details: v
                        .get("details")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                });
            }
        }
        return Err(PluginError::Failed {
            plugin,
            command,
            status: status.to_string(),
            stderr: String::from_utf8_lossy(&err).to_string(),
        });
    }
    if inv.command == CniCommand::Del {
        return Ok((Value::Null, elapsed));
    }
    let v: Value = serde_json::from_str(&stdout).map_err(|e| PluginError::BadResult {
        plugin: plugin.clone(),
        command,
        why: format!(
            "{e} in {:?}",
            clean(&stdout.chars().take(200).collect::<String>())
        ),
    })?;
    // A plugin may print an error object and still exit 0.
    if let Some(code) = v.get("code").and_then(Value::as_i64) {
        return Err(PluginError::Cni {
            plugin,
            command,
            code,
            msg: v
                .get("msg")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            details: v
                .get("details")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        });
    }
    if !v.is_object() || v.get("cniVersion").is_none() {
        return Err(PluginError::BadResult {
            plugin,
            command,
            why: "no cniVersion in the result".into(),
        });
    }
    Ok((v, elapsed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_escapes_terminal_control() {
        assert_eq!(clean("a\nb\x1b[31m\u{202e}"), "a\\nb\\x1b[31m\\u{202e}");
        assert!(clean(&"x".repeat(5000)).ends_with("(3000 more bytes)"));
    }

    #[test]
    fn missing_plugin_names_the_path() {
        let e = find_plugin("no-such-plugin", &[PathBuf::from("/nonexistent")]).unwrap_err();
        let s = e.to_string();
        assert!(
            s.contains("\"no-such-plugin\" not found in /nonexistent"),
            "{s}"
        );
        assert!(s.contains("containernetworking-plugins"), "{s}");
    }
}
