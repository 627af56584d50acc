//! What the in-cluster runner does through the Kubernetes API (kube-rs, with
//! the pod's mounted, namespaced ServiceAccount token): hold the run Lease
//! (`coordination.k8s.io/v1`) so two runs never measure at once, and hold
//! N NetworkPolicies for a policy-scale cell. Both need only the Role the
//! render gives the runner, in its own namespace.

use crate::policy::{network_policies, SCALE_LABEL};
use anyhow::{anyhow, Context, Result};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use std::time::{Duration, Instant};

/// The Lease every runner of a namespace takes (`kubectl get lease`).
pub const RUN_LEASE: &str = "fabperf-run";

/// A Kubernetes API client with its own small runtime (the rest of fabperf
/// is synchronous).
pub struct ApiClient {
    rt: tokio::runtime::Runtime,
    client: kube::Client,
    namespace: String,
}

/// Who holds a Lease and until when.
#[derive(Debug, Clone, PartialEq)]
pub struct Holder {
    pub identity: String,
    /// Seconds since its last renewal (None: never renewed).
    pub renewed_s_ago: Option<f64>,
    /// Seconds until it expires without a renewal.
    pub expires_in_s: f64,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.identity)?;
        if let Some(r) = self.renewed_s_ago {
            write!(f, " (renewed {r:.0} s ago")?;
        } else {
            write!(f, " (never renewed")?;
        }
        write!(
            f,
            ", expires in {:.0} s unless renewed)",
            self.expires_in_s.max(0.0)
        )
    }
}

/// Why a Lease was not taken.
#[derive(Debug)]
pub enum LeaseError {
    /// Another run holds it (after waiting as long as allowed).
    Held { lease: String, holder: Holder },
    /// The API refused or could not be reached.
    Api(anyhow::Error),
}

impl std::fmt::Display for LeaseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LeaseError::Held { lease, holder } => write!(
                f,
                "another run holds the Lease {lease}: {holder}; two runs at once would measure each other's traffic (and find the agents busy)"
            ),
            LeaseError::Api(e) => write!(f, "{e:#}"),
        }
    }
}

fn api_err(what: &str, e: kube::Error) -> anyhow::Error {
    let hint = match &e {
        kube::Error::Api(s) if s.code == 403 => {
            " (the runner's ServiceAccount lacks the permission: apply the Role in run/00-runner.yaml)"
        }
        kube::Error::Api(s) if s.code == 401 => {
            " (the ServiceAccount token was refused: is it mounted? automountServiceAccountToken)"
        }
        _ => "",
    };
    anyhow!("{what}: {e}{hint}")
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

fn now() -> Timestamp {
    Timestamp::now()
}

/// Who holds `l` now, unless it is free (no holder, or expired).
fn holder_of(l: &Lease, at: Timestamp) -> Option<Holder> {
    let spec = l.spec.as_ref()?;
    let identity = spec.holder_identity.clone().filter(|h| !h.is_empty())?;
    let duration = f64::from(spec.lease_duration_seconds.unwrap_or(0).max(0));
    let last = spec
        .renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map(|t| t.0);
    let ago = last.map(|t| {
        (at - t)
            .total(k8s_openapi::jiff::Unit::Second)
            .unwrap_or(0.0)
    });
    let expires_in_s = match ago {
        Some(a) => duration - a,
        None => duration,
    };
    if expires_in_s <= 0.0 {
        return None;
    }
    Some(Holder {
        identity,
        renewed_s_ago: spec.renew_time.as_ref().and(ago),
        expires_in_s,
    })
}

impl ApiClient {
    /// The client of a pod: its ServiceAccount token and CA, the API server
    /// from KUBERNETES_SERVICE_HOST/PORT, the pod's namespace.
    pub fn in_cluster() -> Result<ApiClient> {
        let cfg = kube::Config::incluster().map_err(|e| {
            anyhow!("no in-cluster API access: {e}; run this in a pod whose ServiceAccount token is mounted (automountServiceAccountToken: true)")
        })?;
        Self::with_config(cfg)
    }

    /// A client of the API server at `url` (plain http:// for tests),
    /// acting in `namespace`.
    pub fn at(url: &str, namespace: &str) -> Result<ApiClient> {
        let uri: http::Uri = url.parse().with_context(|| format!("API URL {url:?}"))?;
        let mut cfg = kube::Config::new(uri);
        cfg.default_namespace = namespace.to_string();
        cfg.default_retry = false;
        Self::with_config(cfg)
    }

    fn with_config(mut cfg: kube::Config) -> Result<ApiClient> {
        cfg.read_timeout = Some(Duration::from_secs(30));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the API client's runtime")?;
        let namespace = cfg.default_namespace.clone();
        let client = {
            let _g = rt.enter();
            kube::Client::try_from(cfg).context("building the Kubernetes API client")?
        };
        Ok(ApiClient {
            rt,
            client,
            namespace,
        })
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Use another namespace than the client's default.
    pub fn with_namespace(mut self, ns: &str) -> ApiClient {
        self.namespace = ns.to_string();
        self
    }

    fn leases(&self) -> Api<Lease> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Take the Lease `name` for `identity` for `duration` (renew it with
    /// [`ApiClient::renew_lease`] before that passes). A Lease held by
    /// another identity and not expired is waited for, checking every
    /// `poll`, for at most `wait` (`on_wait` is told who holds it, once per
    /// new holder); then [`LeaseError::Held`].
    pub fn acquire_lease(
        &self,
        name: &str,
        identity: &str,
        duration: Duration,
        wait: Duration,
        poll: Duration,
        on_wait: &mut dyn FnMut(&Holder),
    ) -> Result<(), LeaseError> {
        let t0 = Instant::now();
        let api = self.leases();
        let secs = i32::try_from(duration.as_secs().max(1)).unwrap_or(i32::MAX);
        let mut told: Option<String> = None;
        loop {
            let res: Result<Option<Holder>, kube::Error> = self.rt.block_on(async {
                let t = now();
                match api.get_opt(name).await? {
                    None => {
                        let l = Lease {
                            metadata: ObjectMeta {
                                name: Some(name.to_string()),
                                namespace: Some(self.namespace.clone()),
                                labels: Some(
                                    [(
                                        "app.kubernetes.io/part-of".to_string(),
                                        "fabperf".to_string(),
                                    )]
                                    .into(),
                                ),
                                ..Default::default()
                            },
                            spec: Some(LeaseSpec {
                                holder_identity: Some(identity.to_string()),
                                lease_duration_seconds: Some(secs),
                                acquire_time: Some(MicroTime(t)),
                                renew_time: Some(MicroTime(t)),
                                lease_transitions: Some(0),
                                ..Default::default()
                            }),
                        };
                        api.create(&PostParams::default(), &l).await?;
                        Ok(None)
                    }
                    Some(mut l) => {
                        let mine = l.spec.as_ref().and_then(|s| s.holder_identity.as_deref())
                            == Some(identity);
                        if !mine {
                            if let Some(h) = holder_of(&l, t) {
                                return Ok(Some(h));
                            }
                        }
                        let spec = l.spec.get_or_insert_with(Default::default);
                        if !mine {
                            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                            spec.acquire_time = Some(MicroTime(t));
                        }
                        spec.holder_identity = Some(identity.to_string());
                        spec.lease_duration_seconds = Some(secs);
                        spec.renew_time = Some(MicroTime(t));
                        // resourceVersion is kept: a concurrent taker makes
                        // this a 409 Conflict, and the loop looks again.
                        api.replace(name, &PostParams::default(), &l).await?;
                        Ok(None)
                    }
                }
            });
            match res {
                Ok(None) => return Ok(()),
                Ok(Some(h)) => {
                    if told.as_deref() != Some(h.identity.as_str()) {
                        on_wait(&h);
                        told = Some(h.identity.clone());
                    }
                    if t0.elapsed() + poll > wait {
                        return Err(LeaseError::Held {
                            lease: format!("{}/{name}", self.namespace),
                            holder: h,
                        });
                    }
                    std::thread::sleep(poll);
                }
                // Someone else created or changed it between our read and
                // write: look again.
                Err(e) if is_status(&e, 409) => {}
                Err(e) => {
                    return Err(LeaseError::Api(api_err(
                        &format!("taking the Lease {}/{name}", self.namespace),
                        e,
                    )))
                }
            }
        }
    }

    /// Renew the Lease this identity holds. Fails when another took it.
    pub fn renew_lease(&self, name: &str, identity: &str) -> Result<()> {
        let api = self.leases();
        self.rt.block_on(async {
            for _ in 0..3 {
                let mut l = api
                    .get(name)
                    .await
                    .map_err(|e| api_err(&format!("reading the Lease {name}"), e))?;
                let spec = l.spec.get_or_insert_with(Default::default);
                if spec.holder_identity.as_deref() != Some(identity) {
                    return Err(anyhow!(
                        "the Lease {name} is now held by {:?}, not by this run",
                        spec.holder_identity.as_deref().unwrap_or("nobody")
                    ));
                }
                spec.renew_time = Some(MicroTime(now()));
                match api.replace(name, &PostParams::default(), &l).await {
                    Ok(_) => return Ok(()),
                    Err(e) if is_status(&e, 409) => continue,
                    Err(e) => return Err(api_err(&format!("renewing the Lease {name}"), e)),
                }
            }
            Err(anyhow!("renewing the Lease {name}: it kept changing"))
        })
    }

    /// Give the Lease up (no holder), if this identity still holds it.
    pub fn release_lease(&self, name: &str, identity: &str) -> Result<()> {
        let api = self.leases();
        self.rt.block_on(async {
            for _ in 0..3 {
                let Some(mut l) = api
                    .get_opt(name)
                    .await
                    .map_err(|e| api_err(&format!("reading the Lease {name}"), e))?
                else {
                    return Ok(());
                };
                let spec = l.spec.get_or_insert_with(Default::default);
                if spec.holder_identity.as_deref() != Some(identity) {
                    return Ok(());
                }
                spec.holder_identity = None;
                spec.renew_time = None;
                match api.replace(name, &PostParams::default(), &l).await {
                    Ok(_) => return Ok(()),
                    Err(e) if is_status(&e, 409) => continue,
                    Err(e) => return Err(api_err(&format!("releasing the Lease {name}"), e)),
                }
            }
            Err(anyhow!("releasing the Lease {name}: it kept changing"))
        })
    }

    /// Hold exactly `count` policy-scale NetworkPolicies (label
    /// `fabperf.io/policy-scale=true`) selecting the agents on `port`: the
    /// old ones deleted, the new ones created. Returns (deleted, created).
    pub fn apply_policy_scale(&self, port: u16, count: u32) -> Result<(usize, usize)> {
        let api: Api<NetworkPolicy> = Api::namespaced(self.client.clone(), &self.namespace);
        let ns = self.namespace.clone();
        self.rt.block_on(async {
            let lp = ListParams::default().labels(&format!("{SCALE_LABEL}=true"));
            let old = api.list(&lp).await.map_err(|e| {
                api_err(
                    &format!("listing the policy-scale NetworkPolicies in {ns}"),
                    e,
                )
            })?;
            let mut deleted = 0;
            for p in &old.items {
                let Some(n) = p.metadata.name.as_deref() else {
                    continue;
                };
                match api.delete(n, &DeleteParams::default()).await {
                    Ok(_) => deleted += 1,
                    Err(e) if is_status(&e, 404) => {}
                    Err(e) => return Err(api_err(&format!("deleting NetworkPolicy {n}"), e)),
                }
            }
            let mut created = 0;
            for p in network_policies(&ns, port, count) {
                let n = p.metadata.name.clone().unwrap_or_default();
                api.create(&PostParams::default(), &p)
                    .await
                    .map_err(|e| api_err(&format!("creating NetworkPolicy {n}"), e))?;
                created += 1;
            }
            Ok((deleted, created))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, duration: i32, renewed_s_ago: Option<i64>) -> Lease {
        let t = now();
        Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: holder.map(String::from),
                lease_duration_seconds: Some(duration),
                renew_time: renewed_s_ago
                    .map(|s| MicroTime(t - k8s_openapi::jiff::SignedDuration::from_secs(s))),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn who_holds_a_lease() {
        let t = now();
        let h = holder_of(&lease(Some("run-a"), 60, Some(10)), t).unwrap();
        assert_eq!(h.identity, "run-a");
        assert!((h.expires_in_s - 50.0).abs() < 1.0, "{h:?}");
        assert!(h.to_string().contains("renewed 10 s ago"), "{h}");
        // Expired, released, or never held: free.
        assert!(holder_of(&lease(Some("run-a"), 60, Some(61)), t).is_none());
        assert!(holder_of(&lease(None, 60, Some(1)), t).is_none());
        assert!(holder_of(&lease(Some(""), 60, Some(1)), t).is_none());
        // Held without a renewal time: counted from now, expires in full.
        assert!(holder_of(&lease(Some("run-b"), 60, None), t).is_some());
    }
}

/// A stand-in Kubernetes API server for tests: plain HTTP/1.1 on loopback,
/// Leases (with resourceVersion conflicts, as the API server answers a
/// stale update) and NetworkPolicies in memory. Not for anything else.
pub mod test_support {
    use serde_json::{json, Value};
    use std::collections::BTreeMap;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::sync::{Arc, Mutex};

    /// What the fake holds and what it was asked.
    #[derive(Default)]
    pub struct State {
        pub leases: BTreeMap<String, Value>,
        pub policies: BTreeMap<String, Value>,
        /// "METHOD PATH" of every request, in order.
        pub requests: Vec<String>,
        version: u64,
        /// Answer every request with this status (e.g. 403).
        pub refuse: Option<u16>,
    }

    pub struct FakeApiServer {
        pub addr: SocketAddr,
        pub state: Arc<Mutex<State>>,
    }

    impl FakeApiServer {
        pub fn start() -> FakeApiServer {
            let l = TcpListener::bind("127.0.0.1:0").expect("binding the fake API server");
            let addr = l.local_addr().unwrap();
            let state: Arc<Mutex<State>> = Arc::default();
            let st = state.clone();
            std::thread::spawn(move || {
                for c in l.incoming().flatten() {
                    let st = st.clone();
                    std::thread::spawn(move || serve(c, &st));
                }
            });
            FakeApiServer { addr, state }
        }

        pub fn url(&self) -> String {
            format!("http://{}", self.addr)
        }

        /// Put a Lease in (as another runner would have), in the namespace
        /// its metadata names. Leases are kept as "NAMESPACE/NAME".
        pub fn put_lease(&self, name: &str, lease: Value) {
            let mut s = self.state.lock().unwrap();
            s.version += 1;
            let mut l = lease;
            l["metadata"]["resourceVersion"] = json!(s.version.to_string());
            l["metadata"]["name"] = json!(name);
            let ns = l["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string();
            s.leases.insert(format!("{ns}/{name}"), l);
        }
    }

    fn status(code: u16, reason: &str, msg: &str) -> (u16, Value) {
        (
            code,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                   "message": msg, "reason": reason, "code": code}),
        )
    }

    fn handle(st: &Mutex<State>, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
        let mut s = st.lock().unwrap_or_else(|p| p.into_inner());
        s.requests.push(format!("{method} {path}"));
        if let Some(code) = s.refuse {
            return status(code, "Forbidden", "refused by the test");
        }
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        match parts.as_slice() {
            ["apis", "coordination.k8s.io", "v1", "namespaces", ns, "leases", name] => {
                let key = format!("{ns}/{name}");
                match method {
                    "GET" => match s.leases.get(&key) {
                        Some(l) => (200, l.clone()),
                        None => status(404, "NotFound", "leases not found"),
                    },
                    "PUT" => {
                        let cur = s
                            .leases
                            .get(&key)
                            .map(|l| l["metadata"]["resourceVersion"].clone());
                        if cur.as_ref() != Some(&body["metadata"]["resourceVersion"]) {
                            return status(409, "Conflict", "the object has been modified");
                        }
                        s.version += 1;
                        let mut l = body;
                        l["metadata"]["resourceVersion"] = json!(s.version.to_string());
                        s.leases.insert(key, l.clone());
                        (200, l)
                    }
                    _ => status(405, "MethodNotAllowed", "no"),
                }
            }
            ["apis", "coordination.k8s.io", "v1", "namespaces", ns, "leases"]
                if method == "POST" =>
            {
                let name = format!(
                    "{ns}/{}",
                    body["metadata"]["name"].as_str().unwrap_or_default()
                );
                if s.leases.contains_key(&name) {
                    return status(409, "AlreadyExists", "leases already exists");
                }
                s.version += 1;
                let mut l = body;
                l["metadata"]["resourceVersion"] = json!(s.version.to_string());
                s.leases.insert(name, l.clone());
                (201, l)
            }
            ["apis", "networking.k8s.io", "v1", "namespaces", _, "networkpolicies"] => match method
            {
                "GET" => {
                    let want = query.contains("fabperf.io%2Fpolicy-scale%3Dtrue")
                        || query.contains("fabperf.io/policy-scale=true");
                    let items: Vec<Value> = s
                        .policies
                        .values()
                        .filter(|p| {
                            !want || p["metadata"]["labels"]["fabperf.io/policy-scale"] == "true"
                        })
                        .cloned()
                        .collect();
                    (
                        200,
                        json!({"kind": "NetworkPolicyList", "apiVersion": "networking.k8s.io/v1",
                               "metadata": {"resourceVersion": "1"}, "items": items}),
                    )
                }
                "POST" => {
                    let name = body["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    if s.policies.contains_key(&name) {
                        return status(409, "AlreadyExists", "networkpolicies already exists");
                    }
                    s.policies.insert(name, body.clone());
                    (201, body)
                }
                _ => status(405, "MethodNotAllowed", "no"),
            },
            ["apis", "networking.k8s.io", "v1", "namespaces", _, "networkpolicies", name]
                if method == "DELETE" =>
            {
                match s.policies.remove(*name) {
                    Some(p) => (200, p),
                    None => status(404, "NotFound", "networkpolicies not found"),
                }
            }
            _ => status(404, "NotFound", "the fake API server has no such path"),
        }
    }

    fn serve(c: TcpStream, st: &Mutex<State>) {
        let mut w = match c.try_clone() {
            Ok(w) => w,
            Err(_) => return,
        };
        let mut r = BufReader::new(c);
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let mut it = line.split_whitespace();
            let (method, path) = (
                it.next().unwrap_or_default().to_string(),
                it.next().unwrap_or_default().to_string(),
            );
            let mut len = 0usize;
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).unwrap_or(0) == 0 {
                    return;
                }
                let h = h.trim_end();
                if h.is_empty() {
                    break;
                }
                if let Some((k, v)) = h.split_once(':') {
                    if k.eq_ignore_ascii_case("content-length") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                }
            }
            let mut body = vec![0u8; len];
            if r.read_exact(&mut body).is_err() {
                return;
            }
            let (code, v) = handle(st, &method, &path, &body);
            let b = serde_json::to_vec(&v).unwrap();
            let head = format!(
                "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                b.len()
            );
            if w.write_all(head.as_bytes())
                .and_then(|_| w.write_all(&b))
                .is_err()
            {
                return;
            }
        }
    }
}
