//! `fabperf tune check | restore`: tuning profiles and the restore journal.

use fabperf_proto::text::escape;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Subcommand, Debug)]
pub enum TuneCmd {
    /// Check profile files and show what each would set (exit 2 when one is invalid).
    Check(CheckArgs),
    /// Put back the settings a tuning agent journaled in this network
    /// namespace and did not restore (it was killed, or the node crashed).
    Restore(RestoreArgs),
}

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Profile files (TOML).
    #[arg(required = true)]
    pub profiles: Vec<PathBuf>,
    /// Print the profiles as the JSON the runner sends to agents.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct RestoreArgs {
    /// The agent's state directory (its --state-dir). Default: /var/lib/fabperf
    /// for root, else $XDG_STATE_HOME/fabperf.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Move a journal that cannot be used (corrupt, not a regular file, not
    /// ours) aside instead of refusing; nothing is restored from it.
    #[arg(long)]
    pub discard: bool,
}

pub fn run(c: TuneCmd) -> anyhow::Result<ExitCode> {
    match c {
        TuneCmd::Check(a) => check(a),
        TuneCmd::Restore(a) => restore(a),
    }
}

fn check(a: CheckArgs) -> anyhow::Result<ExitCode> {
    let mut problems = Vec::new();
    for path in &a.profiles {
        match fabperf_tune::load_profile(path) {
            Err(errs) => problems.extend(errs),
            Ok(p) if a.json => println!("{}", serde_json::to_string(&p)?),
            Ok(p) => {
                println!(
                    "{}: profile {} ({} sysctl(s){}{}{}{}), hash {}",
                    path.display(),
                    p.name,
                    p.sysctl.len(),
                    if p.nic.is_empty() {
                        ""
                    } else {
                        ", NIC settings"
                    },
                    p.mtu.map(|m| format!(", MTU {m}")).unwrap_or_default(),
                    if p.irq.is_some() {
                        ", IRQ affinity"
                    } else {
                        ""
                    },
                    if p.is_empty() {
                        ", changes nothing"
                    } else {
                        ""
                    },
                    p.hash()
                );
                for (k, v) in &p.sysctl {
                    println!("  sysctl {k} = {v}");
                }
                for (k, v) in &p.nic.features {
                    println!("  nic {k} {}", if *v { "on" } else { "off" });
                }
                if let Some(r) = &p.nic.rings {
                    println!("  nic rings{}", set_values(&[("rx", r.rx), ("tx", r.tx)]));
                }
                if let Some(c) = &p.nic.channels {
                    println!(
                        "  nic channels{}",
                        set_values(&[("rx", c.rx), ("tx", c.tx), ("combined", c.combined)])
                    );
                }
                for (k, v) in &p.nic.coalesce {
                    println!("  nic coalesce {k} {v}");
                }
                if let Some(i) = &p.irq {
                    println!(
                        "  irq affinity {}{}",
                        i.cpus,
                        if i.spread { " (spread)" } else { "" }
                    );
                }
                for o in &p.outside {
                    println!("  not applied by fabperf: {o}");
                }
            }
        }
    }
    if problems.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("fabperf: error: {} problem(s):", problems.len());
    for p in &problems {
        eprintln!("  {}", escape(p));
    }
    Ok(ExitCode::from(2))
}

/// " rx 4096 tx 512" for the values a profile sets (the others are left as
/// they are).
fn set_values(v: &[(&str, Option<u32>)]) -> String {
    v.iter()
        .filter_map(|(k, v)| v.map(|v| format!(" {k} {v}")))
        .collect()
}

fn restore(a: RestoreArgs) -> anyhow::Result<ExitCode> {
    let dir = a
        .state_dir
        .unwrap_or_else(fabperf_tune::journal::default_state_dir);
    match fabperf_tune::tuner::restore_from_state(&dir, a.discard) {
        Ok(text) => {
            for l in text.lines() {
                println!("{}", escape(l));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            for l in e.lines() {
                eprintln!("fabperf: error: {}", escape(l));
            }
            Ok(ExitCode::FAILURE)
        }
    }
}
