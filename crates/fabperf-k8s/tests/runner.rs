//! The in-cluster runner: the run plan it generates parses and expands as
//! `fabperf run` will, and its Job/CronJob are what the docs promise (no API
//! permissions, Guaranteed QoS, restricted, the agents' tolerations, a
//! failure policy the API server accepts).

use fabperf_k8s::plan::{parse_plan, PathKind, Plan};
use fabperf_k8s::render;
use fabperf_k8s::runner::objects::{cron_job, job, plan_configmap, pvc, script};
use fabperf_k8s::runner::{RunnerPlan, Storage};
use fabperf_run::{Roster, RosterAgent};
use k8s_openapi::api::batch::v1::JobSpec;
use k8s_openapi::api::core::v1::PodSpec;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn load(name: &str) -> Plan {
    let text = std::fs::read_to_string(examples().join(name)).unwrap();
    parse_plan(&text, &format!("examples/{name}"), &examples()).unwrap()
}

/// The example plan with `extra` appended (a `[runner]` table).
fn example_with(extra: &str) -> Plan {
    let text = std::fs::read_to_string(examples().join("two-node-roce-ipoib.toml")).unwrap();
    parse_plan(&format!("{text}\n{extra}"), "plan.toml", &examples())
        .unwrap_or_else(|e| panic!("{e}"))
}

fn runner(p: &Plan) -> &RunnerPlan {
    p.runner.as_ref().expect("the plan has a runner")
}

/// Three agents on every path the run plan declares, as discovery would
/// find them (names from the agents' hellos).
fn roster(plan: &fabperf_run::Plan) -> Roster {
    let mut r = Roster::default();
    for (i, a) in plan.agents.iter().enumerate() {
        // A static agent (the service path's per-node Service) is one agent.
        let nodes: Vec<&str> = match &a.source {
            fabperf_run::plan::AgentSource::Static { name, .. } => vec![name.as_str()],
            fabperf_run::plan::AgentSource::Dns { .. } => vec!["node-a", "node-b", "node-c"],
        };
        for (j, node) in nodes.iter().enumerate() {
            let addr: SocketAddr = format!("10.0.{i}.{}:5301", j + 1).parse().unwrap();
            r.insert(RosterAgent {
                name: node.to_string(),
                path: a.path.clone(),
                addr,
                test_addr: addr,
                hello: serde_json::json!({}),
                reachable: true,
            })
            .unwrap();
        }
    }
    r
}

fn parse_run_plan(r: &RunnerPlan) -> fabperf_run::Plan {
    fabperf_run::plan::parse(&r.run_plan, "run plan", Path::new("/"))
        .unwrap_or_else(|e| panic!("{e}\n{}", r.run_plan))
}

fn pod_spec(spec: &JobSpec) -> &PodSpec {
    spec.template.spec.as_ref().unwrap()
}

#[test]
fn default_run_plan_parses_and_expands_over_every_agent_path() {
    let plan = load("two-node-roce-ipoib.toml");
    let r = runner(&plan);
    let rp = parse_run_plan(r);
    assert_eq!(rp.name, "k8s-fabperf");
    assert_eq!(rp.baseline.as_deref(), Some("host"));
    assert_eq!(
        rp.token_file.as_deref(),
        Some(Path::new("/etc/fabperf/token"))
    );
    // One DNS entry per path with agents of its own, the agents' control
    // port, the path label; the service path: each node's agent through its
    // own single-endpoint Service, named by its node.
    let agents: Vec<(String, String)> = rp
        .agents
        .iter()
        .map(|a| match &a.source {
            fabperf_run::plan::AgentSource::Dns { name, port } => {
                assert_eq!(*port, 5301);
                (name.clone(), a.path.clone())
            }
            fabperf_run::plan::AgentSource::Static { name, addr } => {
                assert_eq!(a.path, "service");
                assert_eq!(*addr, format!("fabperf-svc-{name}.fabperf.svc:5301"));
                (addr.clone(), a.path.clone())
            }
        })
        .collect();
    assert_eq!(
        agents,
        [
            ("fabperf-host.fabperf.svc".to_string(), "host".to_string()),
            ("fabperf-pod.fabperf.svc".into(), "pod".into()),
            (
                "fabperf-svc-node-a.fabperf.svc:5301".into(),
                "service".into()
            ),
            (
                "fabperf-svc-node-b.fabperf.svc:5301".into(),
                "service".into()
            ),
            ("fabperf-ipoib.fabperf.svc".into(), "ipoib".into()),
            ("fabperf-roce.fabperf.svc".into(), "roce".into()),
        ]
    );
    // The names are the headless Services render writes.
    let rendered = render(&plan).unwrap();
    for p in ["host", "pod", "ipoib", "roce"] {
        let f = rendered
            .manifests
            .iter()
            .find(|f| f.rel_path == format!("20-agent-{p}.yaml"))
            .unwrap();
        // A headless Service of that name: DNS answers with every agent.
        let headless = f.content.split("\n---\n").any(|doc| {
            serde_norway::from_str::<k8s_openapi::api::core::v1::Service>(doc)
                .ok()
                .filter(|s| s.metadata.name.as_deref() == Some(&format!("fabperf-{p}")))
                .and_then(|s| s.spec?.cluster_ip)
                .as_deref()
                == Some("None")
        });
        assert!(headless, "{p}: no headless Service fabperf-{p}");
    }
    // Default tests: TCP on the socket paths, RDMA on RoCE, all mesh.
    let tests: Vec<(String, Vec<String>, &str)> = rp
        .tests
        .iter()
        .map(|t| (t.kind.name().to_string(), t.paths.clone(), t.pattern.name()))
        .collect();
    let sock = vec![
        "host".to_string(),
        "pod".into(),
        "service".into(),
        "ipoib".into(),
    ];
    assert_eq!(
        tests,
        [
            ("tcp-bw".to_string(), sock.clone(), "mesh"),
            ("tcp-lat".into(), sock, "mesh"),
            ("rdma-bw".into(), vec!["roce".to_string()], "mesh"),
            ("rdma-lat".into(), vec!["roce".to_string()], "mesh"),
        ]
    );
    let cells = fabperf_run::expand(&rp, &roster(&rp)).unwrap();
    // 3 nodes: 6 ordered pairs per mesh (both directions, the default), per
    // path: tcp 2 tests x 3 paths, rdma 2 x 1; the service path has the
    // example's 2 nodes: 2 ordered pairs per test.
    assert_eq!(cells.len(), 6 * (2 * 3 + 2) + 2 * 2);
    for c in &cells {
        assert_eq!(c.kind.starts_with("rdma"), c.path == "roce", "{c:?}");
    }
    assert_eq!(cells.iter().filter(|c| c.path == "service").count(), 4);
    assert!(r.mesh);
    // The ConfigMap holds exactly that plan.
    let cm = plan_configmap(&plan, r);
    assert_eq!(cm.data.unwrap()["plan.toml"], r.run_plan);
}

#[test]
fn custom_tests_parse_and_expand() {
    let plan = load("runner-nightly.toml");
    let r = runner(&plan);
    let rp = parse_run_plan(r);
    assert_eq!(rp.name, "nightly-fabric");
    assert_eq!(rp.retries, 1);
    let names: Vec<&str> = rp.tests.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["tcp-bw", "tcp-lat", "rdma-bw", "rdma-lat"]);
    // tcp-bw: 2 streams x 3 paths x 6 ordered pairs of 3 nodes.
    let cells = fabperf_run::expand(&rp, &roster(&rp)).unwrap();
    let n = |t: &str| cells.iter().filter(|c| c.test == t).count();
    assert_eq!(n("tcp-bw"), 2 * 3 * 6);
    // The others: meshes measure both directions by default.
    assert_eq!(n("tcp-lat"), 2 * 6);
    assert_eq!(n("rdma-bw"), 2 * 6);
    assert_eq!(n("rdma-lat"), 6);
    // The user's keys in the user's order, copied as written.
    assert!(
        r.run_plan.contains(
            "[[tests]]\nname = \"tcp-bw\"\nkind = \"tcp-bw\"\npaths = [\"host\", \"pod\", \"roce\"]\npattern = \"mesh\"\nordered = true\nstreams = [1, 8]\nduration = \"10s\"\n"
        ),
        "{}",
        r.run_plan
    );
}

#[test]
fn ipoib_with_sriov_vfs_may_run_rdma_tests() {
    let text = std::fs::read_to_string(examples().join("sriov-roce-ib.toml")).unwrap();
    let text = format!(
        "{text}\n[runner]\n[[runner.tests]]\nkind = \"rdma-bw\"\npaths = [\"ipoib\", \"roce\"]\n"
    );
    let plan = parse_plan(&text, "plan.toml", &examples()).unwrap_or_else(|e| panic!("{e}"));
    let rp = parse_run_plan(runner(&plan));
    assert_eq!(rp.tests[0].paths, ["ipoib", "roce"]);
    // No host path: no baseline.
    assert_eq!(rp.baseline, None);
    assert!(runner(&plan)
        .run_plan
        .contains("dns = \"fabperf-ipoib.fabperf-sriov.svc\""));
}

#[test]
fn the_job_needs_no_permissions_no_attachments_and_is_guaranteed() {
    let plan = load("two-node-roce-ipoib.toml");
    let r = runner(&plan);
    let j = job(&plan, r);
    assert_eq!(j.metadata.name.as_deref(), Some("fabperf-run"));
    assert_eq!(j.metadata.namespace.as_deref(), Some("fabperf"));
    let spec = j.spec.as_ref().unwrap();
    let pod = pod_spec(spec);
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    assert_eq!(pod.service_account_name.as_deref(), Some("fabperf-runner"));
    // Its token is mounted for its Role (the run Lease), nothing more.
    assert_eq!(pod.automount_service_account_token, Some(true));
    assert_eq!(pod.enable_service_links, Some(false));
    // Nothing the agents need: no host network, no secondary network, no
    // RDMA device, no capabilities.
    assert_eq!(pod.host_network, None);
    let meta = spec.template.metadata.as_ref().unwrap();
    assert!(meta.annotations.is_none());
    assert_eq!(pod.containers.len(), 1);
    let c = &pod.containers[0];
    let res = c.resources.as_ref().unwrap();
    assert_eq!(
        res.requests, res.limits,
        "Guaranteed QoS: requests = limits"
    );
    let limits = res.limits.as_ref().unwrap();
    assert_eq!(
        limits.keys().collect::<Vec<_>>(),
        ["cpu", "memory"],
        "no RDMA or other extended resource"
    );
    assert_eq!(limits["cpu"].0, "1");
    assert_eq!(limits["memory"].0, "512Mi");
    // Restricted: non-root, no privilege escalation, every capability
    // dropped, read-only root, RuntimeDefault seccomp.
    let sc = c.security_context.as_ref().unwrap();
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    let caps = sc.capabilities.as_ref().unwrap();
    assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_string()][..]));
    assert_eq!(caps.add, None);
    let psc = pod.security_context.as_ref().unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(psc.run_as_user, Some(65532));
    assert_eq!(psc.fs_group, Some(65532));
    assert_eq!(
        psc.seccomp_profile.as_ref().unwrap().type_,
        "RuntimeDefault"
    );
    // Writable places: the data volume and /tmp, both volumes.
    let mounts: BTreeMap<String, (String, Option<bool>)> = c
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .map(|m| (m.mount_path.clone(), (m.name.clone(), m.read_only)))
        .collect();
    assert_eq!(mounts["/data"].0, "data");
    assert_eq!(mounts["/tmp"].0, "tmp");
    assert_eq!(mounts["/etc/fabperf"], ("token".into(), Some(true)));
    assert_eq!(mounts["/etc/fabperf-run"], ("plan".into(), Some(true)));
    let vols: BTreeMap<String, _> = pod
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .map(|v| (v.name.clone(), v.clone()))
        .collect();
    assert_eq!(
        vols["data"]
            .empty_dir
            .as_ref()
            .unwrap()
            .size_limit
            .as_ref()
            .unwrap()
            .0,
        "1Gi"
    );
    assert_eq!(
        vols["token"]
            .secret
            .as_ref()
            .unwrap()
            .secret_name
            .as_deref(),
        Some("fabperf-agent-token")
    );
    assert_eq!(
        vols["plan"].config_map.as_ref().unwrap().name,
        "fabperf-run-plan"
    );
    // The same image and tolerations as the agents.
    let ds = fabperf_k8s::objects::agent_daemonset(&plan, PathKind::Pod);
    let agent_pod = ds.spec.template.spec.unwrap();
    assert_eq!(c.image, agent_pod.containers[0].image);
    assert_eq!(pod.tolerations, agent_pod.tolerations);
    assert!(pod.tolerations.is_some());
    // It prefers nodes not under test (it needs no NIC and would share CPUs).
    let pref = pod
        .affinity
        .as_ref()
        .unwrap()
        .node_affinity
        .as_ref()
        .unwrap()
        .preferred_during_scheduling_ignored_during_execution
        .as_ref()
        .unwrap();
    let e = &pref[0].preference.match_fields.as_ref().unwrap()[0];
    assert_eq!(
        (e.key.as_str(), e.operator.as_str()),
        ("metadata.name", "NotIn")
    );
    assert_eq!(e.values.as_deref().unwrap(), ["node-a", "node-b"]);
    assert!(pod.node_selector.is_none(), "the runner needs no NIC");
    // The store is named by the Job (downward API labels).
    let env: BTreeMap<String, String> = c
        .env
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| {
            let v = e.value.clone().unwrap_or_else(|| {
                e.value_from
                    .as_ref()
                    .unwrap()
                    .field_ref
                    .as_ref()
                    .unwrap()
                    .field_path
                    .clone()
            });
            (e.name.clone(), v)
        })
        .collect();
    assert_eq!(
        env["JOB_UID"],
        "metadata.labels['batch.kubernetes.io/controller-uid']"
    );
    assert_eq!(
        env["JOB_NAME"],
        "metadata.labels['batch.kubernetes.io/job-name']"
    );
    assert_eq!(env["FABPERF_RUN_PLAN"], "/etc/fabperf-run/plan.toml");
    assert!(!env.contains_key("FABPERF_PUSHGATEWAY"));
}

/// The API server's podFailurePolicy rules (pkg/apis/batch/validation,
/// validatePodFailurePolicy*): kubernetes-validate's schemas do not check them.
fn check_pod_failure_policy(spec: &JobSpec) {
    let pod = pod_spec(spec);
    let names: BTreeSet<&str> = pod.containers.iter().map(|c| c.name.as_str()).collect();
    let pfp = spec.pod_failure_policy.as_ref().unwrap();
    assert!(pfp.rules.len() <= 20);
    assert_eq!(
        pod.restart_policy.as_deref(),
        Some("Never"),
        "podFailurePolicy needs restartPolicy Never"
    );
    for rule in &pfp.rules {
        assert!(["Count", "FailJob", "Ignore"].contains(&rule.action.as_str()));
        assert!(
            rule.on_exit_codes.is_some() != rule.on_pod_conditions.is_some(),
            "exactly one of onExitCodes and onPodConditions"
        );
        if let Some(x) = &rule.on_exit_codes {
            assert!(["In", "NotIn"].contains(&x.operator.as_str()));
            if let Some(n) = &x.container_name {
                assert!(names.contains(n.as_str()), "containerName {n}");
            }
            assert!(!x.values.is_empty() && x.values.len() <= 255);
            let mut sorted = x.values.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted, x.values, "ordered and unique");
            if x.operator == "In" {
                assert!(!x.values.contains(&0), "0 is not allowed with In");
            }
        }
        for c in rule.on_pod_conditions.iter().flatten() {
            assert!(["True", "False", "Unknown"].contains(&c.status.as_deref().unwrap()));
        }
    }
}

#[test]
fn the_job_fails_without_retry_on_results_and_retries_on_disruption() {
    let plan = load("two-node-roce-ipoib.toml");
    let spec = job(&plan, runner(&plan)).spec.unwrap();
    check_pod_failure_policy(&spec);
    let pfp = spec.pod_failure_policy.as_ref().unwrap();
    let fail: Vec<i32> = pfp
        .rules
        .iter()
        .filter(|r| r.action == "FailJob")
        .flat_map(|r| r.on_exit_codes.as_ref().unwrap().values.clone())
        .collect();
    // 1 cells failed, 2 bad plan, 3 export failed, 4 another run holds the
    // Lease: not retried; 5 (the API could not be asked), 130 (interrupted)
    // and crashes are.
    assert_eq!(fail, [1, 2, 3, 4]);
    let ignore = &pfp.rules[0];
    assert_eq!(ignore.action, "Ignore");
    assert_eq!(
        ignore.on_pod_conditions.as_ref().unwrap()[0].type_,
        "DisruptionTarget"
    );
    assert_eq!(spec.backoff_limit, Some(2));
    assert_eq!(spec.active_deadline_seconds, None);
    assert!(spec.selector.is_none());
}

#[test]
fn pvc_cronjob_pushgateway_and_openmetrics_file() {
    let plan = load("runner-nightly.toml");
    let r = runner(&plan);
    assert_eq!(
        r.storage,
        Storage::Pvc {
            storage_class: None
        }
    );
    let claim = pvc(&plan, r).unwrap();
    let cs = claim.spec.unwrap();
    assert_eq!(cs.access_modes.unwrap(), ["ReadWriteOnce"]);
    assert_eq!(cs.resources.unwrap().requests.unwrap()["storage"].0, "2Gi");
    let j = job(&plan, r);
    let spec = j.spec.as_ref().unwrap();
    assert_eq!(spec.active_deadline_seconds, Some(4 * 3600));
    let pod = pod_spec(spec);
    let data = pod
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == "data")
        .unwrap();
    assert_eq!(
        data.persistent_volume_claim.as_ref().unwrap().claim_name,
        "fabperf-results"
    );
    assert!(data.empty_dir.is_none());
    let c = &pod.containers[0];
    let push = c
        .env
        .as_ref()
        .unwrap()
        .iter()
        .find(|e| e.name == "FABPERF_PUSHGATEWAY")
        .unwrap();
    assert_eq!(
        push.value.as_deref(),
        Some("http://pushgateway.monitoring.svc:9091")
    );
    let sh = &c.command.as_ref().unwrap()[2];
    assert!(sh.contains("fabperf export --db \"$db\" --format openmetrics -o \"$om\""));
    assert!(sh.contains("--format openmetrics --push \"$FABPERF_PUSHGATEWAY\""));
    assert!(sh.contains("fabperf export --db \"$db\" --format jsonl"));
    // The CronJob: the same Job spec on a schedule, never two at once.
    let cj = cron_job(&plan, r).unwrap();
    assert_eq!(cj.spec.schedule, "30 2 * * *");
    assert_eq!(cj.spec.time_zone.as_deref(), Some("Etc/UTC"));
    assert_eq!(cj.spec.concurrency_policy.as_deref(), Some("Forbid"));
    let tmpl = cj.spec.job_template.spec.unwrap();
    assert_eq!(&tmpl, spec, "the CronJob runs the Job's spec");
    assert!(
        tmpl.selector.is_none(),
        "a jobTemplate's selector is generated"
    );
    check_pod_failure_policy(&tmpl);
    // Without a schedule: no CronJob.
    let plain = load("two-node-roce-ipoib.toml");
    assert!(cron_job(&plain, runner(&plain)).is_none());
    assert!(pvc(&plain, runner(&plain)).is_none());
}

#[test]
fn rendered_files_and_no_role_anywhere() {
    for name in [
        "two-node-roce-ipoib.toml",
        "runner-nightly.toml",
        "sriov-roce-ib.toml",
        "host-pod-calico-ipip.toml",
        "roce-host-device-wireguard.toml",
    ] {
        let plan = load(name);
        let r = render(&plan).unwrap();
        let run: Vec<&str> = r
            .manifests
            .iter()
            .filter(|f| f.rel_path.starts_with("run/"))
            .map(|f| f.rel_path.as_str())
            .collect();
        let mut want = vec!["run/00-runner.yaml", "run/10-job.yaml"];
        if runner(&plan).schedule.is_some() {
            want.push("run/20-cronjob.yaml");
        }
        assert_eq!(run, want, "{name}");
        for f in r.manifests.iter().chain(&r.device_plugin) {
            for kind in ["ClusterRole", "ClusterRoleBinding"] {
                assert!(
                    !f.content.contains(&format!("\nkind: {kind}\n")),
                    "{name}: {} has a {kind}",
                    f.rel_path
                );
            }
            // The one Role: the runner's, in its namespace, for its Lease.
            if f.content.contains("\nkind: Role\n") {
                assert!(
                    f.rel_path == "run/00-runner.yaml" || f.rel_path == "31-policy-scale-rbac.yaml",
                    "{name}: {} has a Role",
                    f.rel_path
                );
            }
            if f.rel_path.ends_with(".yaml") {
                assert!(f.content.starts_with(fabperf_k8s::render::GENERATED_MARK));
            }
        }
        // Every path has an agent entry (service through its per-node
        // Services).
        let rp = parse_run_plan(runner(&plan));
        let declared: BTreeSet<&str> = rp.agents.iter().map(|a| a.path.as_str()).collect();
        let want: BTreeSet<&str> = plan.paths.iter().map(|p| p.name()).collect();
        assert_eq!(declared, want, "{name}");
    }
}

#[test]
fn runner_options() {
    let plan = example_with(
        r#"[runner]
cpu = 2
memory = "1Gi"
storage = "pvc"
storage_class = "local-nvme"
cluster_domain = "cluster.example"
backoff_limit = 0
node_selector = { "node-role.kubernetes.io/infra" = "" }
export_stdout = false
timeout = "20s"
"#,
    );
    let r = runner(&plan);
    let rp = parse_run_plan(r);
    assert_eq!(rp.timeout.as_secs(), 20);
    assert!(r
        .run_plan
        .contains("dns = \"fabperf-pod.fabperf.svc.cluster.example\""));
    let j = job(&plan, r).spec.unwrap();
    assert_eq!(j.backoff_limit, Some(0));
    let pod = pod_spec(&j);
    assert_eq!(
        pod.node_selector.as_ref().unwrap()["node-role.kubernetes.io/infra"],
        ""
    );
    let lim = pod.containers[0]
        .resources
        .as_ref()
        .unwrap()
        .limits
        .clone()
        .unwrap();
    assert_eq!(
        (lim["cpu"].0.as_str(), lim["memory"].0.as_str()),
        ("2", "1024Mi")
    );
    assert_eq!(
        pvc(&plan, r)
            .unwrap()
            .spec
            .unwrap()
            .storage_class_name
            .as_deref(),
        Some("local-nvme")
    );
    let sh = script(r);
    assert!(!sh.contains("--format jsonl"), "{sh}");
    assert!(!sh.contains("openmetrics"), "{sh}");

    // Node names instead of labels: prefer the other nodes by name
    // (matchFields metadata.name, as the agents are pinned).
    let text = std::fs::read_to_string(examples().join("roce-host-device-wireguard.toml")).unwrap();
    let plan = parse_plan(&text, "p.toml", &examples()).unwrap();
    let pod = pod_spec(job(&plan, runner(&plan)).spec.as_ref().unwrap()).clone();
    let e = &pod
        .affinity
        .unwrap()
        .node_affinity
        .unwrap()
        .preferred_during_scheduling_ignored_during_execution
        .unwrap()[0]
        .preference
        .match_fields
        .clone()
        .unwrap()[0];
    assert_eq!(
        (e.key.as_str(), e.operator.as_str()),
        ("metadata.name", "NotIn")
    );
    assert_eq!(e.values.as_deref().unwrap(), ["node-a", "node-b"]);
    // `tolerations = []` in the plan: none for the runner either.
    assert!(pod.tolerations.is_none());
    assert!(runner(&plan).run_plan.contains("port = 15301"));

    // Disabled: no runner objects.
    let plan = example_with("[runner]\nenabled = false\n");
    assert!(plan.runner.is_none());
    let r = render(&plan).unwrap();
    assert!(r.manifests.iter().all(|f| !f.rel_path.starts_with("run/")));
}
