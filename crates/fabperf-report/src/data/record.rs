//! Reading a stored record's JSON text straight into a [`RecView`], as
//! leniently as reading it through a `serde_json::Value` and picking the
//! keys (every key optional; a missing, mistyped, non-finite or negative
//! figure is simply absent; a record that is not an object reads as
//! empty), without building the tree: a report reads millions of records,
//! and the tree's maps and strings were most of the reading thread's time.
//!
//! Only the text's syntax can fail the reading (a record that is not JSON
//! is skipped and counted by the store, as before). The rare keys with a
//! structure of their own (`interval`, `errors`, `warnings`, `udp`,
//! `flows`, `host_cpu_*`) are read through a small `Value` of just that
//! key; `lat_us` and the placements, in every record, are read in place.

use super::{LatView, RecView};
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;
use std::fmt;

/// A stored record as the report reads it: its [`RecView`], and the two
/// figures the mesh analysis takes from it as they stand (a record's
/// `bw_gbps` and `lat_us.p50` as numbers, negative ones included: the mesh
/// judges those itself).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecordRead {
    pub view: RecView,
    pub mesh_bw_gbps: Option<f64>,
    pub mesh_lat_p50_us: Option<f64>,
}

/// A value read leniently: `Some` when it is of a kind `T` takes (as
/// `Value::as_f64`, `as_u64`, `as_str`, `as_bool` or an object would read
/// it), `None` for any other kind (objects and arrays skipped, their
/// syntax still checked).
#[derive(Default)]
struct Lenient<T>(Option<T>);

/// The kinds of value a `T` is read from; each other kind is `None`.
trait Pick: Sized {
    fn bool(_: bool) -> Option<Self> {
        None
    }
    fn u64(_: u64) -> Option<Self> {
        None
    }
    fn i64(_: i64) -> Option<Self> {
        None
    }
    fn f64(_: f64) -> Option<Self> {
        None
    }
    fn str(_: &str) -> Option<Self> {
        None
    }
    fn map<'de, A: MapAccess<'de>>(mut a: A) -> Result<Option<Self>, A::Error> {
        while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

/// A number of any kind.
impl Pick for f64 {
    fn u64(v: u64) -> Option<f64> {
        Some(v as f64)
    }
    fn i64(v: i64) -> Option<f64> {
        Some(v as f64)
    }
    fn f64(v: f64) -> Option<f64> {
        Some(v)
    }
}

/// A non-negative integer.
impl Pick for u64 {
    fn u64(v: u64) -> Option<u64> {
        Some(v)
    }
    fn i64(v: i64) -> Option<u64> {
        u64::try_from(v).ok()
    }
}

impl Pick for String {
    fn str(v: &str) -> Option<String> {
        Some(v.to_string())
    }
}

impl Pick for bool {
    fn bool(v: bool) -> Option<bool> {
        Some(v)
    }
}

impl<'de, T: Pick> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Lenient<T>, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Pick> Visitor<'de> for V<T> {
            type Value = Option<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Option<T>, E> {
                Ok(T::bool(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Option<T>, E> {
                Ok(T::u64(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Option<T>, E> {
                Ok(T::i64(v))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Option<T>, E> {
                Ok(T::f64(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<T>, E> {
                Ok(T::str(v))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Option<T>, E> {
                Ok(None)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Option<T>, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(None)
            }
            fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<Option<T>, A::Error> {
                T::map(a)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData)).map(Lenient)
    }
}

/// A figure of a stored record: finite and not negative.
fn figure(x: &Lenient<f64>) -> Option<f64> {
    x.0.filter(|x| x.is_finite() && *x >= 0.0)
}

/// The keys of an object that a reader picks, compared without being
/// kept (escaped keys are compared unescaped, as a `Value` holds them);
/// any other key is `Other` and its value skipped.
macro_rules! keys {
    ($name:ident { $($lit:literal => $var:ident),* $(,)? }) => {
        #[derive(Clone, Copy, PartialEq, Eq)]
        enum $name { $($var,)* Other }
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<$name, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                        f.write_str("a key")
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<$name, E> {
                        Ok(match v { $($lit => $name::$var,)* _ => $name::Other })
                    }
                }
                d.deserialize_identifier(V)
            }
        }
    };
}

/// An object a reader fills key by key (a later duplicate key replaces an
/// earlier one, as in a `Value`).
trait Fields: Default {
    type Key: for<'de> Deserialize<'de>;
    fn take<'de, A: MapAccess<'de>>(&mut self, k: Self::Key, a: &mut A) -> Result<(), A::Error>;
}

/// An object with its [`Fields`], read key by key.
impl<T: Fields> Pick for T {
    fn map<'de, A: MapAccess<'de>>(mut a: A) -> Result<Option<T>, A::Error> {
        let mut t = T::default();
        while let Some(k) = a.next_key::<T::Key>()? {
            t.take(k, &mut a)?;
        }
        Ok(Some(t))
    }
}

keys!(LatKey {
    "min" => Min, "p50" => P50, "p90" => P90, "p99" => P99, "p999" => P999,
    "max" => Max, "mean" => Mean, "samples" => Samples, "kind" => Kind,
});

#[derive(Default)]
struct Lat {
    min: Lenient<f64>,
    p50: Lenient<f64>,
    p90: Lenient<f64>,
    p99: Lenient<f64>,
    p999: Lenient<f64>,
    max: Lenient<f64>,
    mean: Lenient<f64>,
    samples: Lenient<u64>,
    kind: Lenient<String>,
}

impl Fields for Lat {
    type Key = LatKey;
    fn take<'de, A: MapAccess<'de>>(&mut self, k: LatKey, a: &mut A) -> Result<(), A::Error> {
        match k {
            LatKey::Min => self.min = a.next_value()?,
            LatKey::P50 => self.p50 = a.next_value()?,
            LatKey::P90 => self.p90 = a.next_value()?,
            LatKey::P99 => self.p99 = a.next_value()?,
            LatKey::P999 => self.p999 = a.next_value()?,
            LatKey::Max => self.max = a.next_value()?,
            LatKey::Mean => self.mean = a.next_value()?,
            LatKey::Samples => self.samples = a.next_value()?,
            LatKey::Kind => self.kind = a.next_value()?,
            LatKey::Other => drop(a.next_value::<IgnoredAny>()?),
        }
        Ok(())
    }
}

keys!(PlaceKey { "virtual_link" => Virtual, "port_rate_gbps" => Port });

#[derive(Default)]
struct Place {
    virtual_link: Lenient<bool>,
    port: Lenient<f64>,
}

impl Fields for Place {
    type Key = PlaceKey;
    fn take<'de, A: MapAccess<'de>>(&mut self, k: PlaceKey, a: &mut A) -> Result<(), A::Error> {
        match k {
            PlaceKey::Virtual => self.virtual_link = a.next_value()?,
            PlaceKey::Port => self.port = a.next_value()?,
            PlaceKey::Other => drop(a.next_value::<IgnoredAny>()?),
        }
        Ok(())
    }
}

keys!(TopKey {
    "test" => Test, "transport" => Transport, "op" => Op, "direction" => Direction,
    "stream" => Stream, "size" => Size, "streams" => Streams, "duration_s" => Duration,
    "bw_gbps" => Bw, "msg_rate_mpps" => MsgRate, "lat_us" => Lat, "lat_hist" => LatHist,
    "cpu_local_pct" => CpuLocal, "cpu_remote_pct" => CpuRemote,
    "host_cpu_local" => HostLocal, "host_cpu_remote" => HostRemote,
    "retransmits" => Retransmits, "udp" => Udp, "mtu" => Mtu,
    "requests_per_s" => Requests, "errors" => Errors,
    "placement_local" => PlaceLocal, "placement_remote" => PlaceRemote,
    "warnings" => Warnings, "started_at" => StartedAt, "interval" => Interval,
    "flows" => Flows,
});

/// Every key of a record the report reads, as it stands in the text.
#[derive(Default)]
struct Top {
    test: Lenient<String>,
    transport: Lenient<String>,
    op: Lenient<String>,
    direction: Lenient<String>,
    stream: Lenient<u64>,
    size: Lenient<u64>,
    streams: Lenient<u64>,
    duration_s: Lenient<f64>,
    bw_gbps: Lenient<f64>,
    msg_rate_mpps: Lenient<f64>,
    lat: Option<Lat>,
    lat_hist: Lenient<String>,
    cpu_local_pct: Lenient<f64>,
    cpu_remote_pct: Lenient<f64>,
    retransmits: Lenient<u64>,
    mtu: Lenient<u64>,
    requests_per_s: Lenient<f64>,
    place_local: Option<Place>,
    place_remote: Option<Place>,
    started_at: Lenient<String>,
    /// The keys with structures of their own, rare in records: read as the
    /// small `Value` of just that key.
    host_local: Option<Value>,
    host_remote: Option<Value>,
    udp: Option<Value>,
    errors: Option<Value>,
    warnings: Option<Value>,
    interval: Option<Value>,
    flows: Option<Value>,
}

impl Fields for Top {
    type Key = TopKey;
    fn take<'de, A: MapAccess<'de>>(&mut self, k: TopKey, a: &mut A) -> Result<(), A::Error> {
        match k {
            TopKey::Test => self.test = a.next_value()?,
            TopKey::Transport => self.transport = a.next_value()?,
            TopKey::Op => self.op = a.next_value()?,
            TopKey::Direction => self.direction = a.next_value()?,
            TopKey::Stream => self.stream = a.next_value()?,
            TopKey::Size => self.size = a.next_value()?,
            TopKey::Streams => self.streams = a.next_value()?,
            TopKey::Duration => self.duration_s = a.next_value()?,
            TopKey::Bw => self.bw_gbps = a.next_value()?,
            TopKey::MsgRate => self.msg_rate_mpps = a.next_value()?,
            TopKey::Lat => self.lat = a.next_value::<Lenient<Lat>>()?.0,
            TopKey::LatHist => self.lat_hist = a.next_value()?,
            TopKey::CpuLocal => self.cpu_local_pct = a.next_value()?,
            TopKey::CpuRemote => self.cpu_remote_pct = a.next_value()?,
            TopKey::HostLocal => self.host_local = Some(a.next_value()?),
            TopKey::HostRemote => self.host_remote = Some(a.next_value()?),
            TopKey::Retransmits => self.retransmits = a.next_value()?,
            TopKey::Udp => self.udp = Some(a.next_value()?),
            TopKey::Mtu => self.mtu = a.next_value()?,
            TopKey::Requests => self.requests_per_s = a.next_value()?,
            TopKey::Errors => self.errors = Some(a.next_value()?),
            TopKey::PlaceLocal => self.place_local = a.next_value::<Lenient<Place>>()?.0,
            TopKey::PlaceRemote => self.place_remote = a.next_value::<Lenient<Place>>()?.0,
            TopKey::Warnings => self.warnings = Some(a.next_value()?),
            TopKey::StartedAt => self.started_at = a.next_value()?,
            TopKey::Interval => self.interval = Some(a.next_value()?),
            TopKey::Flows => self.flows = Some(a.next_value()?),
            TopKey::Other => drop(a.next_value::<IgnoredAny>()?),
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for RecordRead {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RecordRead, D::Error> {
        let t = Lenient::<Top>::deserialize(d)?.0.unwrap_or_default();
        Ok(t.into_read())
    }
}

impl Top {
    fn into_read(self) -> RecordRead {
        use super::value_fields as vf;
        let mesh_bw_gbps = self.bw_gbps.0;
        let mesh_lat_p50_us = self.lat.as_ref().and_then(|l| l.p50.0);
        let virt = |p: &Option<Place>| p.as_ref().and_then(|p| p.virtual_link.0) == Some(true);
        let port = |p: &Option<Place>| {
            p.as_ref()
                .and_then(|p| figure(&p.port))
                .filter(|r| *r > 0.0)
        };
        let view = RecView {
            test: self.test.0.unwrap_or_default(),
            transport: self.transport.0,
            op: self.op.0,
            direction: self.direction.0,
            stream: self.stream.0,
            size: self.size.0,
            streams: self.streams.0,
            duration_s: figure(&self.duration_s),
            bw_gbps: figure(&self.bw_gbps),
            msg_rate_mpps: figure(&self.msg_rate_mpps),
            lat: self.lat.map(|l| LatView {
                min: figure(&l.min),
                p50: figure(&l.p50),
                p90: figure(&l.p90),
                p99: figure(&l.p99),
                p999: figure(&l.p999),
                max: figure(&l.max),
                mean: figure(&l.mean),
                samples: l.samples.0,
                kind: l.kind.0,
            }),
            lat_hist: self.lat_hist.0,
            cpu_local_pct: figure(&self.cpu_local_pct),
            cpu_remote_pct: figure(&self.cpu_remote_pct),
            host_cpu_local: self.host_local.as_ref().and_then(vf::host_cpu),
            host_cpu_remote: self.host_remote.as_ref().and_then(vf::host_cpu),
            retransmits: self.retransmits.0,
            udp_sent: self.udp.as_ref().and_then(|u| vf::uint(u, "sent")),
            udp_lost: self.udp.as_ref().and_then(|u| vf::uint(u, "lost")),
            udp_loss_pct: self.udp.as_ref().and_then(|u| vf::num(u, "loss_pct")),
            mtu: self.mtu.0,
            requests_per_s: figure(&self.requests_per_s),
            errors: self.errors.as_ref().and_then(vf::errors),
            virtual_local: virt(&self.place_local),
            virtual_remote: virt(&self.place_remote),
            port_local_gbps: port(&self.place_local),
            port_remote_gbps: port(&self.place_remote),
            warnings: self.warnings.as_ref().map(vf::warnings).unwrap_or_default(),
            started_at: self.started_at.0,
            interval: self.interval.and_then(vf::interval),
            flows: self.flows.as_ref().and_then(vf::flows),
        };
        RecordRead {
            view,
            mesh_bw_gbps,
            mesh_lat_p50_us,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::value_fields::{self as vf, num, text, uint};
    use super::*;

    /// The reading this module replaces, kept as its specification: the
    /// record read into a `Value` and each key picked from it (the keys
    /// with structures of their own by the same `value_fields` readers the
    /// in-place reading hands them to).
    fn reference(v: &Value) -> RecordRead {
        let lat = v.get("lat_us").filter(|l| l.is_object()).map(|l| LatView {
            min: num(l, "min"),
            p50: num(l, "p50"),
            p90: num(l, "p90"),
            p99: num(l, "p99"),
            p999: num(l, "p999"),
            max: num(l, "max"),
            mean: num(l, "mean"),
            samples: uint(l, "samples"),
            kind: text(l, "kind"),
        });
        let udp = v.get("udp");
        let placement = |k: &str| v.get(k).filter(|p| p.is_object());
        let is_virtual =
            |k: &str| placement(k).and_then(|p| p.get("virtual_link")?.as_bool()) == Some(true);
        let port = |k: &str| {
            placement(k)
                .and_then(|p| num(p, "port_rate_gbps"))
                .filter(|r| *r > 0.0)
        };
        let view = RecView {
            test: text(v, "test").unwrap_or_default(),
            transport: text(v, "transport"),
            op: text(v, "op"),
            direction: text(v, "direction"),
            stream: uint(v, "stream"),
            size: uint(v, "size"),
            streams: uint(v, "streams"),
            duration_s: num(v, "duration_s"),
            bw_gbps: num(v, "bw_gbps"),
            msg_rate_mpps: num(v, "msg_rate_mpps"),
            lat,
            lat_hist: text(v, "lat_hist"),
            cpu_local_pct: num(v, "cpu_local_pct"),
            cpu_remote_pct: num(v, "cpu_remote_pct"),
            host_cpu_local: v.get("host_cpu_local").and_then(vf::host_cpu),
            host_cpu_remote: v.get("host_cpu_remote").and_then(vf::host_cpu),
            retransmits: uint(v, "retransmits"),
            udp_sent: udp.and_then(|u| uint(u, "sent")),
            udp_lost: udp.and_then(|u| uint(u, "lost")),
            udp_loss_pct: udp.and_then(|u| num(u, "loss_pct")),
            mtu: uint(v, "mtu"),
            requests_per_s: num(v, "requests_per_s"),
            errors: v.get("errors").and_then(vf::errors),
            virtual_local: is_virtual("placement_local"),
            virtual_remote: is_virtual("placement_remote"),
            port_local_gbps: port("placement_local"),
            port_remote_gbps: port("placement_remote"),
            warnings: v.get("warnings").map(vf::warnings).unwrap_or_default(),
            started_at: text(v, "started_at"),
            interval: v.get("interval").cloned().and_then(vf::interval),
            flows: v.get("flows").and_then(vf::flows),
        };
        RecordRead {
            view,
            mesh_bw_gbps: v.get("bw_gbps").and_then(Value::as_f64),
            mesh_lat_p50_us: v
                .get("lat_us")
                .and_then(|l| l.get("p50"))
                .and_then(Value::as_f64),
        }
    }

    /// Values of every kind, well and badly typed, for any key.
    const VALUES: &[&str] = &[
        "null",
        "true",
        "false",
        "0",
        "7",
        "-3",
        "2.5",
        "-0.5",
        "1e308",
        "18446744073709551615",
        "-9223372036854775808",
        "\"text\"",
        "\"esc\\u0061ped\\n\"",
        "[]",
        "[1, \"two\", {\"message\": \"three\"}, [4]]",
        "{}",
        "{\"message\": \"m\", \"x\": [1]}",
    ];

    const TOP: &[&str] = &[
        "test",
        "transport",
        "op",
        "direction",
        "stream",
        "size",
        "streams",
        "duration_s",
        "bw_gbps",
        "msg_rate_mpps",
        "lat_us",
        "lat_hist",
        "cpu_local_pct",
        "cpu_remote_pct",
        "host_cpu_local",
        "host_cpu_remote",
        "retransmits",
        "udp",
        "mtu",
        "requests_per_s",
        "errors",
        "placement_local",
        "placement_remote",
        "warnings",
        "started_at",
        "interval",
        "flows",
        "unknown_key",
    ];

    /// The keys each structured key is read for.
    fn inner_keys(k: &str) -> &'static [&'static str] {
        match k {
            "lat_us" => &[
                "min", "p50", "p90", "p99", "p999", "max", "mean", "samples", "kind", "stdev",
            ],
            "placement_local" | "placement_remote" => {
                &["virtual_link", "port_rate_gbps", "interface"]
            }
            "host_cpu_local" | "host_cpu_remote" => {
                &["user_pct", "system_pct", "irq_pct", "softirq_pct", "cpus"]
            }
            "udp" => &["sent", "lost", "loss_pct"],
            "flows" => &["count", "overlap_pct", "start_skew_s"],
            "errors" => &["timeout", "status", "read"],
            "interval" => &["start_s", "end_s", "sent_from_s"],
            _ => &[],
        }
    }

    /// A key as JSON text, sometimes with an escape in it.
    fn key_text(k: &str, escape: bool) -> String {
        match (escape, k.char_indices().nth(1)) {
            (true, Some((i, c))) => {
                format!(
                    "\"{}\\u{:04x}{}\"",
                    &k[..i],
                    c as u32,
                    &k[i + c.len_utf8()..]
                )
            }
            _ => format!("\"{k}\""),
        }
    }

    /// Records of every key with every kind of value, nested objects with
    /// their own keys so, duplicate and escaped keys, read from text the
    /// same as the `Value` reading reads them.
    #[test]
    fn reading_in_place_is_reading_through_a_value() {
        let mut rng = crate::hist::tests::xorshift(0x2545_f491_4f6c_dd1d);
        let mut next = move |n: usize| (rng() % n as u64) as usize;
        let mut differ = 0;
        for case in 0..6000 {
            let mut fields = Vec::new();
            for k in TOP {
                if next(3) == 0 {
                    continue;
                }
                let copies = if next(8) == 0 { 2 } else { 1 };
                for _ in 0..copies {
                    let inner = inner_keys(k);
                    let value = if !inner.is_empty() && next(3) != 0 {
                        let mut parts = Vec::new();
                        for ik in inner {
                            let copies = [0, 1, 1, 1, 1, 1, 1, 2][next(8)];
                            for _ in 0..copies {
                                parts.push(format!(
                                    "{}: {}",
                                    key_text(ik, next(10) == 0),
                                    VALUES[next(VALUES.len())]
                                ));
                            }
                        }
                        format!("{{{}}}", parts.join(", "))
                    } else {
                        VALUES[next(VALUES.len())].to_string()
                    };
                    fields.push(format!("{}: {value}", key_text(k, next(10) == 0)));
                }
            }
            let text = if case % 500 == 0 {
                VALUES[case / 500 % VALUES.len()].to_string()
            } else {
                format!("{{{}}}", fields.join(", "))
            };
            let v: Value = serde_json::from_str(&text).unwrap();
            let read: RecordRead = serde_json::from_str(&text).unwrap();
            if read != reference(&v) {
                differ += 1;
                assert_eq!(read, reference(&v), "{text}");
            }
            // The same reader over a `Value` (what a caller holding one uses).
            assert_eq!(RecordRead::deserialize(&v).unwrap(), read, "{text}");
        }
        assert_eq!(differ, 0);
    }

    /// A sound interval is read; an unsound or mistyped one is absent.
    #[test]
    fn intervals() {
        let read = |t: &str| serde_json::from_str::<RecordRead>(t).unwrap().view.interval;
        let i = read(r#"{"interval": {"start_s": 10.0, "end_s": 12.5}}"#).unwrap();
        assert_eq!((i.start_s, i.end_s), (10.0, 12.5));
        assert!(read(r#"{"interval": {"start_s": 12.0, "end_s": 10.0}}"#).is_none());
        assert!(read(r#"{"interval": {"start_s": "10", "end_s": 12.0}}"#).is_none());
        assert!(read(r#"{"interval": [10, 12]}"#).is_none());
    }

    /// Only the syntax fails a record.
    #[test]
    fn broken_text_is_an_error() {
        for t in [
            "",
            "{",
            "{\"test\": }",
            "{\"lat_us\": {\"p50\": 1,}}",
            "[1,",
            "nul",
        ] {
            assert!(serde_json::from_str::<RecordRead>(t).is_err(), "{t}");
        }
    }
}
