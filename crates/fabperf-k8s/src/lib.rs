//! fabperf on Kubernetes: from a small TOML plan to typed, schema-valid
//! manifests — one agent DaemonSet per network path (host, pod, service,
//! IPoIB, RoCE), Multus NetworkAttachmentDefinitions, the RDMA shared device
//! plugin config (ConfigMap and network-operator NicClusterPolicy) and Helm
//! values for the primary CNI.
//!
//! Layout: `plan/` reads and checks the TOML plan (one file per section, on
//! the shared `fabperf_planfile` layer); `render`, `objects`, `crd`, `cni`,
//! `policy`, `gpu` turn it into manifests; `runner/` is the in-cluster runner.

pub mod api;
pub mod cidr;
pub mod cni;
pub mod crd;
pub mod detect;
pub mod files;
pub mod gpu;
pub mod objects;
pub mod plan;
pub mod policy;
pub mod render;
pub mod runner;
pub mod yaml11;

pub use plan::{load_plan, parse_plan, PathKind, Plan, PlanError, PlanErrors};
pub use render::{render, write_all, OutDir, Rendered, RenderedFile};
