//! One module per command group. Each exposes clap argument types and a
//! `run*` function returning the process exit code.

pub mod cnibench;
pub mod common;
pub mod detect;
pub mod http;
pub mod inventory;
pub mod k8s;
pub mod mtu;
pub mod rdma;
pub mod report;
pub mod run;
pub mod server;
pub mod sock;
pub mod suite;
pub mod tune;

/// Say on stderr how many stored items the command skipped because they
/// could not be decoded (every reader of a store skips them the same way).
pub fn skipped_note(cmd: &str, store: &fabperf_store::Store) {
    let s = store.skipped();
    if let Some(first) = s.first() {
        eprintln!(
            "fabperf {cmd}: warning: {} stored item(s) could not be decoded and were skipped (a damaged store, or one written by a newer fabperf); the first: {}",
            s.len(),
            fabperf_results::escape::terminal(first)
        );
    }
}
