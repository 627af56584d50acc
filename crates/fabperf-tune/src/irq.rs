//! IRQ affinity of an interface's interrupts: which IRQs belong to it
//! (its device's MSI/MSI-X vectors, else its legacy line) and their
//! `/proc/irq/N/smp_affinity_list`.

use crate::profile::{parse_cpu_list, CpuSpec};
use std::path::Path;

/// The IRQs of a network interface, from sysfs (empty for a virtual
/// device). Err when the interface is not visible in /sys.
pub fn irqs_of(ifname: &str) -> Result<Vec<u32>, String> {
    if ifname.is_empty() || ifname.contains('/') || ifname == "." || ifname == ".." {
        return Err(format!("{ifname:?} is not an interface name"));
    }
    let base = Path::new("/sys/class/net").join(ifname);
    if !base.exists() {
        return Err(format!(
            "{ifname} is not in /sys/class/net (sysfs is mounted for another network namespace)"
        ));
    }
    let dev = base.join("device");
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dev.join("msi_irqs")) {
        for e in rd.flatten().take(4096) {
            if let Some(n) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
                out.push(n);
            }
        }
    }
    if out.is_empty() {
        if let Ok(s) = std::fs::read_to_string(dev.join("irq")) {
            if let Ok(n) = s.trim().parse::<u32>() {
                if n > 0 {
                    out.push(n);
                }
            }
        }
    }
    out.sort_unstable();
    Ok(out)
}

fn affinity_path(irq: u32) -> std::path::PathBuf {
    Path::new("/proc/irq")
        .join(irq.to_string())
        .join("smp_affinity_list")
}

pub fn read_affinity(irq: u32) -> Result<String, String> {
    std::fs::read_to_string(affinity_path(irq))
        .map(|s| s.trim().to_string())
        .map_err(|e| crate::os_text(&e))
}

pub fn write_affinity(irq: u32, cpus: &str) -> Result<(), String> {
    parse_cpu_list(cpus)?;
    std::fs::write(affinity_path(irq), format!("{cpus}\n")).map_err(|e| match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS) => {
            "not allowed: IRQ affinity is host-wide (/proc/irq needs root in the host's namespaces)"
                .to_string()
        }
        Some(libc::EIO) | Some(libc::EINVAL) => {
            "the kernel refused it (managed IRQ, or CPUs offline)".to_string()
        }
        _ => crate::os_text(&e),
    })
}

/// The CPUs a spec names on this host for an interface.
pub fn resolve_cpus(spec: &CpuSpec, ifname: &str) -> Result<Vec<u32>, String> {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .map_err(|e| format!("reading the online CPUs: {}", crate::os_text(&e)))
        .and_then(|s| parse_cpu_list(s.trim()))?;
    let want = match spec {
        CpuSpec::All => online.clone(),
        CpuSpec::List(l) => l.clone(),
        CpuSpec::Local => {
            let p = Path::new("/sys/class/net")
                .join(ifname)
                .join("device/local_cpulist");
            std::fs::read_to_string(&p)
                .map_err(|e| format!("{}: {}", p.display(), crate::os_text(&e)))
                .and_then(|s| parse_cpu_list(s.trim()))?
        }
    };
    let cpus: Vec<u32> = want.into_iter().filter(|c| online.contains(c)).collect();
    if cpus.is_empty() {
        return Err("none of those CPUs is online on this host".into());
    }
    Ok(cpus)
}

/// A CPU list in the kernel's compact form (`0-3,8`).
pub fn format_cpu_list(cpus: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_format_compactly() {
        assert_eq!(format_cpu_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(format_cpu_list(&[5]), "5");
        assert!(irqs_of("../etc").is_err());
        assert_eq!(irqs_of("lo").unwrap(), Vec::<u32>::new());
        assert!(!resolve_cpus(&CpuSpec::All, "lo").unwrap().is_empty());
        assert!(resolve_cpus(&CpuSpec::List(vec![8000]), "lo").is_err());
    }
}
