//! The runner's Kubernetes objects (typed, k8s-openapi, Kubernetes 1.37):
//! ServiceAccount, the run plan ConfigMap, the optional PVC, the Job and the
//! optional CronJob.

use super::{
    RunnerPlan, Storage, DATA_DIR, JOB_NAME, PLAN_CONFIGMAP, PLAN_DIR, PLAN_KEY, PVC_NAME,
    RUNNER_NAME,
};
use crate::objects::{self as agent, field_env, value_env, TOKEN_DIR, TOKEN_KEY, TOKEN_SECRET};
use crate::plan::Plan;
use k8s_openapi::api::batch::v1::{
    CronJob, CronJobSpec, Job, JobSpec, JobTemplateSpec, PodFailurePolicy,
    PodFailurePolicyOnExitCodesRequirement, PodFailurePolicyOnPodConditionsPattern,
    PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMap, ConfigMapVolumeSource, Container, EmptyDirVolumeSource,
    KeyToPath, NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, PodSecurityContext, PodSpec,
    PodTemplateSpec, PreferredSchedulingTerm, ResourceRequirements, SeccompProfile,
    SecretVolumeSource, SecurityContext, ServiceAccount, Volume, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;

/// Exit status of the runner when every cell passed but an export failed.
pub const EXIT_EXPORT_FAILED: i32 = 3;
/// Exit status of `fabperf k8s lease` when another run holds the Lease.
pub const EXIT_LEASE_HELD: i32 = 4;
/// `fabperf run`'s exit statuses the Job must not retry: 1 (cells failed:
/// the run is complete, its failures are results), 2 (bad plan), and the
/// runner's own 3 (export failed after a complete run) and 4 (another run
/// holds the Lease: another attempt would find it held too).
pub const NO_RETRY_EXIT_CODES: [i32; 4] = [1, 2, EXIT_EXPORT_FAILED, EXIT_LEASE_HELD];
/// Seconds the runner has after SIGTERM to abort the running cells and
/// export what it has.
pub const GRACE_SECONDS: i64 = 60;
/// The runner's uid (the image's non-root user).
pub const RUNNER_UID: i64 = agent::AGENT_UID;

fn labels() -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "app.kubernetes.io/name".to_string(),
            RUNNER_NAME.to_string(),
        ),
        (
            "app.kubernetes.io/component".to_string(),
            "runner".to_string(),
        ),
        (
            "app.kubernetes.io/part-of".to_string(),
            "fabperf".to_string(),
        ),
        (
            "app.kubernetes.io/managed-by".to_string(),
            "fabperf".to_string(),
        ),
    ])
}

fn meta(name: &str, plan: &Plan) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(plan.namespace.clone()),
        labels: Some(labels()),
        ..Default::default()
    }
}

/// The runner's identity. Its token is mounted for its Role: its run Lease
/// (and the policy-scale NetworkPolicies when a test sweeps `policies`), in
/// its namespace only.
pub fn service_account(plan: &Plan) -> ServiceAccount {
    ServiceAccount {
        metadata: meta(RUNNER_NAME, plan),
        automount_service_account_token: Some(true),
        ..Default::default()
    }
}

/// The runner's Role and RoleBinding: get/create/update Leases (create
/// cannot be limited by name; get and update could, but the Lease may be
/// named anything on the command line), and with `policy_api` manage
/// NetworkPolicies. Nothing cluster-scoped.
pub fn rbac(plan: &Plan, r: &RunnerPlan) -> (Role, RoleBinding) {
    let mut rules = vec![PolicyRule {
        api_groups: Some(vec!["coordination.k8s.io".into()]),
        resources: Some(vec!["leases".into()]),
        verbs: ["get", "create", "update"].map(String::from).to_vec(),
        ..Default::default()
    }];
    if r.policy_api {
        rules.push(PolicyRule {
            api_groups: Some(vec!["networking.k8s.io".into()]),
            resources: Some(vec!["networkpolicies".into()]),
            verbs: ["get", "list", "create", "delete"]
                .map(String::from)
                .to_vec(),
            ..Default::default()
        });
    }
    let role = Role {
        metadata: meta(RUNNER_NAME, plan),
        rules: Some(rules),
    };
    let binding = RoleBinding {
        metadata: meta(RUNNER_NAME, plan),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: RUNNER_NAME.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: RUNNER_NAME.into(),
            namespace: Some(plan.namespace.clone()),
            api_group: None,
        }]),
    };
    (role, binding)
}

/// The run plan the Job runs.
pub fn plan_configmap(plan: &Plan, r: &RunnerPlan) -> ConfigMap {
    ConfigMap {
        metadata: meta(PLAN_CONFIGMAP, plan),
        data: Some(BTreeMap::from([(PLAN_KEY.to_string(), r.run_plan.clone())])),
        ..Default::default()
    }
}

/// The results PVC (`storage = "pvc"`).
pub fn pvc(plan: &Plan, r: &RunnerPlan) -> Option<PersistentVolumeClaim> {
    let Storage::Pvc { storage_class } = &r.storage else {
        return None;
    };
    Some(PersistentVolumeClaim {
        metadata: meta(PVC_NAME, plan),
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: storage_class.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    Quantity(r.storage_size.clone()),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The runner's shell script (POSIX sh, the image's /bin/sh): run the plan
/// into a store of this Job's own (a retried pod of the same Job resumes
/// it, a new Job starts a new one), pass SIGTERM on to `fabperf run` so it
/// aborts the running cells and keeps what it finished, then print the mesh
/// summary and export. Its exit status is `fabperf run`'s, or
/// EXIT_EXPORT_FAILED when the run passed but an export failed.
pub fn script(r: &RunnerPlan) -> String {
    let mut s = vec![
        "set -u".to_string(),
        "uid=\"${JOB_UID:-local}\"".into(),
        "db=\"$FABPERF_DATA/${JOB_NAME:-fabperf-run}-${uid%%-*}.db\"".into(),
        "echo \"fabperf-runner: job ${JOB_NAME:-?} on node ${NODE_NAME:-?}: fabperf run $FABPERF_RUN_PLAN --db $db\"".into(),
        // The namespace's run Lease around the run: a second run at once
        // (a one-off Job beside the CronJob's) waits or exits 4 naming the
        // holder, instead of finding the agents busy.
        "fabperf k8s lease --wait \"$FABPERF_LEASE_WAIT\" -- fabperf run \"$FABPERF_RUN_PLAN\" --db \"$db\" --plain &".into(),
        "pid=$!".into(),
        "trap 'kill -TERM \"$pid\" 2>/dev/null' TERM INT".into(),
        "rc=0".into(),
        "wait \"$pid\" || rc=$?".into(),
        // A trapped signal ends `wait` early: wait again for the run's own status.
        "while kill -0 \"$pid\" 2>/dev/null; do rc=0; wait \"$pid\" || rc=$?; done".into(),
        "trap - TERM INT".into(),
        "echo \"fabperf-runner: fabperf run exited with status $rc\"".into(),
        format!("if [ \"$rc\" -eq {EXIT_LEASE_HELD} ] || [ \"$rc\" -eq 5 ]; then exit \"$rc\"; fi"),
        "if [ ! -s \"$db\" ]; then echo \"fabperf-runner: no results store $db; nothing to export\" >&2; exit \"$rc\"; fi".into(),
        "failed=0".into(),
    ];
    if r.mesh {
        s.push("echo \"==> mesh summary\"".into());
        s.push(
            "fabperf mesh-summary --db \"$db\" || echo \"fabperf-runner: no mesh summary\" >&2"
                .into(),
        );
    }
    if r.export_stdout {
        s.push("echo \"==> measurements (JSON Lines, one per line)\"".into());
        s.push("fabperf export --db \"$db\" --format jsonl || failed=1".into());
    }
    if r.openmetrics_file {
        s.push("om=\"${db%.db}.prom\"".into());
        s.push("if fabperf export --db \"$db\" --format openmetrics -o \"$om\"; then echo \"fabperf-runner: OpenMetrics in $om\"; else failed=1; fi".into());
    }
    if r.pushgateway.is_some() {
        s.push("if fabperf export --db \"$db\" --format openmetrics --push \"$FABPERF_PUSHGATEWAY\"; then echo \"fabperf-runner: pushed to $FABPERF_PUSHGATEWAY\"; else failed=1; fi".into());
    }
    s.push(format!(
        "if [ \"$rc\" -eq 0 ] && [ \"$failed\" -ne 0 ]; then echo \"fabperf-runner: an export failed\" >&2; rc={EXIT_EXPORT_FAILED}; fi"
    ));
    s.push("echo \"fabperf-runner: done, exit status $rc\"".into());
    s.push("exit \"$rc\"".into());
    let mut out = s.join("\n");
    out.push('\n');
    out
}

/// Prefer nodes that are not under test: the runner needs no hardware, and
/// on a test node it would share CPUs with an agent. Falls back to them when
/// there is nothing else (tolerations as the agents').
fn affinity(plan: &Plan) -> Option<Affinity> {
    let exprs: Vec<NodeSelectorRequirement> = plan
        .node_selector
        .iter()
        .map(|(k, v)| NodeSelectorRequirement {
            key: k.clone(),
            operator: "NotIn".into(),
            values: Some(vec![v.clone()]),
        })
        .collect();
    let names = plan.agent_nodes();
    if exprs.is_empty() && names.is_empty() {
        return None;
    }
    Some(Affinity {
        node_affinity: Some(NodeAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![
                PreferredSchedulingTerm {
                    weight: 100,
                    preference: NodeSelectorTerm {
                        match_expressions: (!exprs.is_empty()).then_some(exprs),
                        match_fields: (!names.is_empty())
                            .then(|| vec![agent::name_requirement(names, "NotIn")]),
                    },
                },
            ]),
            ..Default::default()
        }),
        ..Default::default()
    })
}

fn container(plan: &Plan, r: &RunnerPlan) -> Container {
    let mut env = vec![
        // The Job's name and uid name the store: a retried pod of the same
        // Job resumes its run, a new Job (or CronJob run) starts its own.
        field_env(
            "JOB_NAME",
            "metadata.labels['batch.kubernetes.io/job-name']",
        ),
        field_env(
            "JOB_UID",
            "metadata.labels['batch.kubernetes.io/controller-uid']",
        ),
        field_env("NODE_NAME", "spec.nodeName"),
        // Who holds the run Lease, and where.
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_NAMESPACE", "metadata.namespace"),
        value_env("FABPERF_LEASE_WAIT", &r.lease_wait_s.to_string()),
        value_env("FABPERF_RUN_PLAN", &format!("{PLAN_DIR}/{PLAN_KEY}")),
        value_env("FABPERF_DATA", DATA_DIR),
        value_env("TMPDIR", "/tmp"),
    ];
    if let Some(url) = &r.pushgateway {
        env.push(value_env("FABPERF_PUSHGATEWAY", url));
    }
    // Guaranteed QoS: requests = limits for every resource.
    let limits = BTreeMap::from([
        ("cpu".to_string(), Quantity(r.cpu.to_string())),
        (
            "memory".to_string(),
            Quantity(format!("{}Mi", r.memory_mib)),
        ),
    ]);
    Container {
        name: "runner".into(),
        image: Some(plan.image.clone()),
        image_pull_policy: Some(plan.image_pull_policy.clone()),
        command: Some(vec!["/bin/sh".into(), "-c".into(), script(r)]),
        env: Some(env),
        resources: Some(ResourceRequirements {
            requests: Some(limits.clone()),
            limits: Some(limits),
            ..Default::default()
        }),
        security_context: Some(SecurityContext {
            run_as_non_root: Some(true),
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Default::default()
            }),
            ..Default::default()
        }),
        volume_mounts: Some(vec![
            VolumeMount {
                name: "plan".into(),
                mount_path: PLAN_DIR.into(),
                read_only: Some(true),
                ..Default::default()
            },
            VolumeMount {
                name: "token".into(),
                mount_path: TOKEN_DIR.into(),
                read_only: Some(true),
                ..Default::default()
            },
            VolumeMount {
                name: "data".into(),
                mount_path: DATA_DIR.into(),
                ..Default::default()
            },
            VolumeMount {
                name: "tmp".into(),
                mount_path: "/tmp".into(),
                ..Default::default()
            },
        ]),
        ..Default::default()
    }
}

fn volumes(r: &RunnerPlan) -> Vec<Volume> {
    let data = match &r.storage {
        Storage::EmptyDir => Volume {
            name: "data".into(),
            empty_dir: Some(EmptyDirVolumeSource {
                size_limit: Some(Quantity(r.storage_size.clone())),
                ..Default::default()
            }),
            ..Default::default()
        },
        Storage::Pvc { .. } => Volume {
            name: "data".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: PVC_NAME.into(),
                ..Default::default()
            }),
            ..Default::default()
        },
    };
    vec![
        Volume {
            name: "plan".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: PLAN_CONFIGMAP.into(),
                items: Some(vec![KeyToPath {
                    key: PLAN_KEY.into(),
                    path: PLAN_KEY.into(),
                    ..Default::default()
                }]),
                default_mode: Some(0o444),
                ..Default::default()
            }),
            ..Default::default()
        },
        Volume {
            name: "token".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(TOKEN_SECRET.into()),
                items: Some(vec![KeyToPath {
                    key: TOKEN_KEY.into(),
                    path: TOKEN_KEY.into(),
                    ..Default::default()
                }]),
                default_mode: Some(0o440),
                ..Default::default()
            }),
            ..Default::default()
        },
        data,
        Volume {
            name: "tmp".into(),
            empty_dir: Some(EmptyDirVolumeSource {
                size_limit: Some(Quantity("64Mi".into())),
                ..Default::default()
            }),
            ..Default::default()
        },
    ]
}

/// The Job spec shared by the Job and the CronJob's template.
pub fn job_spec(plan: &Plan, r: &RunnerPlan) -> JobSpec {
    JobSpec {
        backoff_limit: Some(r.backoff_limit),
        active_deadline_seconds: r.deadline_s,
        pod_failure_policy: Some(PodFailurePolicy {
            rules: vec![
                // Evicted, preempted, drained: not the run's fault; a new pod
                // resumes (PVC) or starts over (emptyDir) without counting.
                PodFailurePolicyRule {
                    action: "Ignore".into(),
                    on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                        type_: "DisruptionTarget".into(),
                        status: Some("True".into()),
                    }]),
                    ..Default::default()
                },
                // A complete run with failed cells, a bad plan, a failed
                // export: another attempt would not change the answer.
                PodFailurePolicyRule {
                    action: "FailJob".into(),
                    on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                        container_name: Some("runner".into()),
                        operator: "In".into(),
                        values: NO_RETRY_EXIT_CODES.to_vec(),
                    }),
                    ..Default::default()
                },
            ],
        }),
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(labels()),
                ..Default::default()
            }),
            spec: Some(PodSpec {
                restart_policy: Some("Never".into()),
                service_account_name: Some(RUNNER_NAME.into()),
                automount_service_account_token: Some(true),
                enable_service_links: Some(false),
                node_selector: (!r.node_selector.is_empty()).then(|| r.node_selector.clone()),
                affinity: affinity(plan),
                tolerations: (!plan.tolerations.is_empty()).then(|| agent::tolerations(plan)),
                security_context: Some(PodSecurityContext {
                    run_as_non_root: Some(true),
                    run_as_user: Some(RUNNER_UID),
                    run_as_group: Some(RUNNER_UID),
                    fs_group: Some(RUNNER_UID),
                    fs_group_change_policy: Some("OnRootMismatch".into()),
                    seccomp_profile: Some(SeccompProfile {
                        type_: "RuntimeDefault".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                termination_grace_period_seconds: Some(GRACE_SECONDS),
                containers: vec![container(plan, r)],
                volumes: Some(volumes(r)),
                ..Default::default()
            }),
        },
        ..Default::default()
    }
}

/// The Job: `kubectl -n NS logs job/fabperf-run`.
pub fn job(plan: &Plan, r: &RunnerPlan) -> Job {
    Job {
        metadata: meta(JOB_NAME, plan),
        spec: Some(job_spec(plan, r)),
        ..Default::default()
    }
}

/// The CronJob (with `schedule`): the same Job on a schedule, never two at
/// once (two runs would measure each other's traffic).
pub fn cron_job(plan: &Plan, r: &RunnerPlan) -> Option<CronJob> {
    let schedule = r.schedule.clone()?;
    Some(CronJob {
        metadata: meta(JOB_NAME, plan),
        spec: CronJobSpec {
            schedule,
            time_zone: r.time_zone.clone(),
            concurrency_policy: Some("Forbid".into()),
            starting_deadline_seconds: Some(3600),
            successful_jobs_history_limit: Some(3),
            failed_jobs_history_limit: Some(3),
            job_template: JobTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels()),
                    ..Default::default()
                }),
                spec: Some(job_spec(plan, r)),
            },
            ..Default::default()
        },
        ..Default::default()
    })
}
