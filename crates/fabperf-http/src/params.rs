//! `http-load` parameters (the command line's, and a plan cell's as JSON).

use serde::{Deserialize, Serialize};

/// Most connections one load may open (one source address has about
/// 28 000 ephemeral ports toward one destination by default).
pub const MAX_CONNECTIONS: u32 = 60_000;
/// Most load threads.
pub const MAX_THREADS: u32 = 256;
/// Largest body a request may ask for or send (the agent's own limit,
/// `--http-max-size`, is usually lower).
pub const MAX_SIZE: u64 = 1 << 40;
/// Longest measured interval or warm-up (a week, as every test).
pub const MAX_SECS: f64 = 7.0 * 86400.0;
/// Highest request rate.
pub const MAX_RATE: f64 = 1e9;

/// `http-load` parameters. `Default` gives the command line's defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoadParams {
    /// Open connections, each with one request in flight at a time.
    pub connections: u32,
    /// Threads the connections are spread over (each its own event loop);
    /// at most one per connection is used.
    pub threads: u32,
    /// Measured seconds, after the warm-up.
    pub duration_s: f64,
    /// Seconds of load before the measurement (connections opened, caches
    /// and CPU clocks warm); nothing in it is counted.
    pub warmup_s: f64,
    /// Response body bytes (`GET /bytes/SIZE`), or request body bytes when
    /// `upload` is set (`PUT /upload`).
    pub size: u64,
    /// Requests per second over all connections (open loop: requests are
    /// due on a fixed schedule and latency counts from when a request was
    /// due); `None` sends each connection's next request as soon as the
    /// previous response is in (closed loop).
    pub rate: Option<f64>,
    /// Send `size` bytes per request (`PUT /upload`) instead of receiving.
    pub upload: bool,
    /// A request without a complete response after this long counts as a
    /// timeout and its connection is opened again; also the connect timeout.
    pub timeout_s: f64,
}

impl Default for LoadParams {
    fn default() -> Self {
        LoadParams {
            connections: 10,
            threads: 2,
            duration_s: 10.0,
            warmup_s: 1.0,
            size: 1024,
            rate: None,
            upload: false,
            timeout_s: 2.0,
        }
    }
}

impl LoadParams {
    /// Every value in range; the message names the parameter.
    pub fn validate(&self) -> Result<(), String> {
        if self.connections == 0 || self.connections > MAX_CONNECTIONS {
            return Err(format!(
                "connections {} is out of range 1..={MAX_CONNECTIONS}",
                self.connections
            ));
        }
        if self.threads == 0 || self.threads > MAX_THREADS {
            return Err(format!(
                "threads {} is out of range 1..={MAX_THREADS}",
                self.threads
            ));
        }
        if !(self.duration_s.is_finite() && self.duration_s > 0.0 && self.duration_s <= MAX_SECS) {
            return Err(format!(
                "duration {} s is not more than 0 and at most 7 days",
                self.duration_s
            ));
        }
        if !(self.warmup_s.is_finite() && self.warmup_s >= 0.0 && self.warmup_s <= MAX_SECS) {
            return Err(format!(
                "warm-up {} s is not between 0 and 7 days",
                self.warmup_s
            ));
        }
        if self.size > MAX_SIZE {
            return Err(format!("size {} is above the largest, 1 TiB", self.size));
        }
        if let Some(r) = self.rate {
            if !(r.is_finite() && (0.001..=MAX_RATE).contains(&r)) {
                return Err(format!(
                    "rate {r} requests/s is out of range 0.001..=1e9 (or max)"
                ));
            }
        }
        if !(self.timeout_s.is_finite() && self.timeout_s > 0.0 && self.timeout_s <= 86400.0) {
            return Err(format!(
                "timeout {} s is not more than 0 and at most a day",
                self.timeout_s
            ));
        }
        Ok(())
    }

    /// Threads actually used: one per connection at most.
    pub fn threads_used(&self) -> u32 {
        self.threads.min(self.connections).max(1)
    }

    /// Wall time of the load: warm-up plus measured interval.
    pub fn total_secs(&self) -> f64 {
        self.warmup_s + self.duration_s
    }

    /// The request line's target.
    pub fn target_path(&self) -> String {
        if self.upload {
            "/upload".to_string()
        } else {
            format!("/bytes/{}", self.size)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_are_named() {
        LoadParams::default().validate().unwrap();
        let bad: Vec<(LoadParams, &str)> = vec![
            (
                LoadParams {
                    connections: 0,
                    ..Default::default()
                },
                "connections",
            ),
            (
                LoadParams {
                    threads: 0,
                    ..Default::default()
                },
                "threads",
            ),
            (
                LoadParams {
                    duration_s: f64::NAN,
                    ..Default::default()
                },
                "duration",
            ),
            (
                LoadParams {
                    warmup_s: -1.0,
                    ..Default::default()
                },
                "warm-up",
            ),
            (
                LoadParams {
                    rate: Some(0.0),
                    ..Default::default()
                },
                "rate",
            ),
            (
                LoadParams {
                    rate: Some(f64::INFINITY),
                    ..Default::default()
                },
                "rate",
            ),
            (
                LoadParams {
                    size: MAX_SIZE + 1,
                    ..Default::default()
                },
                "size",
            ),
            (
                LoadParams {
                    timeout_s: 0.0,
                    ..Default::default()
                },
                "timeout",
            ),
        ];
        for (p, word) in bad {
            let e = p.validate().unwrap_err();
            assert!(e.contains(word), "{e}");
        }
    }

    #[test]
    fn unknown_json_fields_are_refused() {
        let e = serde_json::from_value::<LoadParams>(serde_json::json!({"conections": 5}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("conections"), "{e}");
        let p: LoadParams =
            serde_json::from_value(serde_json::json!({"connections": 5, "rate": 100.0})).unwrap();
        assert_eq!(p.connections, 5);
        assert_eq!(p.rate, Some(100.0));
    }
}
