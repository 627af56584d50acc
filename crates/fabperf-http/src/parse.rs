//! The load generator's HTTP/1.x response parser.
//!
//! Incremental and allocation-free: the caller keeps a read buffer, hands
//! the parser what it holds, and drops the bytes the parser consumed. The
//! head is parsed with `httparse` once it is complete; the body is framed
//! by `Content-Length`, chunked transfer coding or the end of the
//! connection, and counted, not kept. Every part a server controls is
//! bounded: the head ([`MAX_HEAD`], [`MAX_HEADERS`]), interim responses,
//! chunk-size lines and trailers; a violation is a [`ParseError`].

use std::fmt;

/// Largest response head (status line and headers).
pub const MAX_HEAD: usize = 64 * 1024;
/// Most header fields in a head.
pub const MAX_HEADERS: usize = 64;
/// Most interim (1xx) responses before the final one.
pub const MAX_INTERIM: u32 = 8;
/// Longest chunk-size line (size and extensions).
pub const MAX_CHUNK_LINE: usize = 4096;
/// Largest trailer section.
pub const MAX_TRAILERS: usize = 64 * 1024;

/// A response the server sent that is not valid HTTP/1.x, or exceeds a
/// bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// The head grew past [`MAX_HEAD`] without ending.
    HeadTooLarge,
    /// The status line or a header is malformed.
    BadHead(String),
    /// `Content-Length` is not a number, or several disagree.
    BadLength,
    /// A chunk-size line or a chunk's end is malformed.
    BadChunk(&'static str),
    /// The trailers grew past [`MAX_TRAILERS`].
    TrailersTooLarge,
    /// More than [`MAX_INTERIM`] interim responses.
    TooManyInterim,
    /// A `101 Switching Protocols` the client never asked for.
    Upgrade,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::HeadTooLarge => {
                write!(f, "response head longer than {MAX_HEAD} bytes")
            }
            ParseError::BadHead(e) => write!(f, "malformed response head: {e}"),
            ParseError::BadLength => write!(f, "malformed or conflicting Content-Length"),
            ParseError::BadChunk(e) => write!(f, "malformed chunked body: {e}"),
            ParseError::TrailersTooLarge => {
                write!(f, "trailers longer than {MAX_TRAILERS} bytes")
            }
            ParseError::TooManyInterim => {
                write!(f, "more than {MAX_INTERIM} interim (1xx) responses")
            }
            ParseError::Upgrade => write!(f, "unrequested protocol switch (101)"),
        }
    }
}

impl std::error::Error for ParseError {}

/// A complete response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// The connection may carry another request.
    pub keep_alive: bool,
    /// Body bytes (after chunk decoding).
    pub body_bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for a complete head; `searched` bytes were already scanned
    /// for its end.
    Head {
        searched: usize,
    },
    Length {
        remaining: u64,
    },
    ChunkSize,
    ChunkData {
        remaining: u64,
    },
    ChunkEnd,
    Trailers {
        seen: usize,
    },
    UntilClose,
    Done,
}

/// One response at a time; [`ResponseParser::reset`] before the next.
#[derive(Debug, Clone)]
pub struct ResponseParser {
    state: State,
    head_request: bool,
    status: u16,
    keep_alive: bool,
    body: u64,
    interim: u32,
}

/// What one call to [`ResponseParser::parse`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Bytes of the input the parser used; the caller drops them.
    pub consumed: usize,
    /// The response, once complete.
    pub done: Option<Response>,
}

impl ResponseParser {
    /// A parser for the response to a request; `head_request` for `HEAD`
    /// (whose response has no body whatever its headers say).
    pub fn new(head_request: bool) -> ResponseParser {
        ResponseParser {
            state: State::Head { searched: 0 },
            head_request,
            status: 0,
            keep_alive: false,
            body: 0,
            interim: 0,
        }
    }

    /// Ready for the next response on the same connection.
    pub fn reset(&mut self) {
        *self = ResponseParser::new(self.head_request);
    }

    /// True before any byte of the current response was consumed.
    pub fn at_start(&self) -> bool {
        matches!(self.state, State::Head { searched: 0 }) && self.interim == 0
    }

    /// Parse what `buf` holds. Bytes the parser cannot use yet (a partial
    /// head or chunk-size line) are left unconsumed: call again with them
    /// and more. Bytes after a complete response are left unconsumed too
    /// (a pipelined or unsolicited response).
    pub fn parse(&mut self, buf: &[u8]) -> Result<Step, ParseError> {
        let mut pos = 0;
        loop {
            let rest = &buf[pos..];
            match self.state {
                State::Done => {
                    return Ok(Step {
                        consumed: pos,
                        done: Some(self.response()),
                    })
                }
                State::Head { searched } => {
                    let Some(n) = self.head(rest, searched)? else {
                        return Ok(Step {
                            consumed: pos,
                            done: None,
                        });
                    };
                    pos += n;
                }
                State::Length { remaining } => {
                    let take = (rest.len() as u64).min(remaining);
                    pos += take as usize;
                    self.body += take;
                    if take == remaining {
                        self.state = State::Done;
                    } else {
                        self.state = State::Length {
                            remaining: remaining - take,
                        };
                        return Ok(Step {
                            consumed: pos,
                            done: None,
                        });
                    }
                }
                State::UntilClose => {
                    pos += rest.len();
                    self.body += rest.len() as u64;
                    return Ok(Step {
                        consumed: pos,
                        done: None,
                    });
                }
                State::ChunkSize => {
                    let Some((line, n)) = line(rest, MAX_CHUNK_LINE)
                        .map_err(|_| ParseError::BadChunk("chunk-size line too long"))?
                    else {
                        return Ok(Step {
                            consumed: pos,
                            done: None,
                        });
                    };
                    let size = chunk_size(line)?;
                    pos += n;
                    self.state = if size == 0 {
                        State::Trailers { seen: 0 }
                    } else {
                        State::ChunkData { remaining: size }
                    };
                }
                State::ChunkData { remaining } => {
                    let take = (rest.len() as u64).min(remaining);
                    pos += take as usize;
                    self.body += take;
                    if take == remaining {
                        self.state = State::ChunkEnd;
                    } else {
                        self.state = State::ChunkData {
                            remaining: remaining - take,
                        };
                        return Ok(Step {
                            consumed: pos,
                            done: None,
                        });
                    }
                }
                State::ChunkEnd => match rest {
                    [] | [b'\r'] => {
                        return Ok(Step {
                            consumed: pos,
                            done: None,
                        })
                    }
                    [b'\r', b'\n', ..] => {
                        pos += 2;
                        self.state = State::ChunkSize;
                    }
                    [b'\n', ..] => {
                        pos += 1;
                        self.state = State::ChunkSize;
                    }
                    _ => return Err(ParseError::BadChunk("no line end after chunk data")),
                },
                State::Trailers { seen } => {
                    let room = MAX_TRAILERS.saturating_sub(seen);
                    let Some((l, n)) =
                        line(rest, room).map_err(|_| ParseError::TrailersTooLarge)?
                    else {
                        return Ok(Step {
                            consumed: pos,
                            done: None,
                        });
                    };
                    pos += n;
                    if l.is_empty() {
                        self.state = State::Done;
                    } else {
                        self.state = State::Trailers { seen: seen + n };
                    }
                }
            }
        }
    }

    /// The connection ended: the response, if the end completes it (a body
    /// delimited by the close), else `None` (it was cut short).
    pub fn eof(&mut self) -> Option<Response> {
        match self.state {
            State::UntilClose | State::Done => {
                self.state = State::Done;
                Some(self.response())
            }
            _ => None,
        }
    }

    fn response(&self) -> Response {
        Response {
            status: self.status,
            keep_alive: self.keep_alive,
            body_bytes: self.body,
        }
    }

    /// Parse a head once it is complete: the bytes it took, or `None`.
    fn head(&mut self, rest: &[u8], searched: usize) -> Result<Option<usize>, ParseError> {
        // Usually the whole head is there at the first look: parse it at
        // once. After that, look for the blank line only in what was not
        // scanned before (a slow server must not make parsing quadratic).
        let end = if searched == 0 && rest.len() <= MAX_HEAD {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            match httparse::Response::new(&mut headers).parse(rest) {
                Ok(httparse::Status::Complete(n)) => Some(n),
                Ok(httparse::Status::Partial) => None,
                Err(e) => return Err(ParseError::BadHead(e.to_string())),
            }
        } else {
            let from = searched.saturating_sub(3).min(rest.len());
            head_end(&rest[from..]).map(|e| e + from)
        };
        let Some(end) = end else {
            if rest.len() >= MAX_HEAD {
                return Err(ParseError::HeadTooLarge);
            }
            self.state = State::Head {
                searched: rest.len(),
            };
            return Ok(None);
        };
        if end > MAX_HEAD {
            return Err(ParseError::HeadTooLarge);
        }
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut r = httparse::Response::new(&mut headers);
        let n = match r.parse(&rest[..end]) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => {
                return Err(ParseError::BadHead("incomplete head".into()))
            }
            Err(e) => return Err(ParseError::BadHead(e.to_string())),
        };
        let status = r.code.unwrap_or(0);
        let http11 = r.version == Some(1);
        let mut length: Option<u64> = None;
        let mut chunked = false;
        let mut other_coding = false;
        let mut close = false;
        let mut keep = false;
        for h in r.headers.iter() {
            if h.name.eq_ignore_ascii_case("content-length") {
                let v = content_length(h.value)?;
                if length.is_some_and(|l| l != v) {
                    return Err(ParseError::BadLength);
                }
                length = Some(v);
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                for c in tokens(h.value) {
                    // Only the last coding frames the body.
                    chunked = c.eq_ignore_ascii_case(b"chunked");
                    other_coding |= !chunked;
                }
            } else if h.name.eq_ignore_ascii_case("connection") {
                for c in tokens(h.value) {
                    close |= c.eq_ignore_ascii_case(b"close");
                    keep |= c.eq_ignore_ascii_case(b"keep-alive");
                }
            }
        }
        if (100..200).contains(&status) {
            if status == 101 {
                return Err(ParseError::Upgrade);
            }
            self.interim += 1;
            if self.interim > MAX_INTERIM {
                return Err(ParseError::TooManyInterim);
            }
            self.state = State::Head { searched: 0 };
            return Ok(Some(n));
        }
        self.status = status;
        self.keep_alive = if http11 { !close } else { keep && !close };
        self.state = if self.head_request || status == 204 || status == 304 {
            State::Done
        } else if chunked {
            State::ChunkSize
        } else if other_coding {
            // A coding other than chunked last: the body runs to the close
            // (RFC 9112 §6.3).
            self.keep_alive = false;
            State::UntilClose
        } else if let Some(l) = length {
            if l == 0 {
                State::Done
            } else {
                State::Length { remaining: l }
            }
        } else {
            self.keep_alive = false;
            State::UntilClose
        };
        Ok(Some(n))
    }
}

/// Offset just past the blank line that ends a head (`\r\n\r\n` or `\n\n`).
fn head_end(b: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\n' {
            match &b[i + 1..] {
                [b'\n', ..] => return Some(i + 2),
                [b'\r', b'\n', ..] => return Some(i + 3),
                _ => {}
            }
        }
        i += 1;
    }
    None
}

/// One line (without its `\r\n` or `\n`) and the bytes it took, if a whole
/// line of at most `max` bytes is there; `Err` when none fits in `max`.
fn line(b: &[u8], max: usize) -> Result<Option<(&[u8], usize)>, ()> {
    let lim = b.len().min(max);
    match b[..lim].iter().position(|&c| c == b'\n') {
        Some(i) => {
            let l = &b[..i];
            let l = l.strip_suffix(b"\r").unwrap_or(l);
            Ok(Some((l, i + 1)))
        }
        None if b.len() >= max => Err(()),
        None => Ok(None),
    }
}

/// The size in a chunk-size line: hex digits, then optional whitespace and
/// extensions after `;`.
fn chunk_size(line: &[u8]) -> Result<u64, ParseError> {
    let mut v: u64 = 0;
    let mut digits = 0;
    let mut i = 0;
    while i < line.len() {
        let d = match line[i] {
            c @ b'0'..=b'9' => c - b'0',
            c @ b'a'..=b'f' => c - b'a' + 10,
            c @ b'A'..=b'F' => c - b'A' + 10,
            _ => break,
        };
        v = v
            .checked_mul(16)
            .and_then(|v| v.checked_add(u64::from(d)))
            .ok_or(ParseError::BadChunk("chunk size overflows"))?;
        digits += 1;
        i += 1;
    }
    if digits == 0 {
        return Err(ParseError::BadChunk("chunk-size line without a size"));
    }
    let rest = &line[i..];
    let rest_trim = rest
        .iter()
        .position(|&c| c != b' ' && c != b'\t')
        .map_or(&[][..], |p| &rest[p..]);
    if !rest_trim.is_empty() && rest_trim[0] != b';' {
        return Err(ParseError::BadChunk("garbage after the chunk size"));
    }
    Ok(v)
}

/// A Content-Length value: digits only (a list of equal values is allowed,
/// as RFC 9110 §8.6 permits).
fn content_length(v: &[u8]) -> Result<u64, ParseError> {
    let mut out: Option<u64> = None;
    for part in v.split(|&c| c == b',') {
        let t = trim(part);
        if t.is_empty() || t.len() > 19 || !t.iter().all(u8::is_ascii_digit) {
            return Err(ParseError::BadLength);
        }
        let n: u64 = std::str::from_utf8(t)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or(ParseError::BadLength)?;
        if out.is_some_and(|o| o != n) {
            return Err(ParseError::BadLength);
        }
        out = Some(n);
    }
    out.ok_or(ParseError::BadLength)
}

fn trim(b: &[u8]) -> &[u8] {
    let s = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let e = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(s, |e| e + 1);
    &b[s..e.max(s)]
}

/// Comma-separated tokens of a header value, trimmed, empty ones skipped.
fn tokens(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    v.split(|&c| c == b',').map(trim).filter(|t| !t.is_empty())
}

/// Run a whole input through a parser in pieces of `step` bytes, keeping
/// unconsumed bytes as a real connection does; the responses it completes
/// (and the end-of-input one). For tests and the fuzz target.
pub fn parse_all(
    input: &[u8],
    step: usize,
    head_request: bool,
) -> Result<Vec<Response>, ParseError> {
    let mut p = ResponseParser::new(head_request);
    let mut out = Vec::new();
    let mut held: Vec<u8> = Vec::new();
    let step = step.max(1);
    for piece in input.chunks(step) {
        held.extend_from_slice(piece);
        loop {
            let s = p.parse(&held)?;
            assert!(s.consumed <= held.len());
            held.drain(..s.consumed);
            match s.done {
                Some(r) => {
                    out.push(r);
                    p.reset();
                    if held.is_empty() {
                        break;
                    }
                }
                None => break,
            }
        }
    }
    if let Some(r) = p.eof() {
        out.push(r);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(input: &[u8]) -> Result<Response, ParseError> {
        let all = parse_all(input, input.len(), false)?;
        // Byte by byte gives the same answer.
        assert_eq!(parse_all(input, 1, false)?, all);
        assert_eq!(all.len(), 1, "{all:?}");
        Ok(all[0])
    }

    #[test]
    fn content_length_body() {
        let r = one(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello").unwrap();
        assert_eq!(
            r,
            Response {
                status: 200,
                keep_alive: true,
                body_bytes: 5
            }
        );
    }

    #[test]
    fn chunked_body_with_extensions_and_trailers() {
        let r = one(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\n",
        )
        .unwrap();
        assert_eq!(r.body_bytes, 15);
        assert!(r.keep_alive);
    }

    #[test]
    fn close_delimited_body_ends_at_eof() {
        let r = one(b"HTTP/1.1 200 OK\r\n\r\nabc").unwrap();
        assert_eq!(r.body_bytes, 3);
        assert!(!r.keep_alive);
        let r = one(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx").unwrap();
        assert!(!r.keep_alive, "HTTP/1.0 closes unless keep-alive");
        let r = one(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx")
            .unwrap();
        assert!(r.keep_alive);
        let r = one(b"HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
            .unwrap();
        assert_eq!(r.status, 404);
        assert!(!r.keep_alive);
    }

    #[test]
    fn interim_responses_are_skipped_head_has_no_body() {
        let r = one(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .unwrap();
        assert_eq!((r.status, r.body_bytes), (200, 2));
        let all = parse_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", 3, true).unwrap();
        assert_eq!(all[0].body_bytes, 0);
    }

    #[test]
    fn pipelined_responses_are_separate() {
        let two = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxHTTP/1.1 204 No Content\r\n\r\n";
        for step in [1, 2, 7, two.len()] {
            let all = parse_all(two, step, false).unwrap();
            assert_eq!(all.len(), 2, "step {step}: {all:?}");
            assert_eq!(all[1].status, 204);
        }
    }

    #[test]
    fn hostile_responses_are_errors() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n".to_vec(),
                "Length",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n".to_vec(),
                "Length",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n".to_vec(),
                "Length",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 0x10\r\n\r\n".to_vec(),
                "Length",
            ),
            (b"SSH-2.0-OpenSSH\r\n\r\n".to_vec(), "head"),
            (b"HTTP/1.1 2000 OK\r\n\r\n".to_vec(), "head"),
            (b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n".to_vec(), "head"),
            (b"HTTP/1.1 101 Switching\r\n\r\n".to_vec(), "switch"),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n".to_vec(),
                "size",
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n11111111111111111\r\n"
                    .to_vec(),
                "overflow",
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nxy".to_vec(),
                "line end",
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5 x\r\n".to_vec(),
                "garbage",
            ),
        ];
        for (input, word) in cases {
            let e = parse_all(&input, input.len(), false)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(word),
                "{:?}: {e}",
                String::from_utf8_lossy(&input)
            );
        }
        // Too many headers.
        let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert!(parse_all(&many, 100, false).is_err());
        // A head that never ends.
        let mut endless = b"HTTP/1.1 200 OK\r\nX-Long: ".to_vec();
        endless.extend(vec![b'a'; MAX_HEAD + 10]);
        for step in [4096, endless.len()] {
            assert_eq!(
                parse_all(&endless, step, false).unwrap_err(),
                ParseError::HeadTooLarge
            );
        }
        // Garbage is refused at once, not buffered up to the limit.
        assert!(matches!(
            parse_all(&[b'a'; 100], 100, false).unwrap_err(),
            ParseError::BadHead(_)
        ));
        // Endless interim responses.
        let interim = b"HTTP/1.1 100 Continue\r\n\r\n".repeat(MAX_INTERIM as usize + 1);
        assert_eq!(
            parse_all(&interim, interim.len(), false).unwrap_err(),
            ParseError::TooManyInterim
        );
        // An endless chunk-size line and endless trailers.
        let mut long = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;".to_vec();
        long.extend(vec![b'x'; MAX_CHUNK_LINE]);
        assert!(parse_all(&long, 512, false).is_err());
        let mut tr = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n".to_vec();
        for _ in 0..(MAX_TRAILERS / 8 + 1) {
            tr.extend_from_slice(b"X: 123\r\n");
        }
        assert_eq!(
            parse_all(&tr, 1000, false).unwrap_err(),
            ParseError::TrailersTooLarge
        );
    }

    #[test]
    fn a_cut_response_is_incomplete() {
        let mut p = ResponseParser::new(false);
        let s = p
            .parse(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
            .unwrap();
        assert!(s.done.is_none());
        assert!(p.eof().is_none());
        let mut p = ResponseParser::new(false);
        assert!(p.at_start());
        assert!(p.eof().is_none());
    }
}
