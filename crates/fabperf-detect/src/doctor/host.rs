//! Host checks: locked-memory limits, a slow clocksource, and an inventory
//! that could not read everything it needed.

use super::*;

pub(super) fn check_memlock(inv: &Inventory, out: &mut Vec<Finding>) {
    let Some(m) = &inv.memlock else { return };
    if m.can_lock(BENCH_NEED_BYTES) {
        return;
    }
    out.push(Finding {
        id: "memlock-low".into(),
        severity: if inv.rdma_available { Severity::Error } else { Severity::Info },
        subject: "process".into(),
        summary: format!(
            "locked-memory limit is {} without CAP_IPC_LOCK; RDMA benchmarks need to pin about {}",
            m.soft_text(),
            human_bytes(BENCH_NEED_BYTES)
        ),
        detail: "Memory registration pins pages; beyond RLIMIT_MEMLOCK without CAP_IPC_LOCK `ibv_reg_mr` fails with ENOMEM (`Cannot allocate memory`). containerd's default limit is small.".into(),
        evidence: vec![
            ev(inv, "/proc/self/limits", format!("Max locked memory {}", m.soft_text())),
            ev(inv, "/proc/self/status", format!("CapEff CAP_IPC_LOCK {}", opt(&m.cap_ipc_lock))),
        ],
        cost_gbps: None,
        fix: MemlockStatus::fix_lines(),
    });
}

pub(super) fn check_clocksource(inv: &Inventory, out: &mut Vec<Finding>) {
    let Some(c) = &inv.clocksource else { return };
    if !c.is_slow() {
        return;
    }
    let base = crate::model::CLOCKSOURCE_DIR;
    let mut fix = vec!["see why the kernel left the TSC: `dmesg | grep -i -E 'tsc|clocksource'` (\"Marking clocksource tsc unstable\")".to_string()];
    if c.available.iter().any(|a| a == "tsc") {
        fix.push(format!(
            "where the TSC is known good (constant_tsc/nonstop_tsc in /proc/cpuinfo): `echo tsc > {base}/current_clocksource` (until reboot), or boot with `tsc=reliable`"
        ));
    }
    if c.available.iter().any(|a| a == "kvm-clock") {
        fix.push(format!(
            "in this KVM guest: `echo kvm-clock > {base}/current_clocksource`"
        ));
    } else {
        fix.push(
            "in a VM: enable the hypervisor's paravirtual clock (kvm-clock, Hyper-V TSC page)"
                .into(),
        );
    }
    out.push(Finding {
        id: "clocksource-slow".into(),
        severity: Severity::Warning,
        subject: "node".into(),
        summary: format!(
            "the kernel's clocksource is {}: every clock read is a system call with a trapped device access (~0.5-1 µs instead of ~20-60 ns)",
            c.current
        ),
        detail: "Benchmarks that time with the system clock (fabperf, iperf3, sockperf) pay it on every timestamp: latency samples grow and busy-polling loops slow down, while perftest reads the TSC directly and does not, so comparisons between them skew. The kernel falls back to hpet/acpi_pm when its watchdog marks the TSC unstable (VMs, emulators, some firmware). fabperf's records carry a warning with the measured cost when this happens.".into(),
        evidence: vec![
            ev(inv, &format!("{base}/current_clocksource"), &c.current),
            ev(inv, &format!("{base}/available_clocksource"), c.available.join(" ")),
        ],
        cost_gbps: None,
        fix,
    });
}

pub(super) fn check_incomplete(inv: &Inventory, out: &mut Vec<Finding>) {
    if inv.unreadable.is_empty() {
        return;
    }
    let dirs: Vec<&str> = inv
        .unreadable
        .iter()
        .filter(|u| u.directory)
        .map(|u| u.path.as_str())
        .collect();
    let denied = inv
        .unreadable
        .iter()
        .any(|u| u.reason.contains("permission"));
    let mut fix = Vec::new();
    if denied {
        fix.push("run `fabperf doctor` as root (or, in a pod, with sysfs and procfs readable: the default container mounts are)".to_string());
    }
    if inv.source.mode == "snapshot" {
        fix.push("re-create the snapshot with `fabperf detect --capture DIR` (it copies regular files only) and check its permissions (`chmod -R u+rX DIR`)".to_string());
    }
    out.push(Finding {
        id: "inventory-incomplete".into(),
        // A whole directory missing means "nothing found there" would be a guess.
        severity: if dirs.is_empty() { Severity::Warning } else { Severity::Error },
        subject: "node".into(),
        summary: if dirs.is_empty() {
            format!("{} inputs could not be read; the values behind them are unknown", inv.unreadable.len())
        } else {
            format!("the inventory is incomplete: {} could not be read, so what is behind it is unknown (not absent)", dirs.join(", "))
        },
        detail: "Findings below are drawn from what could be read; an unreadable directory is not evidence that nothing is there.".into(),
        evidence: inv
            .unreadable
            .iter()
            .map(|u| ev(inv, &u.path, &u.reason))
            .collect(),
        cost_gbps: None,
        fix,
    });
}
