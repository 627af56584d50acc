//! The runner's API calls against a stand-in API server: the run Lease
//! (taken, renewed, released; waited for and refused with its holder named
//! when another run holds it; taken over when expired; a conflicting writer
//! loses cleanly) and the policy-scale NetworkPolicies held at a count.

use fabperf_k8s::api::test_support::FakeApiServer;
use fabperf_k8s::api::{ApiClient, LeaseError};
use serde_json::json;
use std::time::{Duration, Instant};

fn client(api: &FakeApiServer) -> ApiClient {
    ApiClient::at(&api.url(), "fabperf").unwrap()
}

const D: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(50);

#[test]
fn the_run_lease_is_taken_renewed_and_released() {
    let api = FakeApiServer::start();
    let c = client(&api);
    c.acquire_lease("fabperf-run", "run-a", D, Duration::ZERO, POLL, &mut |_| {})
        .unwrap();
    let l = api.state.lock().unwrap().leases["fabperf/fabperf-run"].clone();
    assert_eq!(l["spec"]["holderIdentity"], "run-a");
    assert_eq!(l["spec"]["leaseDurationSeconds"], 60);
    assert_eq!(l["apiVersion"], "coordination.k8s.io/v1");
    assert_eq!(l["metadata"]["namespace"], "fabperf");
    // Taking it again as the same holder is a renewal.
    c.acquire_lease("fabperf-run", "run-a", D, Duration::ZERO, POLL, &mut |_| {})
        .unwrap();
    c.renew_lease("fabperf-run", "run-a").unwrap();
    // Another run is refused at once (no wait), naming the holder.
    let mut told = Vec::new();
    let e = c
        .acquire_lease("fabperf-run", "run-b", D, Duration::ZERO, POLL, &mut |h| {
            told.push(h.identity.clone())
        })
        .unwrap_err();
    match &e {
        LeaseError::Held { lease, holder } => {
            assert_eq!(lease, "fabperf/fabperf-run");
            assert_eq!(holder.identity, "run-a");
            assert!(holder.expires_in_s > 50.0, "{holder:?}");
        }
        other => panic!("{other}"),
    }
    let m = e.to_string();
    assert!(
        m.contains("another run holds the Lease fabperf/fabperf-run: run-a (renewed"),
        "{m}"
    );
    assert_eq!(told, ["run-a"]);
    // Renewing it as the other run fails: it is not theirs.
    assert!(c.renew_lease("fabperf-run", "run-b").is_err());
    // Released: free for the next.
    c.release_lease("fabperf-run", "run-a").unwrap();
    let l = api.state.lock().unwrap().leases["fabperf/fabperf-run"].clone();
    assert!(l["spec"].get("holderIdentity").is_none(), "{l}");
    c.acquire_lease("fabperf-run", "run-b", D, Duration::ZERO, POLL, &mut |_| {})
        .unwrap();
    // Releasing someone else's lease changes nothing.
    c.release_lease("fabperf-run", "run-a").unwrap();
    assert_eq!(
        api.state.lock().unwrap().leases["fabperf/fabperf-run"]["spec"]["holderIdentity"],
        "run-b"
    );
}

#[test]
fn a_second_run_waits_for_the_lease_then_gives_up_or_gets_it() {
    let api = FakeApiServer::start();
    let now = k8s_openapi::jiff::Timestamp::now();
    api.put_lease(
        "fabperf-run",
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"namespace": "fabperf"},
               "spec": {"holderIdentity": "fabperf-run-x1", "leaseDurationSeconds": 60,
                        "renewTime": now.to_string()}}),
    );
    let c = client(&api);
    let t0 = Instant::now();
    let e = c
        .acquire_lease(
            "fabperf-run",
            "me",
            D,
            Duration::from_millis(300),
            POLL,
            &mut |_| {},
        )
        .unwrap_err();
    assert!(matches!(e, LeaseError::Held { .. }), "{e}");
    let waited = t0.elapsed();
    assert!(waited >= Duration::from_millis(250), "{waited:?}");
    // It asked again while waiting.
    let gets = api
        .state
        .lock()
        .unwrap()
        .requests
        .iter()
        .filter(|r| r.starts_with("GET "))
        .count();
    assert!(gets >= 3, "{gets}");
    // The holder releases it while a run waits: the run gets it.
    let api2 = api.state.clone();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        let mut s = api2.lock().unwrap();
        let l = s.leases.get_mut("fabperf/fabperf-run").unwrap();
        l["spec"]["holderIdentity"] = json!(null);
    });
    c.acquire_lease(
        "fabperf-run",
        "me",
        D,
        Duration::from_secs(10),
        POLL,
        &mut |_| {},
    )
    .unwrap();
    releaser.join().unwrap();
}

#[test]
fn an_expired_lease_is_taken_over() {
    let api = FakeApiServer::start();
    let old =
        k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(120);
    api.put_lease(
        "fabperf-run",
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"namespace": "fabperf"},
               "spec": {"holderIdentity": "killed-run", "leaseDurationSeconds": 60,
                        "renewTime": old.to_string(), "leaseTransitions": 3}}),
    );
    let c = client(&api);
    c.acquire_lease("fabperf-run", "me", D, Duration::ZERO, POLL, &mut |_| {})
        .unwrap();
    let l = api.state.lock().unwrap().leases["fabperf/fabperf-run"].clone();
    assert_eq!(l["spec"]["holderIdentity"], "me");
    assert_eq!(l["spec"]["leaseTransitions"], 4);
}

#[test]
fn refusals_of_the_api_are_explained() {
    let api = FakeApiServer::start();
    api.state.lock().unwrap().refuse = Some(403);
    let e = client(&api)
        .acquire_lease("fabperf-run", "me", D, Duration::ZERO, POLL, &mut |_| {})
        .unwrap_err();
    let m = e.to_string();
    assert!(matches!(e, LeaseError::Api(_)), "{m}");
    assert!(m.contains("lacks the permission"), "{m}");
    // No API server at all.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let e = ApiClient::at(&url, "fabperf")
        .unwrap()
        .acquire_lease("fabperf-run", "me", D, Duration::ZERO, POLL, &mut |_| {})
        .unwrap_err();
    assert!(matches!(e, LeaseError::Api(_)), "{e}");
}

#[test]
fn policy_scale_is_held_at_each_count() {
    let api = FakeApiServer::start();
    let c = client(&api);
    assert_eq!(c.apply_policy_scale(5301, 50).unwrap(), (0, 50));
    {
        let s = api.state.lock().unwrap();
        assert_eq!(s.policies.len(), 50);
        let p = &s.policies["fabperf-scale-00001"];
        assert_eq!(p["apiVersion"], "networking.k8s.io/v1");
        assert_eq!(p["metadata"]["namespace"], "fabperf");
        assert_eq!(p["spec"]["ingress"][0]["ports"][0]["port"], 5301);
        // The last admits the namespace's pods: tests still pass.
        assert_eq!(
            s.policies["fabperf-scale-00050"]["spec"]["ingress"][0]["from"][0]["podSelector"],
            json!({})
        );
    }
    // A policy of someone else stays.
    api.state.lock().unwrap().policies.insert(
        "theirs".into(),
        json!({"metadata": {"name": "theirs", "labels": {"team": "x"}}}),
    );
    assert_eq!(c.apply_policy_scale(5301, 3).unwrap(), (50, 3));
    assert_eq!(c.apply_policy_scale(5301, 0).unwrap(), (3, 0));
    let s = api.state.lock().unwrap();
    assert_eq!(s.policies.keys().collect::<Vec<_>>(), ["theirs"]);
}
