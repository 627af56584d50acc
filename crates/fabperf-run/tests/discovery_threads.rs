//! Discovery's threads, alone in its test binary (the process's thread
//! count is what it measures, so no other test may run beside it).

/// Discovery asks at most MAX_PROBE_THREADS agents at once, however many
/// addresses the plan (or a DNS name) gives: 100 agents that accept the
/// connection and never answer cost a bounded number of threads.
#[test]
fn discovery_probes_with_a_bounded_number_of_threads() {
    use std::net::TcpListener;
    let n = 100;
    // 127.0.0.2 ... 127.0.0.101 on one port: loopback addresses whose
    // listeners never accept (the kernel completes the handshake).
    let port = {
        let l = TcpListener::bind("127.0.0.2:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let listeners: Vec<TcpListener> = (2..2 + n)
        .map(|i| TcpListener::bind(format!("127.0.0.{i}:{port}")).unwrap())
        .collect();
    let mut text = String::from("name = \"many\"\n");
    for i in 2..2 + n {
        text.push_str(&format!(
            "[[agents]]\nname = \"a{i}\"\naddr = \"127.0.0.{i}:{port}\"\n"
        ));
    }
    text.push_str(
        "[[tests]]\nkind = \"tcp-lat\"\npattern = \"pairs\"\npairs = [[\"a2\", \"a3\"]]\n",
    );
    let plan = fabperf_run::plan::parse(&text, "p.toml", std::path::Path::new("/")).unwrap();
    let threads = || -> usize {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let base = threads();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let peak = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(threads());
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            peak
        })
    };
    let cfg = fabperf_proto::ClientConfig {
        group: None,
        token: None,
        timeout: std::time::Duration::from_millis(300),
    };
    let mut warnings = Vec::new();
    let r = fabperf_run::exec::discover(&plan, &cfg, &mut |w| warnings.push(w));
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let peak = peak.join().unwrap();
    drop(listeners);
    assert!(r.is_ok(), "{:?}", r.err());
    assert_eq!(warnings.len(), n, "every agent unreachable: {warnings:?}");
    // The sampler itself is one thread.
    assert!(
        peak <= base + 1 + fabperf_run::exec::MAX_PROBE_THREADS,
        "{peak} threads at the peak (from {base})"
    );
}
