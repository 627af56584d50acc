//! The environment a test's cells run under: the tuning `profiles` and
//! policy-rule counts (`policies`, `policy_conntrack`) of a test, and the
//! plan's `[policy]` target that applies the counts.

use super::*;

/// The tuning profiles the tests name, by profile name, with the file each
/// was read from (two files must not give one name two meanings).
pub(super) type ProfileFiles = BTreeMap<String, (fabperf_tune::Profile, PathBuf)>;

/// The environment dimensions of a test: each sweep point under each
/// profile (`profiles = [FILE, ...]`, relative to the plan) and each
/// policy-rule count (`policies = [0, 50, 200]`).
pub(super) fn env_dims(
    cx: &mut Diagnostics,
    t: &RawTest,
    name: &str,
    base_dir: &Path,
    profiles: &mut ProfileFiles,
    points: Vec<SweepPoint>,
) -> Vec<SweepPoint> {
    let mut names: Vec<Option<String>> = vec![None];
    if let Some(list) = &t.profiles {
        names.clear();
        if list.get_ref().is_empty() {
            cx.at(list.span(), "`profiles` is empty");
        }
        for f in list.get_ref() {
            let path = base_dir.join(f.get_ref());
            match fabperf_tune::load_profile(&path) {
                Err(errs) => {
                    for e in errs {
                        cx.at(f.span(), format!("test {name:?}: profile {}", e));
                    }
                }
                Ok(p) => {
                    if let Some((old, file)) = profiles.get(&p.name) {
                        if *old != p {
                            cx.at(
                                f.span(),
                                format!(
                                    "two different profiles are named {:?} ({} and {}); give each its own name",
                                    p.name,
                                    file.display(),
                                    path.display()
                                ),
                            );
                            continue;
                        }
                    }
                    if names.contains(&Some(p.name.clone())) {
                        cx.at(f.span(), format!("profile {:?} is listed twice", p.name));
                        continue;
                    }
                    names.push(Some(p.name.clone()));
                    profiles.insert(p.name.clone(), (p, path));
                }
            }
        }
    }
    let mut counts: Vec<Option<u32>> = vec![None];
    if let Some(list) = &t.policies {
        counts.clear();
        if list.get_ref().is_empty() {
            cx.at(list.span(), "`policies` is empty");
        }
        for n in list.get_ref() {
            let max = i64::from(fabperf_tune::policy::MAX_RULES);
            let Some(v) = cx.int_in(n, "policies", 0, max) else {
                continue;
            };
            if counts.contains(&Some(v as u32)) {
                cx.at(n.span(), format!("policies {v} is listed twice"));
            } else {
                counts.push(Some(v as u32));
            }
        }
    }
    let conntrack = match &t.policy_conntrack {
        Some(c) if t.policies.is_none() => {
            cx.at(c.span(), "`policy_conntrack` applies with `policies` only");
            false
        }
        Some(c) => *c.get_ref(),
        None => false,
    };
    let mut out = Vec::new();
    for prof in &names {
        for n in &counts {
            for p in &points {
                let mut q = p.clone();
                if let Some(pn) = prof {
                    q.dims.insert("profile".into(), json!(pn));
                }
                if let Some(n) = n {
                    q.dims.insert("policies".into(), json!(n));
                    if conntrack {
                        q.dims.insert("policy_conntrack".into(), json!(true));
                    }
                }
                q.env = CellEnv {
                    profile: prof.clone(),
                    policies: *n,
                    policy_conntrack: conntrack && n.is_some(),
                };
                out.push(q);
            }
        }
    }
    out
}

/// `[policy]`: `target = "agents"` (default) or `target = "command"` with
/// `command = ["argv", ...]` and `timeout`.
pub(super) fn policy_target(cx: &mut Diagnostics, raw: Option<&S<RawPolicy>>) -> PolicyTarget {
    let Some(r) = raw else {
        return PolicyTarget::Agents;
    };
    let span = r.span();
    let r = r.get_ref();
    let target = r
        .target
        .as_ref()
        .map(|t| t.get_ref().as_str())
        .unwrap_or("agents");
    match target {
        "agents" => {
            if let Some(c) = &r.command {
                cx.at(c.span(), "`command` applies to target = \"command\" only");
            }
            PolicyTarget::Agents
        }
        "command" => {
            let argv: Vec<String> = r
                .command
                .as_ref()
                .map(|c| c.get_ref().iter().map(|a| a.get_ref().clone()).collect())
                .unwrap_or_default();
            if argv.is_empty() || argv[0].is_empty() {
                cx.at(
                    r.command.as_ref().map_or(span.clone(), |c| c.span()),
                    "target = \"command\" needs `command = [\"program\", \"arg\", ...]` (run with FABPERF_POLICIES=N)",
                );
            }
            if argv.len() > 64 || argv.iter().any(|a| a.len() > 4096 || a.contains('\0')) {
                cx.at(
                    span.clone(),
                    "`command`: at most 64 arguments of 4096 bytes, no NUL",
                );
            }
            let timeout = match &r.timeout {
                None => 120.0,
                Some(t) => match parse_duration(t.get_ref()) {
                    Ok(s) if s > 0.0 => s,
                    Ok(_) => {
                        cx.at(t.span(), "timeout must be more than zero");
                        120.0
                    }
                    Err(e) => {
                        cx.at(t.span(), format!("timeout: {e}"));
                        120.0
                    }
                },
            };
            PolicyTarget::Command {
                argv,
                timeout: Duration::from_secs_f64(timeout),
            }
        }
        other => {
            cx.at(
                r.target.as_ref().map_or(span, |t| t.span()),
                format!("policy target {other:?}: one of agents, command"),
            );
            PolicyTarget::Agents
        }
    }
}
