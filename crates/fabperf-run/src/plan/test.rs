//! One `[[tests]]` entry: its kind, name and paths, its pattern, repeats
//! and suspect rule, its sweep and environment dimensions, its rails; and
//! the plan-wide bound on cells.

use super::*;

/// The checked tests, and the tuning profiles they name (by profile name,
/// with the file each was read from).
pub(super) fn check_tests(
    cx: &mut Diagnostics,
    raw: &[S<RawTest>],
    paths_declared: &BTreeSet<String>,
    base_dir: &Path,
) -> (Vec<TestDecl>, ProfileFiles) {
    let mut tests = Vec::new();
    let mut profiles = ProfileFiles::new();
    let mut test_names = BTreeSet::new();
    let mut total_cells: usize = 0;
    let mut budget = Budget {
        points: MAX_POINTS,
        cells: MAX_CELLS,
    };
    for (i, t) in raw.iter().enumerate() {
        let span = t.span();
        let t = t.get_ref();
        let Some(kind) = Kind::parse(t.kind.get_ref()) else {
            cx.at(
                t.kind.span(),
                format!(
                    "unknown test kind {:?}; one of: {}",
                    t.kind.get_ref(),
                    Kind::ALL.map(Kind::name).join(", ")
                ),
            );
            continue;
        };
        let name = match &t.name {
            Some(n) if is_name(n.get_ref()) => n.get_ref().clone(),
            Some(n) => {
                cx.at(
                    n.span(),
                    format!(
                        "test name {:?}: use letters, digits, '-', '_' and '.'",
                        n.get_ref()
                    ),
                );
                continue;
            }
            None => format!("{}-{}", kind.name(), i + 1),
        };
        if !test_names.insert(name.clone()) {
            cx.at(
                t.name.as_ref().map_or(span.clone(), |n| n.span()),
                format!("two tests are named {name:?}; give each a unique `name`"),
            );
        }
        // Paths.
        let mut paths = Vec::new();
        match (&t.path, &t.paths) {
            (Some(_), Some(ps)) => cx.at(ps.span(), "give `path` or `paths`, not both"),
            (Some(p), None) => paths.push(p.clone()),
            (None, Some(ps)) => {
                if ps.get_ref().is_empty() {
                    cx.at(ps.span(), "`paths` is empty");
                }
                paths.extend(ps.get_ref().iter().cloned());
            }
            (None, None) => {}
        }
        let mut path_names = Vec::new();
        if paths.is_empty() {
            if paths_declared.len() == 1 {
                path_names.push(paths_declared.iter().next().cloned().unwrap_or_default());
            } else if !paths_declared.is_empty() {
                cx.at(span.clone(), format!("test {name:?}: say which path(s) it runs on (`paths = [...]`); paths with agents: {}", join(paths_declared)));
            }
        }
        for p in &paths {
            if !paths_declared.contains(p.get_ref()) {
                cx.at(
                    p.span(),
                    format!(
                        "path {:?} has no agents; paths with agents: {}",
                        p.get_ref(),
                        join(paths_declared)
                    ),
                );
            } else if path_names.contains(p.get_ref()) {
                cx.at(p.span(), format!("path {:?} is listed twice", p.get_ref()));
            } else {
                path_names.push(p.get_ref().clone());
            }
        }
        let (pattern, pattern_name, pspan) = check_pattern(cx, t, kind, span.clone());
        let repeats = match &t.repeats {
            None => 1,
            Some(r) => cx.int_in(r, "repeats", 1, 1000).map_or(1, |n| n as u32),
        };
        let frac = |cx: &mut Diagnostics,
                    v: &Option<S<f64>>,
                    default: f64,
                    lo: f64,
                    hi: f64,
                    what: &str| match v {
            None => default,
            Some(x) if x.get_ref().is_finite() && *x.get_ref() > lo && *x.get_ref() <= hi => {
                *x.get_ref()
            }
            Some(x) => {
                cx.at(
                    x.span(),
                    format!("{what} {} is out of range ({lo}, {hi}]", x.get_ref()),
                );
                default
            }
        };
        let suspect_bw = frac(cx, &t.suspect_bw, 0.93, 0.0, 1.0, "suspect_bw");
        let suspect_lat = frac(cx, &t.suspect_lat, 2.1, 1.0, 1000.0, "suspect_lat");
        let suspect_rule = match &t.suspect_rule {
            None => crate::summary::RuleKind::default(),
            Some(r) => crate::summary::RuleKind::parse(r.get_ref()).unwrap_or_else(|| {
                cx.at(
                    r.span(),
                    format!(
                        "unknown suspect_rule {:?}; one of: {}",
                        r.get_ref(),
                        crate::summary::RuleKind::NAMES
                    ),
                );
                crate::summary::RuleKind::default()
            }),
        };
        let per_point = repeats as usize * path_names.len().max(1);
        let points = sweep(cx, t, kind, &name, per_point, &mut budget);
        let points = env_dims(cx, t, &name, base_dir, &mut profiles, points);
        if matches!(pattern, Pattern::Incast { .. }) {
            if let Some(why) = points.iter().find_map(|p| outcast(&p.params)) {
                cx.at(
                    pspan.clone(),
                    format!(
                        "test {name:?}: pattern \"incast\" sends into one receiver, but {why}: the \
                         data would leave the receiver (an outcast, which is not what an incast \
                         measures); use directions = [\"forward\"] or [\"bidir\"] (each direction \
                         is aggregated on its own), or write/send for RDMA"
                    ),
                );
            }
        }
        let rails = rails_decl(cx, t, kind, pattern_name, &name);
        let cell_secs = points
            .iter()
            .map(|p| expected_secs(kind, &p.params))
            .fold(0.0, f64::max);
        total_cells = total_cells.saturating_add(points.len().saturating_mul(per_point));
        tests.push(TestDecl {
            name,
            kind,
            paths: path_names,
            pattern,
            repeats,
            points,
            cell_secs,
            suspect_bw,
            suspect_lat,
            suspect_rule,
            rails,
        });
    }
    if raw.is_empty() {
        cx.at(0..0, "the plan has no [[tests]]");
    }
    if total_cells > MAX_CELLS {
        cx.at(0..0, format!("the plan expands to more than {MAX_CELLS} cells before pairing agents; shorten its sweeps or repeats"));
    }
    (tests, profiles)
}
