// Temporary: replaced by the socket engines work (issue 2).
use std::process::ExitCode;
#[derive(clap::Args)]
pub struct TcpBwArgs {}
#[derive(clap::Args)]
pub struct TcpLatArgs {}
#[derive(clap::Args)]
pub struct UdpBwArgs {}
#[derive(clap::Args)]
pub struct UdpLatArgs {}
pub fn run_tcp_bw(_: TcpBwArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("being built")
}
pub fn run_tcp_lat(_: TcpLatArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("being built")
}
pub fn run_udp_bw(_: UdpBwArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("being built")
}
pub fn run_udp_lat(_: UdpLatArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("being built")
}
