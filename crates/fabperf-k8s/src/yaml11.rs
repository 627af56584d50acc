//! YAML that Kubernetes reads as it was written.
//!
//! The serializer writes YAML 1.2: it quotes a string that a YAML 1.2
//! reader would take for a number, a boolean or null. `kubectl` and the API
//! machinery convert YAML with sigs.k8s.io/yaml, whose goyaml.v2 resolves
//! plain scalars by YAML 1.1 rules (sigs.k8s.io/yaml `goyaml.v2/resolve.go`,
//! as vendored by Kubernetes 1.3x): `no`, `yes`, `on`, `off`, `y`, `n` (in
//! three spellings each) are booleans, `1_000` and `0b101` are integers,
//! `2024-01-02` is a timestamp. So `namespace: no` would arrive as `false`.
//! [`to_yaml_v11`] writes every string that goyaml.v2 would resolve to
//! anything but a string single-quoted (keys too); real booleans and
//! numbers stay plain.

/// Would goyaml.v2 resolve this plain scalar to something other than a
/// string?
pub fn resolves_as_non_string(s: &str) -> bool {
    const WORDS: &[&str] = &[
        "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON", "n", "N", "no",
        "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF", "", "~", "null", "Null",
        "NULL", ".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf",
        "-.Inf", "-.INF", "<<",
    ];
    if WORDS.contains(&s) {
        return true;
    }
    match s.as_bytes()[0] {
        b'.' => s.parse::<f64>().is_ok(),
        b'0'..=b'9' | b'+' | b'-' => {
            let plain = s.replace('_', "");
            timestamp(s) || int_like(&plain) || yaml_float(&plain)
        }
        _ => false,
    }
}

/// `YYYY-M-D`, optionally followed by a time: what goyaml.v2 tries as a
/// timestamp (a string quoted by mistake is still a string).
fn timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 8 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-' && {
        let mut parts = s[5..].splitn(2, '-');
        let m = parts.next().unwrap_or("");
        let rest = parts.next().unwrap_or("");
        let d: String = rest.chars().take_while(char::is_ascii_digit).collect();
        (1..=2).contains(&m.len())
            && m.bytes().all(|c| c.is_ascii_digit())
            && (1..=2).contains(&d.len())
    }
}

/// An integer as Go's strconv.ParseInt(s, 0, 64) reads one (any size):
/// a sign, then `0x`, `0o`, `0b` or a leading `0` (octal), or decimal.
fn int_like(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let digits = |t: &str, ok: fn(&u8) -> bool| !t.is_empty() && t.as_bytes().iter().all(ok);
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        return digits(h, u8::is_ascii_hexdigit);
    }
    if let Some(o) = s.strip_prefix("0o").or_else(|| s.strip_prefix("0O")) {
        return digits(o, |c| (b'0'..=b'7').contains(c));
    }
    if let Some(b) = s.strip_prefix("0b").or_else(|| s.strip_prefix("0B")) {
        return digits(b, |c| *c == b'0' || *c == b'1');
    }
    if s.len() > 1 && s.starts_with('0') {
        return digits(s, |c| (b'0'..=b'7').contains(c));
    }
    digits(s, u8::is_ascii_digit)
}

/// `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`
fn yaml_float(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (mant, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let num = |t: &str| !t.is_empty() && t.bytes().all(|c| c.is_ascii_digit());
    let mant_ok = match mant.split_once('.') {
        None => num(mant),
        Some(("", f)) => num(f),
        Some((i, f)) => num(i) && (f.is_empty() || num(f)),
    };
    let exp_ok = exp.is_none_or(|e| num(e.strip_prefix(['+', '-']).unwrap_or(e)));
    mant_ok && exp_ok
}

fn quoted(tok: &str) -> String {
    format!("'{}'", tok.replace('\'', "''"))
}

fn placeholder(i: usize) -> String {
    format!("fabperf-yaml11-quote-{i}-end")
}

/// Replace every string (and mapping key) goyaml.v2 would not read as a
/// string by a placeholder; the originals, in placeholder order.
fn mark(v: &mut serde_norway::Value, subs: &mut Vec<String>) {
    use serde_norway::Value;
    let swap = |s: &mut String, subs: &mut Vec<String>| {
        if resolves_as_non_string(s) || s.contains("fabperf-yaml11-quote-") {
            subs.push(std::mem::replace(s, placeholder(subs.len())));
        }
    };
    match v {
        Value::String(s) => swap(s, subs),
        Value::Sequence(items) => items.iter_mut().for_each(|i| mark(i, subs)),
        Value::Mapping(m) => {
            let old = std::mem::take(m);
            for (mut k, mut val) in old {
                if let Value::String(s) = &mut k {
                    swap(s, subs);
                } else {
                    mark(&mut k, subs);
                }
                mark(&mut val, subs);
                m.insert(k, val);
            }
        }
        Value::Tagged(t) => mark(&mut t.value, subs),
        _ => {}
    }
}

/// `obj` as YAML that goyaml.v2 reads back with the same types: every
/// string it would resolve to a boolean, a number, null or a timestamp is
/// written single-quoted (keys too); booleans and numbers stay plain.
pub fn to_yaml_v11<T: serde::Serialize>(obj: &T) -> Result<String, serde_norway::Error> {
    let mut v = serde_norway::to_value(obj)?;
    let mut subs = Vec::new();
    mark(&mut v, &mut subs);
    let mut text = serde_norway::to_string(&v)?;
    // Highest index first: no placeholder is a prefix of another anyway
    // ("-1-end" vs "-10-end"), this only keeps replacements independent.
    for (i, orig) in subs.iter().enumerate().rev() {
        text = text.replace(&placeholder(i), &quoted(orig));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_goyaml_v2_resolves() {
        for s in [
            "no",
            "No",
            "NO",
            "n",
            "N",
            "yes",
            "y",
            "Y",
            "on",
            "On",
            "off",
            "OFF",
            "true",
            "null",
            "~",
            "1_000",
            "0b101",
            "0x1F",
            "0o17",
            "017",
            "+1",
            "-2",
            "1e3",
            ".5",
            "1.",
            "08",
            "2024-01-02",
            "2024-1-2T03:04:05Z",
            ".inf",
            "<<",
        ] {
            assert!(resolves_as_non_string(s), "{s}");
        }
        for s in [
            "fabperf",
            "nope",
            "onion",
            "yesterday",
            "0x",
            "1.2.3",
            "10.0.0.1",
            "1-2",
            "e3",
            "rdma/hca",
            "-",
            "2024-01",
            "v1",
        ] {
            assert!(!resolves_as_non_string(s), "{s}");
        }
    }

    #[test]
    fn strings_yaml11_reads_otherwise_are_quoted_values_are_not() {
        let v = serde_json::json!({
            "namespace": "no",
            "on": "y",
            "automount": false,
            "replicas": 16,
            "args": ["off", "--flag", "1_000", ["n"], {"name": "no", "value": "2024-01-02"}],
            "script": "no\non: off\n",
            "it's": "yes",
            "app": "fabperf",
        });
        let y = to_yaml_v11(&v).unwrap();
        for want in [
            "namespace: 'no'\n",
            "'on': 'y'\n",
            "automount: false\n",
            "replicas: 16\n",
            "- 'off'\n",
            "- --flag\n",
            "- '1_000'\n",
            "- - 'n'\n",
            "name: 'no'\n",
            "value: '2024-01-02'\n",
            "it's: 'yes'\n",
            "app: fabperf\n",
            "script: |\n  no\n  on: off\n",
        ] {
            assert!(y.contains(want), "{want:?} not in:\n{y}");
        }
        // The YAML reads back to the same value (quoting changes no type
        // for a YAML 1.2 reader either).
        let back: serde_json::Value = serde_norway::from_str(&y).unwrap();
        assert_eq!(back, v);
    }
}
