//! The plan-wide keys: `name`, timeouts, retries, `token_file`, `baseline`;
//! the agents and tests are checked in their own files.

use super::*;

/// Check a parsed plan; every problem goes to `cx`.
pub(super) fn check(cx: &mut Diagnostics, raw: RawPlan, text: &str, base_dir: &Path) -> Plan {
    let name = match &raw.name {
        Some(n) if is_name(n.get_ref()) => n.get_ref().clone(),
        Some(n) => {
            cx.at(n.span(), format!("name {:?}: use letters, digits, '-', '_' and '.', starting with a letter or digit", n.get_ref()));
            String::new()
        }
        None => {
            cx.at(
                0..0,
                "the plan needs a `name = \"...\"` (its identity: a run is resumed by it)",
            );
            String::new()
        }
    };
    let secs =
        |cx: &mut Diagnostics, v: &Option<S<toml::Value>>, default: f64, what: &str| -> f64 {
            match v {
                None => default,
                Some(v) => match parse_duration(v.get_ref()) {
                    Ok(0.0) => {
                        cx.at(v.span(), format!("{what} must be more than zero"));
                        default
                    }
                    Ok(s) => s,
                    Err(e) => {
                        cx.at(v.span(), format!("{what}: {e}"));
                        default
                    }
                },
            }
        };
    let timeout = secs(cx, &raw.timeout, 10.0, "timeout");
    let retry_delay = secs(cx, &raw.retry_delay, 2.0, "retry_delay");
    let retries = match &raw.retries {
        None => 2,
        Some(r) => cx.int_in(r, "retries", 0, 20).map_or(2, |n| n as u32),
    };
    let token_file = raw.token_file.as_ref().map(|t| {
        let p = PathBuf::from(t.get_ref());
        if t.get_ref().is_empty() {
            cx.at(t.span(), "token_file is empty");
        }
        if p.is_absolute() {
            p
        } else {
            base_dir.join(p)
        }
    });

    let (agents, paths_declared) = check_agents(cx, &raw.agents);
    let baseline = raw.baseline.as_ref().map(|b| {
        if !paths_declared.contains(b.get_ref()) && !raw.agents.is_empty() {
            cx.at(
                b.span(),
                format!(
                    "baseline path {:?} has no agents; paths with agents: {}",
                    b.get_ref(),
                    join(&paths_declared)
                ),
            );
        }
        b.get_ref().clone()
    });

    let (tests, profiles) = check_tests(cx, &raw.tests, &paths_declared, base_dir);
    use sha2::Digest;
    let hash = crate::hex(&sha2::Sha256::digest(text.as_bytes()));
    let policy_target = policy_target(cx, raw.policy.as_ref());
    Plan {
        name,
        description: raw.description,
        baseline,
        token_file,
        timeout: Duration::from_secs_f64(timeout),
        retries,
        retry_delay: Duration::from_secs_f64(retry_delay),
        agents,
        tests,
        profiles: profiles.into_iter().map(|(k, (p, _))| (k, p)).collect(),
        policy_target,
        text: text.to_string(),
        hash,
    }
}
