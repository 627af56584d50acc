// Temporary: replaced by the k8s work (issue 5).
use std::process::ExitCode;
#[derive(clap::Subcommand)]
pub enum K8sCmd {
    /// Render manifests.
    Render,
}
pub fn run(_: K8sCmd) -> anyhow::Result<ExitCode> {
    anyhow::bail!("k8s is being built")
}
