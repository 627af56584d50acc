//! CronJob `schedule` and `timeZone`, checked as the Kubernetes API server
//! checks them (pkg/apis/batch/validation: `cron.ParseStandard` of
//! robfig/cron v3, no `TZ=`/`CRON_TZ=` in a new CronJob's schedule, IANA
//! zone names), so a bad schedule fails at render time with the plan's
//! line and column instead of at `kubectl apply`.

/// The descriptors `cron.ParseStandard` accepts besides `@every DURATION`.
const DESCRIPTORS: [&str; 7] = [
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@midnight",
    "@hourly",
];

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    /// Names and the value of the first one.
    names: &'static [&'static str],
    names_from: u32,
}

const FIELDS: [Field; 5] = [
    Field {
        name: "minute",
        min: 0,
        max: 59,
        names: &[],
        names_from: 0,
    },
    Field {
        name: "hour",
        min: 0,
        max: 23,
        names: &[],
        names_from: 0,
    },
    Field {
        name: "day of month",
        min: 1,
        max: 31,
        names: &[],
        names_from: 0,
    },
    Field {
        name: "month",
        min: 1,
        max: 12,
        names: &MONTHS,
        names_from: 1,
    },
    Field {
        name: "day of week",
        min: 0,
        max: 6,
        names: &DAYS,
        names_from: 0,
    },
];

fn value(f: &Field, s: &str) -> Result<u32, String> {
    let lower = s.to_ascii_lowercase();
    if let Some(i) = f.names.iter().position(|n| *n == lower) {
        return Ok(f.names_from + i as u32);
    }
    if s.is_empty() || s.len() > 9 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{} {s:?} is not a number{}",
            f.name,
            if f.names.is_empty() {
                String::new()
            } else {
                format!(" or a name ({})", f.names.join(", "))
            }
        ));
    }
    s.parse::<u32>()
        .map_err(|_| format!("{} {s:?} is not a number", f.name))
}

/// One comma-separated item: `*`, `?`, `N`, `N-M`, each optionally `/STEP`.
fn item(f: &Field, expr: &str) -> Result<(), String> {
    if expr.is_empty() {
        return Err(format!(
            "{}: an empty item in a comma-separated list",
            f.name
        ));
    }
    let mut parts = expr.split('/');
    let range = parts.next().unwrap_or_default();
    let step = parts.next();
    if parts.next().is_some() {
        return Err(format!("{} {expr:?}: too many slashes", f.name));
    }
    let (start, mut end, single) = if range == "*" || range == "?" {
        (f.min, f.max, false)
    } else {
        let mut lh = range.split('-');
        let lo = value(f, lh.next().unwrap_or_default())?;
        let hi = match lh.next() {
            Some(h) => Some(value(f, h)?),
            None => None,
        };
        if lh.next().is_some() {
            return Err(format!("{} {expr:?}: too many hyphens", f.name));
        }
        (lo, hi.unwrap_or(lo), hi.is_none())
    };
    if let Some(s) = step {
        let n = value(
            &Field {
                name: f.name,
                min: 0,
                max: 0,
                names: &[],
                names_from: 0,
            },
            s,
        )?;
        if n == 0 {
            return Err(format!(
                "{} {expr:?}: the step must be a positive number",
                f.name
            ));
        }
        // "N/step" means "N-max/step".
        if single {
            end = f.max;
        }
    }
    if start < f.min {
        return Err(format!(
            "{} {expr:?}: {start} is below the minimum {}",
            f.name, f.min
        ));
    }
    if end > f.max {
        return Err(format!(
            "{} {expr:?}: {end} is above the maximum {}",
            f.name, f.max
        ));
    }
    if start > end {
        return Err(format!(
            "{} {expr:?}: the range starts after it ends",
            f.name
        ));
    }
    Ok(())
}

/// A Go `time.ParseDuration` string of positive length (`1h30m`, `90s`).
fn go_duration(s: &str) -> bool {
    let mut rest = s;
    if rest.is_empty() {
        return false;
    }
    let mut any_nonzero = false;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let num = &rest[..num_len];
        if num.is_empty() || num == "." || num.matches('.').count() > 1 {
            return false;
        }
        if num.bytes().any(|b| (b'1'..=b'9').contains(&b)) {
            any_nonzero = true;
        }
        rest = &rest[num_len..];
        let unit = ["ns", "us", "µs", "μs", "ms", "s", "m", "h"]
            .into_iter()
            .filter(|u| rest.starts_with(u))
            .max_by_key(|u| u.len());
        let Some(u) = unit else { return false };
        rest = &rest[u.len()..];
    }
    any_nonzero
}

/// Check a CronJob schedule; the error says what is wrong and how to fix it.
pub fn check_schedule(s: &str) -> Result<(), String> {
    const HELP: &str = "five fields \"MINUTE HOUR DAY-OF-MONTH MONTH DAY-OF-WEEK\" (e.g. \"0 3 * * *\": 03:00 every day) or @hourly, @daily, @weekly, @monthly, @yearly, @every 6h";
    if s.contains("TZ") {
        return Err(
            "the API server refuses TZ= or CRON_TZ= in a new CronJob's schedule; set [runner].time_zone instead"
                .into(),
        );
    }
    if s.chars().any(|c| c.is_control()) {
        return Err(format!("the schedule holds control characters; {HELP}"));
    }
    let t = s.trim();
    if t.is_empty() {
        return Err(format!("the schedule is empty; {HELP}"));
    }
    if t.starts_with('@') {
        if DESCRIPTORS.contains(&t) {
            return Ok(());
        }
        if let Some(d) = t.strip_prefix("@every ") {
            if go_duration(d.trim()) {
                return Ok(());
            }
            return Err(format!(
                "{t:?}: @every needs a positive Go duration such as 6h or 1h30m"
            ));
        }
        return Err(format!("unknown descriptor {t:?}; {HELP}"));
    }
    let fields: Vec<&str> = t.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "{} field{} in {t:?}; the schedule needs {HELP}",
            fields.len(),
            if fields.len() == 1 { "" } else { "s" }
        ));
    }
    for (f, text) in FIELDS.iter().zip(&fields) {
        for expr in text.split(',') {
            item(f, expr)?;
        }
    }
    Ok(())
}

/// Check a CronJob time zone name as the API server's `validateTimeZone`
/// does (its character rules and `Local`); whether the zone exists is the
/// API server's tz database's answer.
pub fn check_time_zone(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("time_zone is empty; give an IANA name such as \"Etc/UTC\" or \"Europe/Berlin\", or leave it out (the controller manager's zone)".into());
    }
    if s.eq_ignore_ascii_case("local") {
        return Err(
            "time_zone must name an explicit IANA zone (e.g. \"Etc/UTC\"), not Local".into(),
        );
    }
    for part in s.split('/') {
        let ok = !part.is_empty()
            && part.len() <= 14
            && part != "."
            && part != ".."
            && !part.starts_with('-')
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-+".contains(&b));
        if !ok {
            return Err(format!(
                "time_zone {s:?} is not an IANA zone name (components of at most 14 letters, digits, '.', '-', '_', '+'), e.g. \"Etc/UTC\""
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_the_api_server_accepts() {
        for s in [
            "0 3 * * *",
            "*/15 * * * *",
            "0 0 1 1 *",
            "30 2 * * MON-FRI",
            "0 12 ? JAN,jul sun",
            "5/10 0-23/2 1-31 * 0-6",
            "@daily",
            "@every 6h",
            "@every 1h30m",
            "0,30 * * * *",
        ] {
            assert_eq!(check_schedule(s), Ok(()), "{s}");
        }
    }

    #[test]
    fn schedules_the_api_server_refuses() {
        for (s, want) in [
            ("0 3 * *", "4 fields"),
            ("0 3 * * * *", "6 fields"),
            ("60 * * * *", "above the maximum 59"),
            ("* 24 * * *", "above the maximum 23"),
            ("* * 0 * *", "below the minimum 1"),
            ("* * * 13 *", "above the maximum 12"),
            ("* * * * 7", "above the maximum 6"),
            ("*/0 * * * *", "positive"),
            ("5-1 * * * *", "starts after it ends"),
            ("1-2-3 * * * *", "too many hyphens"),
            ("1/2/3 * * * *", "too many slashes"),
            ("x * * * *", "not a number"),
            ("* * * foo *", "not a number or a name"),
            ("1,,2 * * * *", "empty item"),
            ("-1 * * * *", "not a number"),
            ("CRON_TZ=UTC 0 3 * * *", "time_zone"),
            ("@sometimes", "unknown descriptor"),
            ("@every", "unknown descriptor"),
            ("@every 0s", "positive Go duration"),
            ("@every 5 minutes", "positive Go duration"),
            ("", "empty"),
            ("0 3 * * *\n0 4 * * *", "control characters"),
            ("99999999999 * * * *", "not a number"),
        ] {
            let e = check_schedule(s).expect_err(s);
            assert!(e.contains(want), "{s:?}: {e}");
        }
    }

    /// Random schedules from cron's alphabet (and some noise): an answer,
    /// never a panic; whatever is accepted has five fields or a descriptor.
    #[test]
    fn random_schedules_never_panic() {
        let alphabet: Vec<char> = "0123456789*/-,? @abcdefhijklmnorstuvwyTZ=\t\u{e9}\u{0}"
            .chars()
            .collect();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            let mut s = String::new();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            for i in 0..(x % 24) {
                let k = (x >> (i % 50)) as usize ^ (i as usize * 7);
                s.push(alphabet[k % alphabet.len()]);
            }
            if check_schedule(&s).is_ok() {
                let t = s.trim();
                assert!(
                    t.starts_with('@') || t.split_whitespace().count() == 5,
                    "{s:?}"
                );
            }
            let _ = check_time_zone(&s);
        }
    }

    #[test]
    fn time_zones() {
        for z in [
            "Etc/UTC",
            "Europe/Berlin",
            "America/Argentina/Buenos_Aires",
            "UTC",
            "Etc/GMT+5",
        ] {
            assert_eq!(check_time_zone(z), Ok(()), "{z}");
        }
        for z in [
            "",
            "Local",
            "local",
            "Europe//Berlin",
            "../etc/passwd",
            "/UTC",
            "Europe/Berlin ",
            "A/VeryVeryLongComponent",
            "-UTC",
        ] {
            assert!(check_time_zone(z).is_err(), "{z:?}");
        }
    }
}
