//! The Pushgateway client against a fake gateway on 127.0.0.1.

use fabperf_report::openmetrics::{push, push_url, PushError};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::time::Duration;

/// Accept one request, answer `status` with `reply`; return what was sent.
fn fake_gateway(status: u16, reply: &'static str) -> (String, std::thread::JoinHandle<String>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let h = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut head = String::new();
        let mut len = 0usize;
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).unwrap() == 0 {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap();
            }
            head.push_str(&line);
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0u8; len];
        r.read_exact(&mut body).unwrap();
        let mut s = s;
        write!(
            s,
            "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
            reply.len()
        )
        .unwrap();
        head + &String::from_utf8(body).unwrap()
    });
    (url, h)
}

#[test]
fn puts_the_run_group_with_the_text_format() {
    let (base, h) = fake_gateway(200, "");
    let url = push_url(&base, 7).unwrap();
    push(&url, "fabperf_x{run=\"7\"} 1\n", Duration::from_secs(10)).unwrap();
    let req = h.join().unwrap();
    assert!(
        req.starts_with("PUT /metrics/job/fabperf/run/7 HTTP/1.1\r\n"),
        "{req}"
    );
    assert!(
        req.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{req}"
    );
    assert!(req.ends_with("\r\n\r\nfabperf_x{run=\"7\"} 1\n"), "{req}");
}

#[test]
fn gateway_errors_are_reported_with_their_body() {
    let (base, h) = fake_gateway(400, "pushed metrics are invalid or inconsistent\u{1b}[31m");
    let url = push_url(&base, 1).unwrap();
    let e = push(&url, "x 1\n", Duration::from_secs(10)).unwrap_err();
    h.join().unwrap();
    match &e {
        PushError::Status { status, body, .. } => {
            assert_eq!(*status, 400);
            assert!(body.starts_with("pushed metrics are invalid"), "{body}");
            assert!(!body.contains('\u{1b}'), "control characters are dropped");
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("answered 400"), "{e}");
}

#[test]
fn an_unreachable_gateway_is_an_error_not_a_hang() {
    // A port that was just free: nothing listens there.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = push_url(&format!("http://127.0.0.1:{port}"), 1).unwrap();
    let e = push(&url, "x 1\n", Duration::from_secs(5)).unwrap_err();
    assert!(matches!(e, PushError::Http { .. }), "{e:?}");
    assert!(e.to_string().contains("127.0.0.1"), "{e}");
}
