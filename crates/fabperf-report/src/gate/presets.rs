//! The shipped gate presets (`--gate-preset NAME`).

/// A named set of gates.
pub struct Preset {
    pub name: &'static str,
    pub about: &'static str,
    pub gates: &'static [&'static str],
}

/// The shipped presets.
pub const PRESETS: &[Preset] = &[Preset {
    name: "connectx-acceptance",
    about:
        "NVIDIA ngc_multinode_perf's acceptance thresholds: RDMA bandwidth at least 90 % of the \
            port rate one way (twice it bidirectional), average latency at most 2.5 µs for send \
            and write, 4.5 µs for read",
    gates: &[
        "rdma-bw >= 90% port_rate",
        "op:write rdma-lat mean <= 2.5us",
        "op:send rdma-lat mean <= 2.5us",
        "op:read rdma-lat mean <= 4.5us",
    ],
}];

pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}
