//! The agent's HTTP/1.1 load target (hyper), for connections that start
//! with an HTTP method on the agent's port.
//!
//! | request | response |
//! |---|---|
//! | `GET /bytes/N` (also `HEAD`; `N` in bytes, or `64K`, `1M`, `1G`) | 200 with `N` zero bytes, `Content-Length: N` |
//! | `PUT /upload` or `POST /upload` with a body of up to the size limit | 200 after the body is read and discarded |
//! | `GET /` | a short text naming these endpoints |
//!
//! Requests are unauthenticated, so every resource a peer can make the
//! server hold is bounded (docs/security.md): connections
//! ([`HttpConfig::max_connections`], then `503`), the head (size, field
//! count, and the time to send it), bodies ([`HttpConfig::max_size`], then
//! `413`), and progress: a connection that moves no byte either way for
//! [`HttpConfig::timeout`] is closed, whether it is idle, trickling a head,
//! stalling an upload or not reading a download.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONNECTION, CONTENT_TYPE};
pub use hyper::Method;
use hyper::{Request, Response, StatusCode};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

/// Default most HTTP connections at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// Default largest body served or accepted (1 GiB).
pub const DEFAULT_MAX_SIZE: u64 = 1 << 30;
/// Largest request head (request line and header fields).
pub const MAX_REQUEST_HEAD: usize = 8 * 1024;
/// Most header fields in a request.
pub const MAX_REQUEST_HEADERS: usize = 64;
/// Largest read buffer of a connection (hyper grows it from 8 KiB only as
/// far as reads fill it).
pub const MAX_READ_BUFFER: usize = 16 * 1024;

/// The `x-fabperf-reason` a refusal carries, for clients to explain it.
pub const REASON_HTTP_OFF: &str = "http-off";
pub const REASON_CONNECTION_LIMIT: &str = "connection-limit";
pub const REASON_SIZE_LIMIT: &str = "size-limit";

/// Zero bytes the bodies are cut from (shared, never copied).
static ZEROS: [u8; 128 * 1024] = [0; 128 * 1024];

/// Server settings.
#[derive(Debug, Clone, Copy)]
pub struct HttpConfig {
    /// Most HTTP connections at once; beyond, a connection gets `503`.
    pub max_connections: usize,
    /// Largest `GET /bytes/N` and upload body.
    pub max_size: u64,
    /// Longest time a connection may go without moving a byte (idle
    /// keep-alive included), and longest time to send a request head.
    pub timeout: Duration,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_size: DEFAULT_MAX_SIZE,
            timeout: Duration::from_secs(10),
        }
    }
}

/// Counters for the agent's log.
#[derive(Debug, Default)]
struct Counters {
    refused: AtomicU64,
    stalled: AtomicU64,
    bad: AtomicU64,
}

/// The HTTP server; one per agent, shared by its connections.
pub struct HttpServer {
    cfg: HttpConfig,
    open: AtomicUsize,
    counters: Counters,
    builder: hyper::server::conn::http1::Builder,
}

/// Releases a connection's slot.
struct Slot<'a>(&'a AtomicUsize);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl HttpServer {
    pub fn new(cfg: HttpConfig) -> Arc<HttpServer> {
        let mut b = hyper::server::conn::http1::Builder::new();
        b.timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(cfg.timeout)
            .max_headers(MAX_REQUEST_HEADERS)
            .max_header_size(MAX_REQUEST_HEAD)
            .max_buf_size(MAX_READ_BUFFER)
            .keep_alive(true)
            .half_close(false);
        Arc::new(HttpServer {
            cfg,
            open: AtomicUsize::new(0),
            counters: Counters::default(),
            builder: b,
        })
    }

    pub fn config(&self) -> &HttpConfig {
        &self.cfg
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    fn admit(&self) -> Option<Slot<'_>> {
        let mut n = self.open.load(Ordering::Acquire);
        loop {
            if n >= self.cfg.max_connections {
                return None;
            }
            match self
                .open
                .compare_exchange_weak(n, n + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(Slot(&self.open)),
                Err(now) => n = now,
            }
        }
    }

    /// What the server closed or refused since the last call, as one log
    /// line; `None` when nothing happened.
    pub fn take_summary(&self) -> Option<String> {
        let r = self.counters.refused.swap(0, Ordering::AcqRel);
        let s = self.counters.stalled.swap(0, Ordering::AcqRel);
        let b = self.counters.bad.swap(0, Ordering::AcqRel);
        if r + s + b == 0 {
            return None;
        }
        Some(format!(
            "HTTP: refused {r} connection(s) at the limit of {} (--http-max-connections), \
             closed {s} that moved no byte for {:.1} s or sent no complete request head in time, \
             and {b} with malformed or oversized requests",
            self.cfg.max_connections,
            self.cfg.timeout.as_secs_f64()
        ))
    }

    /// Serve one connection whose first bytes (`prefix`, already read)
    /// start an HTTP request.
    pub async fn serve(self: Arc<Self>, mut stream: TcpStream, prefix: [u8; 4], _peer: SocketAddr) {
        let Some(_slot) = self.admit() else {
            self.counters.refused.fetch_add(1, Ordering::Relaxed);
            refuse(
                &mut stream,
                "503 Service Unavailable",
                REASON_CONNECTION_LIMIT,
                &format!(
                    "fabperf agent: at its limit of {} HTTP connections (fabperf server --http-max-connections); retry later",
                    self.cfg.max_connections
                ),
            )
            .await;
            return;
        };
        let _ = stream.set_nodelay(true);
        let progress = Arc::new(Progress::new());
        let io = ServerIo {
            prefix,
            given: 0,
            inner: stream,
            progress: progress.clone(),
        };
        let me = self.clone();
        let svc = hyper::service::service_fn(move |req| {
            let me = me.clone();
            async move { Ok::<_, Infallible>(me.handle(req).await) }
        });
        let conn = self
            .builder
            .serve_connection(hyper_util::rt::TokioIo::new(io), svc);
        tokio::select! {
            r = conn => {
                if let Err(e) = r {
                    if e.is_timeout() {
                        self.counters.stalled.fetch_add(1, Ordering::Relaxed);
                    } else if e.is_parse() || e.is_parse_too_large() {
                        self.counters.bad.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            _ = progress.stalled(self.cfg.timeout) => {
                self.counters.stalled.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    async fn handle(&self, req: Request<Incoming>) -> Response<Payload> {
        // RFC 9112 6.1: a transfer coding the server does not understand
        // (anything but chunked: `gzip, chunked` too) gets 501, and the
        // body is not read.
        if let Some(coding) = unsupported_coding(req.headers()) {
            self.counters.bad.fetch_add(1, Ordering::Relaxed);
            let mut r = text(
                StatusCode::NOT_IMPLEMENTED,
                format!(
                    "fabperf agent: transfer coding {coding:?} is not implemented (only chunked)\n"
                ),
            );
            r.headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
            return r;
        }
        match route(req.method(), req.uri().path(), self.cfg.max_size) {
            Route::Bytes(n) => {
                let mut r = Response::new(Payload::Zeros(n));
                r.headers_mut().insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static("application/octet-stream"),
                );
                r
            }
            Route::Upload => self.upload(req).await,
            Route::Index => text(StatusCode::OK, INDEX.to_string()),
            Route::NotFound => text(
                StatusCode::NOT_FOUND,
                "fabperf agent: no such resource; GET / lists what this server offers\n".into(),
            ),
            Route::MethodNotAllowed(allow) => {
                let mut r = text(
                    StatusCode::METHOD_NOT_ALLOWED,
                    format!("fabperf agent: this resource takes {allow}\n"),
                );
                r.headers_mut()
                    .insert(ALLOW, HeaderValue::from_static(allow));
                r
            }
            Route::BadSize(why) => text(StatusCode::BAD_REQUEST, format!("fabperf agent: {why}\n")),
            Route::TooLarge(n) => self.too_large(n),
        }
    }

    fn too_large(&self, n: u64) -> Response<Payload> {
        let mut r = text(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "fabperf agent: {n} bytes is above this server's limit of {} (fabperf server --http-max-size)\n",
                self.cfg.max_size
            ),
        );
        if let Ok(v) = HeaderValue::from_str(&format!("{REASON_SIZE_LIMIT}={}", self.cfg.max_size))
        {
            r.headers_mut().insert("x-fabperf-reason", v);
        }
        // The body was not read: the connection cannot carry another request.
        r.headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
        r
    }

    /// Read and discard an upload's body, within the size limit.
    async fn upload(&self, req: Request<Incoming>) -> Response<Payload> {
        let declared = req.body().size_hint().exact();
        if let Some(n) = declared.filter(|n| *n > self.cfg.max_size) {
            return self.too_large(n);
        }
        let mut body = req.into_body();
        let mut got: u64 = 0;
        loop {
            let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
            match frame {
                None => break,
                Some(Ok(f)) => {
                    if let Some(d) = f.data_ref() {
                        got = got.saturating_add(d.len() as u64);
                        if got > self.cfg.max_size {
                            return self.too_large(got);
                        }
                    }
                }
                Some(Err(_)) => {
                    // The client went away or sent a malformed body; the
                    // connection ends with this response.
                    self.counters.bad.fetch_add(1, Ordering::Relaxed);
                    let mut r = text(
                        StatusCode::BAD_REQUEST,
                        "fabperf agent: the request body was cut short or malformed\n".into(),
                    );
                    r.headers_mut()
                        .insert(CONNECTION, HeaderValue::from_static("close"));
                    return r;
                }
            }
        }
        text(StatusCode::OK, format!("received {got} bytes\n"))
    }
}

/// The first transfer coding of a request other than `chunked`, if any
/// (every Transfer-Encoding field, every comma-separated coding).
pub fn unsupported_coding(h: &hyper::HeaderMap) -> Option<String> {
    h.get_all(hyper::header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .split(',')
                .map(|c| c.trim().to_string())
                .collect::<Vec<_>>()
        })
        .find(|c| !c.eq_ignore_ascii_case("chunked"))
        .map(|c| c.chars().take(64).collect())
}

const INDEX: &str = "fabperf agent HTTP load target\n\
GET  /bytes/N   N zero bytes (N in bytes, or 64K, 1M, 1G)\n\
PUT  /upload    reads and discards the request body (also POST)\n";

fn text(status: StatusCode, body: String) -> Response<Payload> {
    let mut r = Response::new(Payload::Text(Some(Bytes::from(body))));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// What a request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Index,
    Bytes(u64),
    Upload,
    NotFound,
    /// The resource exists; these methods are allowed.
    MethodNotAllowed(&'static str),
    /// `/bytes/N` with an `N` that is not a size.
    BadSize(String),
    /// A size above the limit.
    TooLarge(u64),
}

/// Longest size segment in `/bytes/N`.
const MAX_SIZE_SEGMENT: usize = 24;

/// Route a request by method and path.
pub fn route(method: &Method, path: &str, max_size: u64) -> Route {
    let get = method == Method::GET || method == Method::HEAD;
    if path == "/" {
        return if get {
            Route::Index
        } else {
            Route::MethodNotAllowed("GET, HEAD")
        };
    }
    if path == "/upload" {
        return if method == Method::PUT || method == Method::POST {
            Route::Upload
        } else {
            Route::MethodNotAllowed("PUT, POST")
        };
    }
    if let Some(n) = path.strip_prefix("/bytes/") {
        if !get {
            return Route::MethodNotAllowed("GET, HEAD");
        }
        return match parse_size_segment(n) {
            Ok(v) if v > max_size => Route::TooLarge(v),
            Ok(v) => Route::Bytes(v),
            Err(e) => Route::BadSize(e),
        };
    }
    Route::NotFound
}

/// The `N` of `/bytes/N`: a byte count, optionally with a binary multiplier.
pub fn parse_size_segment(s: &str) -> Result<u64, String> {
    if s.is_empty() {
        return Err("/bytes/N needs a size N (bytes, or 64K, 1M, 1G)".into());
    }
    if s.len() > MAX_SIZE_SEGMENT
        || !s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.')
        || !s.as_bytes()[0].is_ascii_digit()
    {
        return Err(format!(
            "/bytes/N takes a size N such as 1024, 64K or 1M, not {:?}",
            s.chars().take(MAX_SIZE_SEGMENT).collect::<String>()
        ));
    }
    fabperf_units::parse_size(s)
}

/// A response body: text, or `n` zero bytes cut from a shared buffer.
pub enum Payload {
    Text(Option<Bytes>),
    Zeros(u64),
}

impl Body for Payload {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Payload::Text(t) => Poll::Ready(t.take().map(|b| Ok(Frame::data(b)))),
            Payload::Zeros(n) => {
                if *n == 0 {
                    return Poll::Ready(None);
                }
                let k = (*n).min(ZEROS.len() as u64) as usize;
                *n -= k as u64;
                Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(&ZEROS).slice(..k)))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Payload::Text(t) => t.is_none(),
            Payload::Zeros(n) => *n == 0,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Payload::Text(t) => SizeHint::with_exact(t.as_ref().map_or(0, |b| b.len() as u64)),
            Payload::Zeros(n) => SizeHint::with_exact(*n),
        }
    }
}

/// When a connection last moved a byte.
struct Progress {
    base: Instant,
    last_ms: AtomicU64,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            base: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let ms = self.base.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.base + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }

    /// Resolves once no byte moved for `limit`.
    async fn stalled(&self, limit: Duration) {
        loop {
            let deadline = self.last() + limit;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline.into()).await;
        }
    }
}

/// The connection as hyper sees it: the bytes already read first, and
/// every byte moved noted for the stall check.
struct ServerIo {
    prefix: [u8; 4],
    given: usize,
    inner: TcpStream,
    progress: Arc<Progress>,
}

impl AsyncRead for ServerIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let me = self.get_mut();
        if me.given < me.prefix.len() {
            let n = (me.prefix.len() - me.given).min(buf.remaining());
            buf.put_slice(&me.prefix[me.given..me.given + n]);
            me.given += n;
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut me.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            me.progress.touch();
        }
        r
    }
}

impl AsyncWrite for ServerIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            me.progress.touch();
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            me.progress.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Answer a connection that will not be served with one HTTP response and
/// close it: `status` (e.g. `503 Service Unavailable`), a reason token in
/// `x-fabperf-reason`, and `msg` as the body. Bounded in time and bytes.
pub async fn refuse(stream: &mut TcpStream, status: &str, reason: &str, msg: &str) {
    let body = format!("{msg}\n");
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\n\
         x-fabperf-reason: {reason}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await
    };
    if tokio::time::timeout(Duration::from_secs(2), write)
        .await
        .is_err()
    {
        return;
    }
    // Read what the peer already sent (up to 64 KiB, 200 ms) so the close
    // is not a reset that destroys the answer before it is read.
    let drain = async {
        let mut sink = [0u8; 4096];
        let mut n = 0;
        while n < 65536 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k,
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_millis(200), drain).await;
}

/// Whether a connection's first four bytes start an HTTP/1.x request (a
/// method token and its space, or the start of a longer method).
pub fn is_http_start(b: &[u8; 4]) -> bool {
    const STARTS: [&[u8; 4]; 10] = [
        b"GET ", b"HEAD", b"POST", b"PUT ", b"DELE", b"OPTI", b"PATC", b"TRAC", b"CONN", b"PRI ",
    ];
    STARTS.contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let m = 1 << 20;
        assert_eq!(route(&Method::GET, "/", m), Route::Index);
        assert_eq!(route(&Method::GET, "/bytes/0", m), Route::Bytes(0));
        assert_eq!(route(&Method::HEAD, "/bytes/64K", m), Route::Bytes(65536));
        assert_eq!(route(&Method::GET, "/bytes/1M", m), Route::Bytes(1 << 20));
        assert_eq!(
            route(&Method::GET, "/bytes/2M", m),
            Route::TooLarge(2 << 20)
        );
        assert_eq!(route(&Method::PUT, "/upload", m), Route::Upload);
        assert_eq!(route(&Method::POST, "/upload", m), Route::Upload);
        assert_eq!(
            route(&Method::GET, "/upload", m),
            Route::MethodNotAllowed("PUT, POST")
        );
        assert_eq!(
            route(&Method::DELETE, "/bytes/1", m),
            Route::MethodNotAllowed("GET, HEAD")
        );
        assert_eq!(route(&Method::GET, "/etc/passwd", m), Route::NotFound);
        assert_eq!(route(&Method::GET, "/bytes", m), Route::NotFound);
        for bad in [
            "/bytes/",
            "/bytes/-1",
            "/bytes/1e999",
            "/bytes/abc",
            "/bytes/1.5",
            "/bytes/0.3K",
            "/bytes/1%00",
            "/bytes/../x",
            "/bytes/99999999999999999999999999",
            "/bytes/1X",
        ] {
            assert!(
                matches!(route(&Method::GET, bad, u64::MAX), Route::BadSize(_)),
                "{bad}: {:?}",
                route(&Method::GET, bad, u64::MAX)
            );
        }
    }

    #[test]
    fn http_starts() {
        assert!(is_http_start(b"GET "));
        assert!(is_http_start(b"POST"));
        assert!(!is_http_start(b"FBPF"));
        assert!(!is_http_start(b"get "));
        assert!(!is_http_start(b"\x16\x03\x01\x00"));
    }

    #[test]
    fn zeros_body_is_cut_in_frames_of_the_shared_buffer() {
        let mut p = Payload::Zeros(300_000);
        assert_eq!(p.size_hint().exact(), Some(300_000));
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut total = 0;
        while let Poll::Ready(Some(Ok(f))) = Pin::new(&mut p).poll_frame(&mut cx) {
            total += f.into_data().unwrap().len();
        }
        assert_eq!(total, 300_000);
        assert!(p.is_end_stream());
    }
}
