//! Addresses and routes: from the live kernel (netlink) or from iproute2 JSON files
//! (`ip -j addr show`, `ip -j route show table main`) in a snapshot.

use serde_json::{json, Value};
use std::net::IpAddr;

/// One interface address.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AddrEntry {
    pub ifname: String,
    pub addr: IpAddr,
    pub prefixlen: u8,
    /// `global`, `link`, `host`, `site` or a number.
    pub scope: String,
}

impl AddrEntry {
    /// `addr/prefix`.
    pub fn cidr(&self) -> String {
        format!("{}/{}", self.addr, self.prefixlen)
    }
}

/// One IPv4 route of the main table (first next hop for multipath routes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteEntry {
    /// `default` or a CIDR (host routes get `/32`).
    pub dst: String,
    pub gateway: Option<String>,
    pub dev: Option<String>,
    pub prefsrc: Option<String>,
    pub metric: Option<u32>,
}

/// Addresses, routes and traffic-control objects of a host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IpState {
    pub addrs: Vec<AddrEntry>,
    pub routes: Vec<RouteEntry>,
    /// Qdiscs and classes (empty when unknown, e.g. a snapshot without `fabperf-tc.json`).
    pub tc: Vec<crate::tc::TcObject>,
    /// Interface index -> name, when read live.
    pub links: Vec<(u32, String)>,
}

/// Parse failure of an iproute2 JSON document.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct IpJsonError(pub String);

fn scope_name(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => scope_from_num(n.as_u64().unwrap_or(0) as u8),
        _ => "global".to_string(),
    }
}

/// iproute2's names for `rt_scope` values.
pub fn scope_from_num(n: u8) -> String {
    match n {
        0 => "global".into(),
        200 => "site".into(),
        253 => "link".into(),
        254 => "host".into(),
        255 => "nowhere".into(),
        other => other.to_string(),
    }
}

/// Parse `ip -j addr show` output.
pub fn parse_addr_json(text: &str) -> Result<Vec<AddrEntry>, IpJsonError> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| IpJsonError(format!("invalid JSON: {e}")))?;
    let links = v
        .as_array()
        .ok_or_else(|| IpJsonError("expected a JSON array of links".into()))?;
    let mut out = Vec::new();
    for l in links {
        let Some(ifname) = l.get("ifname").and_then(Value::as_str) else {
            continue;
        };
        let Some(infos) = l.get("addr_info").and_then(Value::as_array) else {
            continue;
        };
        for a in infos {
            let fam = a.get("family").and_then(Value::as_str).unwrap_or("");
            if fam != "inet" && fam != "inet6" {
                continue;
            }
            let Some(addr) = a
                .get("local")
                .and_then(Value::as_str)
                .and_then(|s| s.parse::<IpAddr>().ok())
            else {
                continue;
            };
            let Some(prefixlen) = a
                .get("prefixlen")
                .and_then(Value::as_u64)
                .and_then(|p| u8::try_from(p).ok())
            else {
                continue;
            };
            let scope = a
                .get("scope")
                .map(scope_name)
                .unwrap_or_else(|| "global".into());
            out.push(AddrEntry {
                ifname: ifname.to_string(),
                addr,
                prefixlen,
                scope,
            });
        }
    }
    Ok(out)
}

fn normalize_dst(dst: &str) -> String {
    if dst == "default" || dst.contains('/') {
        dst.to_string()
    } else if dst.contains(':') {
        format!("{dst}/128")
    } else {
        format!("{dst}/32")
    }
}

/// Parse `ip -j route show table main` output (unicast IPv4 routes only).
pub fn parse_route_json(text: &str) -> Result<Vec<RouteEntry>, IpJsonError> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| IpJsonError(format!("invalid JSON: {e}")))?;
    let routes = v
        .as_array()
        .ok_or_else(|| IpJsonError("expected a JSON array of routes".into()))?;
    let mut out = Vec::new();
    for r in routes {
        if let Some(t) = r.get("type").and_then(Value::as_str) {
            if t != "unicast" {
                continue;
            }
        }
        let Some(dst) = r.get("dst").and_then(Value::as_str) else {
            continue;
        };
        if dst != "default" && dst.contains(':') {
            continue;
        }
        let s = |o: &Value, k: &str| o.get(k).and_then(Value::as_str).map(str::to_string);
        let mut gateway = s(r, "gateway");
        let mut dev = s(r, "dev");
        if dev.is_none() {
            if let Some(nh) = r
                .get("nexthops")
                .and_then(Value::as_array)
                .and_then(|a| a.first())
            {
                gateway = s(nh, "gateway");
                dev = s(nh, "dev");
            }
        }
        let gateway = gateway.filter(|g| !g.contains(':'));
        out.push(RouteEntry {
            dst: normalize_dst(dst),
            gateway,
            dev,
            prefsrc: s(r, "prefsrc"),
            metric: r
                .get("metric")
                .and_then(Value::as_u64)
                .and_then(|m| u32::try_from(m).ok()),
        });
    }
    Ok(out)
}

impl IpState {
    /// iproute2-shaped `ip -j addr show` JSON (used when a capture host has no `ip` binary).
    pub fn to_addr_json(&self, ifnames: &[(u32, String)]) -> String {
        let mut links = Vec::new();
        for (idx, name) in ifnames {
            let infos: Vec<Value> = self
                .addrs
                .iter()
                .filter(|a| &a.ifname == name)
                .map(|a| {
                    json!({
                        "family": if a.addr.is_ipv4() { "inet" } else { "inet6" },
                        "local": a.addr.to_string(),
                        "prefixlen": a.prefixlen,
                        "scope": a.scope,
                    })
                })
                .collect();
            links.push(json!({"ifindex": idx, "ifname": name, "addr_info": infos}));
        }
        serde_json::to_string(&links).expect("serializes")
    }

    /// iproute2-shaped `ip -j route show table main` JSON.
    pub fn to_route_json(&self) -> String {
        let routes: Vec<Value> = self
            .routes
            .iter()
            .map(|r| {
                let mut o = serde_json::Map::new();
                o.insert("dst".into(), json!(r.dst));
                if let Some(g) = &r.gateway {
                    o.insert("gateway".into(), json!(g));
                }
                if let Some(d) = &r.dev {
                    o.insert("dev".into(), json!(d));
                }
                if let Some(p) = &r.prefsrc {
                    o.insert("prefsrc".into(), json!(p));
                }
                if let Some(m) = r.metric {
                    o.insert("metric".into(), json!(m));
                }
                o.insert("flags".into(), json!([]));
                Value::Object(o)
            })
            .collect();
        serde_json::to_string(&routes).expect("serializes")
    }

    /// Read the live host through netlink.
    pub fn live() -> Result<IpState, crate::netlink::NetlinkError> {
        let d = crate::netlink::dump_all()?;
        Ok(IpState {
            addrs: d.addrs,
            routes: d.routes,
            tc: d.tc,
            links: d.links.into_iter().collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iproute_addr_json() {
        let text = r#"[{"ifindex":1,"ifname":"lo","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8,"scope":"host"}]},
        {"ifindex":4,"ifname":"eth0","addr_info":[{"family":"inet","local":"192.0.2.2","prefixlen":24,"broadcast":"192.0.2.255","scope":"global"},
        {"family":"inet6","local":"fe80::fc:ff:fe00:1","prefixlen":64,"scope":"link"}]},{"ifindex":5,"ifname":"x"}]"#;
        let a = parse_addr_json(text).unwrap();
        assert_eq!(a.len(), 3);
        assert_eq!(a[1].cidr(), "192.0.2.2/24");
        assert_eq!(a[2].scope, "link");
        assert!(parse_addr_json("{").is_err());
        assert!(parse_addr_json("{}").is_err());
    }

    #[test]
    fn iproute_route_json() {
        let text = r#"[{"dst":"default","gateway":"192.0.2.1","dev":"eth0","flags":[]},
        {"dst":"192.0.2.0/24","dev":"eth0","protocol":"kernel","scope":"link","prefsrc":"192.0.2.2","flags":[]},
        {"type":"unreachable","dst":"10.9.0.0/16","flags":[]},
        {"dst":"10.1.1.1","dev":"eth0","flags":[]},
        {"dst":"default","metric":200,"flags":[],"nexthops":[{"gateway":"10.0.0.1","dev":"ib0","weight":1,"flags":[]}]}]"#;
        let r = parse_route_json(text).unwrap();
        assert_eq!(r.len(), 4);
        assert_eq!(r[0].gateway.as_deref(), Some("192.0.2.1"));
        assert_eq!(r[1].prefsrc.as_deref(), Some("192.0.2.2"));
        assert_eq!(r[2].dst, "10.1.1.1/32");
        assert_eq!(r[3].dev.as_deref(), Some("ib0"));
        assert_eq!(r[3].metric, Some(200));
    }

    #[test]
    fn malformed_iproute_json_is_an_error_or_skipped_not_a_panic() {
        let deep = "[".repeat(100_000);
        for text in [
            "",
            "null",
            "42",
            "\"x\"",
            "{}",
            deep.as_str(),
            "[1, \"a\", null, []]",
            r#"[{"ifname": 7, "addr_info": "x"}]"#,
            r#"[{"ifname":"a","addr_info":[{"family":"inet","local":"10.0.0.1","prefixlen":999}]}]"#,
            r#"[{"ifname":"a","addr_info":[{"family":"inet","local":"not-an-ip","prefixlen":8}]}]"#,
            r#"[{"ifname":"a","addr_info":[{"family":"inet","local":"10.0.0.1","prefixlen":-1}]}]"#,
            r#"[{"dst":"default","metric":1e400}]"#,
            r#"[{"dst":{"x":1},"dev":["a"]},{"dst":"default","nexthops":"x"}]"#,
        ] {
            if let Ok(a) = parse_addr_json(text) {
                assert!(a.is_empty(), "{text}: {a:?}");
            }
            if let Ok(r) = parse_route_json(text) {
                assert!(r.iter().all(|r| r.dst == "default"), "{text}: {r:?}");
            }
        }
        assert!(parse_addr_json(&deep).is_err());
    }

    #[test]
    fn synthesized_json_round_trips() {
        let s = IpState {
            addrs: vec![AddrEntry {
                ifname: "eth0".into(),
                addr: "10.0.0.5".parse().unwrap(),
                prefixlen: 24,
                scope: "global".into(),
            }],
            routes: vec![RouteEntry {
                dst: "default".into(),
                gateway: Some("10.0.0.1".into()),
                dev: Some("eth0".into()),
                prefsrc: None,
                metric: Some(100),
            }],
            ..IpState::default()
        };
        let a = parse_addr_json(&s.to_addr_json(&[(2, "eth0".into())])).unwrap();
        let r = parse_route_json(&s.to_route_json()).unwrap();
        assert_eq!(
            IpState {
                addrs: a,
                routes: r,
                ..IpState::default()
            },
            s
        );
    }
}
