//! HTTP load for fabperf (docs/http.md).
//!
//! - [`server`]: the HTTP/1.1 load target the agent serves on its own port
//!   (connections that start with an HTTP method instead of fabperf's
//!   magic): fixed-size responses (`GET /bytes/N`) and uploads
//!   (`PUT /upload`), built on hyper, every resource bounded.
//! - [`load`]: `fabperf http-load`, the load generator: closed loop, or
//!   open loop at a rate with latency corrected for coordinated omission,
//!   errors by kind, one [`fabperf_results::Record`].
//! - [`parse`]: the load generator's response parser.
//!
//! Why hyper on tokio: the agent must hold thousands of mostly idle
//! keep-alive connections, which a thread per connection (the agent's
//! model for fabperf tests) cannot; hyper is the most used HTTP/1.1
//! implementation in Rust, keeps its parser hardened (it is what most Rust
//! HTTP servers run on), and exposes the bounds an unauthenticated server
//! needs (head size and field count, head timeout, buffer size).

pub mod load;
pub mod params;
pub mod parse;
pub mod rlimit;
pub mod server;

pub use load::{run_load, LoadError, Target};
pub use params::LoadParams;
pub use server::{is_http_start, refuse, HttpConfig, HttpServer, REASON_HTTP_OFF};
