//! One connection from its first bytes to its end: sorted by its magic
//! (fabperf control, fabperf data, HTTP), its handshake, then its test, with
//! a panic in the test turned into an error for the client.

use super::*;

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".into()
    }
}

/// Wait (on the event loop) for a new connection's first four bytes, then
/// hand it on: fabperf connections to a thread of their own, HTTP to the
/// HTTP server; anything else gets a one-line answer and is closed.
pub(super) async fn sort_connection(
    sh: Arc<Shared>,
    stream: TcpStream,
    source: Source,
    id: u64,
    mut cancel: tokio::sync::oneshot::Receiver<()>,
    accepted: Instant,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let t = sh.limits.io_timeout;
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let peer_addr = stream
        .peer_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let s = if stream.set_nonblocking(true).is_ok() {
        tokio::net::TcpStream::from_std(stream).ok()
    } else {
        None
    };
    let Some(mut s) = s else {
        sh.sorting().remove(id);
        return;
    };
    let mut magic = [0u8; 4];
    let read = tokio::select! {
        r = tokio::time::timeout_at(later(accepted, t).into(), s.read_exact(&mut magic)) => Some(r),
        _ = &mut cancel => None,
    };
    let was_listed = sh.sorting().remove(id);
    match read {
        // Closed by the agent to make room (counted there).
        None => return,
        Some(Err(_)) => {
            if was_listed {
                sh.sorting().timed_out += 1;
            }
            return;
        }
        Some(Ok(Err(e))) => {
            if !sh.stop.load(Ordering::SeqCst) {
                sh.log(&format!("{peer}: no preamble ({e}); closed"));
            }
            return;
        }
        Some(Ok(Ok(_))) => {}
    }
    if magic == DATA_MAGIC || magic == MAGIC {
        let stream = match s.into_std() {
            Ok(st) if st.set_nonblocking(false).is_ok() => st,
            _ => return,
        };
        start_fabperf_connection(&sh, id, stream, source, magic, accepted);
        return;
    }
    if fabperf_http::is_http_start(&magic) {
        match &sh.http {
            Some(h) => h.clone().serve(s, magic, peer_addr).await,
            None => {
                fabperf_http::refuse(
                    &mut s,
                    "503 Service Unavailable",
                    fabperf_http::REASON_HTTP_OFF,
                    "fabperf agent: HTTP is off on this agent; start it with `fabperf server --http` \
                     (docs/http.md)",
                )
                .await;
                sh.log(&format!(
                    "{peer}: an HTTP request, but HTTP is off (fabperf server --http); answered 503"
                ));
            }
        }
        return;
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        let _ = s
            .write_all(b"fabperf agent: this port speaks the fabperf protocol (and HTTP with --http) only\n")
            .await;
        let _ = s.shutdown().await;
    })
    .await;
    // Drain what the peer already sent so the close is not a reset that
    // destroys our message before it is read.
    let _ = tokio::time::timeout(Duration::from_millis(200), async {
        let mut sink = [0u8; 4096];
        let mut drained = 0;
        while drained < 65536 {
            match s.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    })
    .await;
    sh.log(&format!(
        "{peer}: not a fabperf client (first bytes {magic:02x?}); closed"
    ));
}

/// A connection that sent fabperf's magic: a thread runs its handshake
/// (capped as [`Pending`] says) and its test.
fn start_fabperf_connection(
    sh: &Arc<Shared>,
    id: u64,
    stream: TcpStream,
    source: Source,
    magic: [u8; 4],
    accepted: Instant,
) {
    if sh.conns.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
        return;
    }
    // The agent's own backstop: a little after the handshake's own
    // deadline (which gives the better log line) the timer closes it.
    let deadline = later(accepted, sh.limits.io_timeout + Duration::from_millis(250));
    if !sh.pending().admit(id, &stream, source, deadline) {
        return;
    }
    sh.conns.fetch_add(1, Ordering::SeqCst);
    let slot = ConnSlot {
        shared: sh.clone(),
        id,
    };
    let spawned = std::thread::Builder::new()
        .name("fabperf-conn".into())
        .spawn(move || {
            let sh = slot.shared.clone();
            let r = catch_unwind(AssertUnwindSafe(|| {
                handle_connection(&sh, stream, id, magic, accepted)
            }));
            if let Err(p) = r {
                sh.log(&format!(
                    "internal error (a bug) in a connection thread: {}",
                    panic_text(&p)
                ));
            }
            drop(slot);
        });
    if let Err(e) = spawned {
        sh.log(&format!("cannot start a connection thread: {e}"));
    }
}

fn handle_connection(
    sh: &Shared,
    mut stream: TcpStream,
    id: u64,
    magic: [u8; 4],
    accepted: Instant,
) {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let t = sh.limits.io_timeout;
    let _ = stream.set_read_timeout(Some(t));
    if magic == DATA_MAGIC {
        let why = match sh.hub.route(stream, t) {
            Routed::ToTest => return,
            Routed::NoCookie if sh.was_closed_by_agent(id) => return,
            Routed::NoCookie => "no cookie arrived",
            Routed::Refused(RefusalReason::OtherAgent) => {
                "its cookie is another agent's: the client's address balances connections \
                 over several agents (a Service with several endpoints); told the client"
            }
            Routed::Refused(RefusalReason::Ended) => {
                "its test no longer waits for it; told the client"
            }
            Routed::Refused(RefusalReason::Full) => {
                "its test already has every connection it asked for; told the client"
            }
            Routed::Refused(RefusalReason::Unknown) => {
                "its cookie is unknown (no agent sharing this token issued it); told the client"
            }
        };
        sh.log(&format!("{peer}: data connection refused: {why}"));
        return;
    }
    let mut rest = [0u8; 4];
    if let Err(e) = stream.read_exact(&mut rest) {
        if !sh.was_closed_by_agent(id) {
            sh.log(&format!("{peer}: truncated preamble ({e}); closed"));
        }
        return;
    }
    let mut ctl = match Control::new(stream, t) {
        Ok(c) => c,
        Err(e) => {
            sh.log(&format!("{peer}: {e}"));
            return;
        }
    };
    // The whole handshake, preamble to start, has the I/O timeout.
    ctl.set_deadline(Some(later(accepted, t)));
    if ctl.send_preamble().is_err() {
        return;
    }
    let version = u16::from_be_bytes([rest[0], rest[1]]);
    if version != PROTO_VERSION {
        let msg = format!(
            "client speaks protocol v{version}, this agent (fabperf {}) v{PROTO_VERSION}; run the same fabperf version on both ends",
            fabperf_results::FABPERF_VERSION
        );
        ctl.send_error(ErrorCode::VersionMismatch, &msg);
        sh.log(&format!("{peer}: {msg}"));
        return;
    }
    let mut started = false;
    if let Err(e) = serve_control(sh, &mut ctl, id, &mut started) {
        if !e.connection_lost {
            ctl.send_error(e.code, &e.message);
        }
        // A handshake the timer closed is counted in its summary line.
        if started || !e.connection_lost || !sh.was_closed_by_agent(id) {
            sh.log(&format!("{peer}: {e}"));
        }
    }
}

/// A client's message that ends its part of the handshake early.
fn client_gave_up(code: ErrorCode, message: String) -> ServeError {
    let what = match code {
        ErrorCode::AuthRequired | ErrorCode::AuthFailed => "authentication failed",
        _ => "the client gave up",
    };
    ServeError {
        code,
        message: format!("{what}: the client says: {message}"),
        connection_lost: true,
    }
}

fn serve_control(
    sh: &Shared,
    ctl: &mut Control,
    id: u64,
    started: &mut bool,
) -> Result<(), ServeError> {
    let peer = ctl.peer();
    let nonce = sh.token.as_ref().map(|_| auth::new_nonce());
    ctl.send(&Msg::Hello {
        fabperf_version: fabperf_results::FABPERF_VERSION.to_string(),
        auth_required: sh.token.is_some(),
        nonce: nonce.clone(),
        tests: sh.names(),
        agent: sh.identity.clone(),
        capacity: Some(sh.capacity),
    })?;
    if let (Some(token), Some(nonce)) = (&sh.token, &nonce) {
        // Nothing but a small Auth frame is read from a peer that has not
        // proven it holds the token.
        ctl.set_max_frame(PRE_AUTH_FRAME);
        match ctl.recv("the client's authentication") {
            Ok(Msg::Auth {
                nonce: client_nonce,
                proof,
            }) => {
                if !auth::verify(token, Side::Client, nonce, &client_nonce, &proof) {
                    return Err(ServeError::new(
                        ErrorCode::AuthFailed,
                        "authentication failed: wrong shared secret (the client's --token-file does not match the agent's)",
                    ));
                }
                ctl.send(&Msg::AuthOk {
                    proof: auth::prove(token, Side::Agent, nonce, &client_nonce),
                })?;
            }
            Ok(Msg::Start { .. }) => {
                return Err(ServeError::new(
                    ErrorCode::AuthRequired,
                    "authentication failed: the client sent no proof; this agent requires a shared secret: pass --token-file with the agent's token",
                ))
            }
            Ok(Msg::Bye) => return Ok(()),
            Ok(other) => {
                return Err(ServeError::new(
                    ErrorCode::BadFrame,
                    format!("expected auth, got {}", other.kind()),
                ))
            }
            Err(ProtoError::Remote { code, message }) => {
                return Err(client_gave_up(code, message))
            }
            Err(e @ ProtoError::FrameTooLarge { .. }) => {
                return Err(ServeError::new(
                    ErrorCode::BadFrame,
                    format!("before authentication: {e}"),
                ))
            }
            Err(e) => return Err(e.into()),
        }
        ctl.set_max_frame(MAX_FRAME);
    } else {
        ctl.set_max_frame(OPEN_START_FRAME);
    }
    let (test, params, group) = match ctl.recv("the client's start request") {
        Ok(Msg::Start {
            test,
            params,
            group,
            ..
        }) => (test, params, group),
        Ok(Msg::Bye) => return Ok(()),
        Ok(other) => {
            return Err(ServeError::new(
                ErrorCode::BadFrame,
                format!("expected start, got {}", other.kind()),
            ))
        }
        // The client refused (an unknown test, or an agent that cannot
        // prove a token).
        Err(ProtoError::Remote { code, message }) => return Err(client_gave_up(code, message)),
        Err(e) => return Err(e.into()),
    };
    // The handshake is over: no deadline, no eviction from here on.
    if !sh.handshake_done(id) {
        return Err(ServeError {
            code: ErrorCode::Timeout,
            message: "the handshake took too long; closed".into(),
            connection_lost: true,
        });
    }
    *started = true;
    ctl.set_deadline(None);
    ctl.set_max_frame(MAX_FRAME);
    let Some(kind) = sh.kinds.iter().find(|k| k.name() == test) else {
        return Err(ServeError::new(
            ErrorCode::UnknownTest,
            format!(
                "this agent does not serve test '{test}'; it serves: {}",
                sh.names().join(", ")
            ),
        ));
    };
    if let Some(g) = &group {
        if !valid_group(g) {
            return Err(ServeError::bad_request(
                "a test group id is 8 to 64 lower-case hex digits",
            ));
        }
    }
    let clock = Arc::new(TestClock::new(&sh.limits, ctl.stream().try_clone().ok()));
    {
        let mut busy = sh.busy();
        admit(&busy, group.as_deref(), sh.capacity.group_tests as usize)
            .map_err(|m| ServeError::new(ErrorCode::Busy, m))?;
        busy.push(BusyInfo {
            id,
            test: test.clone(),
            peer,
            since: Instant::now(),
            clock: clock.clone(),
            group,
        });
    }
    let guard = BusyGuard(&sh.busy, id);
    let t0 = Instant::now();
    ctl.set_stop_flag(clock.stop_flag());
    let mut ctx = ServeCtx {
        ctl,
        limits: sh.limits,
        data: &sh.hub,
        clock: &clock,
    };
    let res = catch_unwind(AssertUnwindSafe(|| kind.serve(&mut ctx, params)));
    // Free before the last frame goes out, so a client that starts its next
    // test as soon as it has read it does not find the agent busy.
    drop(guard);
    if clock.is_stopped() {
        let msg = format!(
            "{test} stopped by the agent at its time limit: {} (agent options --max-duration, --timeout)",
            clock.describe()
        );
        sh.log(&format!("{peer}: {msg}"));
        ctl.send_error(ErrorCode::LimitExceeded, &msg);
        return Ok(());
    }
    match res {
        Ok(Ok(())) => sh.log(&format!(
            "{peer}: {test} done in {:.1} s",
            t0.elapsed().as_secs_f64()
        )),
        Ok(Err(e)) => {
            sh.log(&format!("{peer}: {test} failed: {e}"));
            if !e.connection_lost {
                ctl.send_error(e.code, &format!("{test}: {}", e.message));
            }
        }
        Err(p) => {
            sh.log(&format!(
                "{peer}: {test} failed: internal error (a bug): {}",
                panic_text(&p)
            ));
            ctl.send_error(
                ErrorCode::Internal,
                &format!(
                    "{test}: the agent hit an internal error (a bug); its log has the details"
                ),
            );
        }
    }
    Ok(())
}
