//! Test parameters (sent to the agent as JSON) and their validation.

use fabperf_proto::explain::CpuSpec;
use serde::{Deserialize, Serialize};

/// Bytes of fabperf's UDP datagram header (magic, type, flags, session,
/// sequence number, send timestamp); the smallest UDP `--size`.
pub const UDP_HEADER: u64 = 32;
/// The largest UDP payload over IPv4 (65535 - 20 - 8).
pub const UDP_MAX_SIZE: u64 = 65507;

/// Largest TCP message (per send/recv call).
pub const TCP_MAX_SIZE: u64 = 64 << 20;
/// Most streams per tcp-bw test (the agent may have a lower limit).
pub const MAX_STREAMS: u32 = 1024;

/// Who sends data in a bandwidth test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// The client sends, the agent receives.
    #[default]
    Forward,
    /// The agent sends, the client receives.
    Reverse,
    /// Both at once, on separate connections / threads.
    Bidir,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Forward => "forward",
            Direction::Reverse => "reverse",
            Direction::Bidir => "bidir",
        }
    }
    pub(crate) fn client_sends(self) -> bool {
        matches!(self, Direction::Forward | Direction::Bidir)
    }
    pub(crate) fn agent_sends(self) -> bool {
        matches!(self, Direction::Reverse | Direction::Bidir)
    }
}

/// `tcp-bw` parameters. `Default` gives the CLI defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TcpBwParams {
    /// Parallel TCP connections per direction, each on its own thread.
    pub streams: u32,
    /// Bytes per send/recv call.
    pub size: u64,
    /// Measured seconds (after the warm-up).
    pub duration_s: f64,
    /// Warm-up seconds excluded from the measurement.
    pub omit_s: f64,
    pub direction: Direction,
    /// Send with MSG_ZEROCOPY from a user buffer (instead of the default
    /// sendfile(2) from an in-memory file).
    pub zerocopy: bool,
    /// Copy through user buffers at both ends, like an application
    /// (send(2)/recv(2)); the default sends with sendfile(2) from an
    /// in-memory file and discards received bytes in the kernel
    /// (recv(MSG_TRUNC)), so the host's memcpy does not cap the figure.
    pub copy: bool,
    /// SO_SNDBUF/SO_RCVBUF in bytes on both ends; `None` keeps the kernel's
    /// autotuning (usually best).
    pub window: Option<u64>,
    /// Pace every stream to this many bits per second of payload (the
    /// kernel paces the socket: SO_MAX_PACING_RATE); `None`: as fast as
    /// the path allows.
    pub rate_bps: Option<u64>,
    /// Where each end's data threads run (`--cpu`): `auto` (the NIC's NUMA node), `none`,
    /// or a CPU list for both ends. Sent only when not `auto`, so agents without it serve
    /// the default.
    #[serde(skip_serializing_if = "CpuSpec::is_auto")]
    pub cpu: CpuSpec,
}

impl Default for TcpBwParams {
    fn default() -> Self {
        TcpBwParams {
            streams: 1,
            size: 128 << 10,
            duration_s: 10.0,
            omit_s: 1.0,
            direction: Direction::Forward,
            zerocopy: false,
            copy: false,
            window: None,
            rate_bps: None,
            cpu: CpuSpec::Auto,
        }
    }
}

/// `tcp-lat` parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TcpLatParams {
    /// Bytes per request and per response.
    pub size: u64,
    /// Measured seconds (ignored when `iterations` is set).
    pub duration_s: f64,
    /// Measured round trips instead of a duration.
    pub iterations: Option<u64>,
    /// Round trips before the measurement starts (not recorded).
    pub warmup: u64,
    /// Report full round trips instead of half round trips.
    pub rtt: bool,
    /// Spin on non-blocking receives (and set SO_BUSY_POLL) on both ends.
    pub busy_poll: bool,
    /// Where each end's data threads run (`--cpu`): `auto` (the NIC's NUMA node), `none`,
    /// or a CPU list for both ends. Sent only when not `auto`, so agents without it serve
    /// the default.
    #[serde(skip_serializing_if = "CpuSpec::is_auto")]
    pub cpu: CpuSpec,
}

impl Default for TcpLatParams {
    fn default() -> Self {
        TcpLatParams {
            size: 64,
            duration_s: 5.0,
            iterations: None,
            warmup: 1000,
            rtt: false,
            busy_poll: false,
            cpu: CpuSpec::Auto,
        }
    }
}

/// `udp-bw` parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UdpBwParams {
    /// UDP payload bytes per datagram (fabperf's 32-byte header included).
    pub size: u64,
    /// Offered rate in bits per second of UDP payload; `None` = as fast as
    /// the sender can.
    pub rate_bps: Option<u64>,
    pub duration_s: f64,
    pub omit_s: f64,
    pub direction: Direction,
    /// Receive (and send) buffer in bytes; the default is 8 MiB (forced
    /// past net.core.rmem_max when running as root).
    pub window: Option<u64>,
    /// Where each end's data threads run (`--cpu`): `auto` (the NIC's NUMA node), `none`,
    /// or a CPU list for both ends. Sent only when not `auto`, so agents without it serve
    /// the default.
    #[serde(skip_serializing_if = "CpuSpec::is_auto")]
    pub cpu: CpuSpec,
}

impl Default for UdpBwParams {
    fn default() -> Self {
        UdpBwParams {
            size: 1472,
            rate_bps: None,
            duration_s: 10.0,
            omit_s: 1.0,
            direction: Direction::Forward,
            window: None,
            cpu: CpuSpec::Auto,
        }
    }
}

/// `udp-lat` parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UdpLatParams {
    /// Datagram payload bytes (32-byte header included).
    pub size: u64,
    pub duration_s: f64,
    pub iterations: Option<u64>,
    pub warmup: u64,
    /// A probe without a reply after this many milliseconds counts as lost.
    pub probe_timeout_ms: u64,
    pub rtt: bool,
    /// Where each end's data threads run (`--cpu`): `auto` (the NIC's NUMA node), `none`,
    /// or a CPU list for both ends. Sent only when not `auto`, so agents without it serve
    /// the default.
    #[serde(skip_serializing_if = "CpuSpec::is_auto")]
    pub cpu: CpuSpec,
}

impl Default for UdpLatParams {
    fn default() -> Self {
        UdpLatParams {
            size: 64,
            duration_s: 5.0,
            iterations: None,
            warmup: 100,
            probe_timeout_ms: 200,
            rtt: false,
            cpu: CpuSpec::Auto,
        }
    }
}

fn check_secs(name: &str, v: f64, allow_zero: bool) -> Result<(), String> {
    if !v.is_finite() || v < 0.0 || (!allow_zero && v == 0.0) {
        return Err(format!(
            "{name} must be a {} number of seconds, got {v}",
            if allow_zero {
                "non-negative"
            } else {
                "positive"
            }
        ));
    }
    if v > 7.0 * 86400.0 {
        return Err(format!("{name} of {v} s is more than a week"));
    }
    Ok(())
}

fn check_size(v: u64, min: u64, max: u64) -> Result<(), String> {
    if v < min || v > max {
        return Err(format!(
            "size must be between {min} and {max} bytes, got {v}"
        ));
    }
    Ok(())
}

impl TcpBwParams {
    pub fn validate(&self) -> Result<(), String> {
        if self.streams == 0 || self.streams > MAX_STREAMS {
            return Err(format!(
                "streams must be between 1 and {MAX_STREAMS}, got {}",
                self.streams
            ));
        }
        check_size(self.size, 1, TCP_MAX_SIZE)?;
        check_secs("duration", self.duration_s, false)?;
        check_secs("omit", self.omit_s, true)?;
        if let Some(w) = self.window {
            check_window(w)?;
        }
        if let Some(r) = self.rate_bps {
            if r < 8000 {
                return Err(format!(
                    "rate must be at least 8 kbit/s per stream (or unset), got {r} bit/s"
                ));
            }
        }
        Ok(())
    }

    /// Connections the test opens (both directions).
    pub(crate) fn connections(&self) -> u32 {
        match self.direction {
            Direction::Bidir => self.streams * 2,
            _ => self.streams,
        }
    }
}

pub(crate) fn check_window(w: u64) -> Result<(), String> {
    if !(4096..=1 << 30).contains(&w) {
        return Err(format!(
            "window must be between 4 KiB and 1 GiB, got {w} bytes"
        ));
    }
    Ok(())
}

impl TcpLatParams {
    pub fn validate(&self) -> Result<(), String> {
        check_size(self.size, 1, 1 << 20)?;
        check_secs("duration", self.duration_s, false)?;
        if self.iterations == Some(0) {
            return Err("iterations must be at least 1".into());
        }
        if self.warmup > 10_000_000 {
            return Err("warmup must be at most 10000000 round trips".into());
        }
        Ok(())
    }
}

impl UdpBwParams {
    pub fn validate(&self) -> Result<(), String> {
        check_size(self.size, UDP_HEADER, UDP_MAX_SIZE)?;
        check_secs("duration", self.duration_s, false)?;
        check_secs("omit", self.omit_s, true)?;
        if let Some(r) = self.rate_bps {
            if r < 1000 {
                return Err(format!(
                    "rate must be at least 1 kbit/s (or `max`), got {r} bit/s"
                ));
            }
        }
        if let Some(w) = self.window {
            check_window(w)?;
        }
        Ok(())
    }
}

impl UdpLatParams {
    pub fn validate(&self) -> Result<(), String> {
        check_size(self.size, UDP_HEADER, UDP_MAX_SIZE)?;
        check_secs("duration", self.duration_s, false)?;
        if self.iterations == Some(0) {
            return Err("iterations must be at least 1".into());
        }
        if self.probe_timeout_ms == 0 || self.probe_timeout_ms > 60_000 {
            return Err(format!(
                "probe timeout must be between 1 and 60000 ms, got {}",
                self.probe_timeout_ms
            ));
        }
        if self.warmup > 1_000_000 {
            return Err("warmup must be at most 1000000 probes".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_rejected() {
        TcpBwParams::default().validate().unwrap();
        TcpLatParams::default().validate().unwrap();
        UdpBwParams::default().validate().unwrap();
        UdpLatParams::default().validate().unwrap();
        let bad = TcpBwParams {
            streams: 0,
            ..Default::default()
        };
        assert!(bad.validate().unwrap_err().contains("streams"));
        let bad = UdpBwParams {
            size: 65508,
            ..Default::default()
        };
        assert!(bad.validate().unwrap_err().contains("65507"));
        let bad = UdpBwParams {
            size: 8,
            ..Default::default()
        };
        assert!(bad.validate().is_err());
        let bad = TcpLatParams {
            duration_s: f64::NAN,
            ..Default::default()
        };
        assert!(bad.validate().is_err());
        let bad = UdpLatParams {
            probe_timeout_ms: 0,
            ..Default::default()
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn unknown_fields_are_refused() {
        let r: Result<TcpBwParams, _> = serde_json::from_str(r#"{"streams":2,"bogus":1}"#);
        assert!(r.is_err());
        let p: TcpBwParams = serde_json::from_str(r#"{"streams":2}"#).unwrap();
        assert_eq!(p.streams, 2);
        assert_eq!(p.size, 128 << 10);
        // --cpu: absent is auto, and auto is not sent (agents that predate it still serve).
        assert_eq!(p.cpu, CpuSpec::Auto);
        let v = serde_json::to_value(UdpBwParams::default()).unwrap();
        assert!(v.get("cpu").is_none(), "{v}");
        let p: UdpLatParams = serde_json::from_str(r#"{"cpu":"0-1"}"#).unwrap();
        assert_eq!(p.cpu, CpuSpec::List(vec![0, 1]));
        assert!(serde_json::from_str::<TcpLatParams>(r#"{"cpu":"3-1"}"#).is_err());
    }
}
