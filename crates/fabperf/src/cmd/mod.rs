//! One module per command group. Each exposes clap argument types and a
//! `run*` function returning the process exit code.

pub mod cnibench;
pub mod common;
pub mod detect;
pub mod inventory;
pub mod k8s;
pub mod rdma;
pub mod report;
pub mod run;
pub mod server;
pub mod sock;
pub mod suite;
pub mod tune;
