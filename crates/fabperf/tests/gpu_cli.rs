//! `fabperf detect` / `fabperf doctor` on the GPU fixture nodes, through the binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fabperf-detect/tests/fixtures")
        .join(name)
}

fn fabperf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fabperf"))
        .args(args)
        .output()
        .expect("run fabperf")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The GPU × RDMA table of the 8 × H100 fixture, checked by hand against its hierarchy
/// (make_fixtures.py `hgx_h100`): host bridges 15 and 37 on NUMA node 0, 97 and b7 on node 1;
/// below each root port a switch with two downstream ports, each leading to a second switch
/// holding GPU i and mlx5_i (PIX); the other pair of the same top switch is three switches away
/// (PXB); the other host bridge of the socket is NODE, the other socket SYS; mlx5_8, the
/// frontend NIC, hangs off a second root port of host bridge 15 (PHB to GPU0/GPU1).
const HGX_MATRIX: &str = "\
          mlx5_0  mlx5_1  mlx5_2  mlx5_3  mlx5_4  mlx5_5  mlx5_6  mlx5_7  mlx5_8
  GPU0       PIX     PXB    NODE    NODE     SYS     SYS     SYS     SYS     PHB
  GPU1       PXB     PIX    NODE    NODE     SYS     SYS     SYS     SYS     PHB
  GPU2      NODE    NODE     PIX     PXB     SYS     SYS     SYS     SYS    NODE
  GPU3      NODE    NODE     PXB     PIX     SYS     SYS     SYS     SYS    NODE
  GPU4       SYS     SYS     SYS     SYS     PIX     PXB    NODE    NODE     SYS
  GPU5       SYS     SYS     SYS     SYS     PXB     PIX    NODE    NODE     SYS
  GPU6       SYS     SYS     SYS     SYS    NODE    NODE     PIX     PXB     SYS
  GPU7       SYS     SYS     SYS     SYS    NODE    NODE     PXB     PIX     SYS
";

#[test]
fn detect_prints_the_hand_checked_gpu_nic_matrix() {
    let root = fixture("hgx-h100");
    let o = fabperf(&["detect", "--root", root.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = stdout(&o);
    assert!(
        text.contains(HGX_MATRIX),
        "the matrix differs from the hand-checked one:\n{text}"
    );
    assert!(text.contains(
        "  GPU0 0000:1a:00.0  H100 SXM5 80GB      0  32.0 GT/s x16  32.0 GT/s x16  identity mlx5_0 (PIX)\n"
    ));
    assert!(text.contains("GPUDirect RDMA: peermem nvidia_peermem loaded; dma-buf yes"));
    // The same table in the JSON, pair by pair.
    let o = fabperf(&["detect", "--json", "--root", root.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let links = v["gpu_nic"].as_array().unwrap();
    let nics: Vec<&str> = HGX_MATRIX
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    for row in HGX_MATRIX.lines().skip(1) {
        let mut cells = row.split_whitespace();
        let gpu: u64 = cells.next().unwrap()["GPU".len()..].parse().unwrap();
        for (nic, rel) in nics.iter().zip(cells) {
            let l = links
                .iter()
                .find(|l| l["gpu_index"] == gpu && l["rdma_device"] == *nic)
                .unwrap();
            assert_eq!(l["relation"], rel, "GPU{gpu} {nic}");
        }
    }
}

#[test]
fn detect_rails_option() {
    let root = fixture("hgx-h100");
    let r = root.to_str().unwrap();
    let o = fabperf(&["detect", "--root", r, "--rails", "gpu-order"]);
    assert!(o.status.success());
    let text = stdout(&o);
    assert!(text.contains(
        "  rail         0       1       2       3       4       5       6       7       -\n"
    ));
    let o = fabperf(&["detect", "--root", r, "--rails", "mlx5_0=0", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["rail_rule"], "map");
    assert_eq!(v["rdma_devices"][0]["rail"], 0);
    assert_eq!(v["rdma_devices"][1]["rail"], serde_json::Value::Null);
    // A device the node does not have: usage error, exit 2, nothing on stdout.
    let o = fabperf(&["detect", "--root", r, "--rails", "mlx5_42=0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no RDMA device or netdev named \"mlx5_42\""),
        "{err}"
    );
    let o = fabperf(&["detect", "--root", r, "--rails", "sideways"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("pci-order, gpu-order"));
}

#[test]
fn doctor_exit_status_follows_the_gpu_findings() {
    for (name, code, id) in [
        ("hgx-h100", 0, None),
        (
            "hgx-h100-acs",
            1,
            Some("ERROR   pcie-acs-redirect  [GPU0 0000:1a:00.0 <-> mlx5_0]"),
        ),
        (
            "hgx-h100-no-gdr",
            1,
            Some("ERROR   gpudirect-unavailable  [node]"),
        ),
        (
            "hgx-h100-degraded",
            1,
            Some("WARNING gpu-pcie-downgraded  [GPU3 0000:40:00.0]"),
        ),
        (
            "pcie-2gpu-sys",
            0,
            Some("WARNING gpu-nic-sys  [GPU1 0000:cb:00.0]"),
        ),
    ] {
        let o = fabperf(&["doctor", "--root", fixture(name).to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(code), "{name}: {}", stdout(&o));
        if let Some(id) = id {
            assert!(stdout(&o).contains(id), "{name}:\n{}", stdout(&o));
        }
    }
}

fn fabperf_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fabperf"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run fabperf")
}

#[test]
fn gpu_memory_without_the_cuda_driver_fails_with_what_is_missing() {
    // Named explicitly, so the test means the same on a machine that has libcuda.so.1. Nothing
    // is connected: the driver is checked before any RDMA or network setup.
    let missing = [("FABPERF_CUDA_LIBRARY", "/nonexistent/libcuda.so.1")];
    for args in [
        &["rdma-bw", "127.0.0.1:9", "--mem", "cuda"][..],
        &[
            "rdma-lat",
            "127.0.0.1:9",
            "--mem",
            "cuda:0000:1a:00.0",
            "--op",
            "read",
        ][..],
    ] {
        let o = fabperf_env(args, &missing);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("GPU memory needs the CUDA driver library /nonexistent/libcuda.so.1"),
            "{err}"
        );
        assert!(err.contains("Install the NVIDIA driver"), "{err}");
        assert!(o.stdout.is_empty());
    }
    // A library that is not the CUDA driver is refused by name.
    let o = fabperf_env(
        &["rdma-bw", "127.0.0.1:9", "--mem", "cuda"],
        &[("FABPERF_CUDA_LIBRARY", "libc.so.6")],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("libc.so.6 has no cuInit"));
}

#[test]
fn gpu_memory_parameter_checks() {
    for (args, want) in [
        (
            &["rdma-lat", "h", "--mem", "cuda", "--op", "write"][..],
            "use --op send or --op read",
        ),
        (
            &["rdma-bw", "h", "--mem", "cuda", "--inline", "64"][..],
            "--inline 64",
        ),
        (
            &["rdma-bw", "h", "--gpu-reg", "dmabuf"][..],
            "--gpu-reg applies to GPU memory",
        ),
        (&["rdma-bw", "h", "--mem", "gpu0"][..], "use host, cuda"),
        (
            &["rdma-bw", "h", "--mem", "cuda:1a:00"][..],
            "cuda:<PCI address>",
        ),
        (
            &["rdma-bw", "h", "--mem", "cuda", "--gpu-reg", "both"][..],
            "auto",
        ),
    ] {
        let o = fabperf(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
