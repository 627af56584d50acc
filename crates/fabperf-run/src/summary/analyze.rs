//! Reading a run's mesh cells, one cell and one measurement at a time,
//! into each group's per-pair figures, re-tests and failures; then each
//! group is judged (`verdict`).

use super::findings::{MeshAnalysis, MeshGroup};
use super::rails::on_rails;
use super::records::{measured_pairs, no_figure_reason, planned_dirs, real_port_rate};
use super::rule::{metric_of, Metric, Rule};
use super::verdict::judge;
use fabperf_store::{CellIds, CellRow, CellState, Store, StoreError, StoredMeasurement, RETEST};
use std::collections::{BTreeSet, HashMap};

/// Node names as small numbers, in the order first met.
#[derive(Default)]
pub struct Names {
    /// Node name to id (a fast hash: looked up for every cell).
    pub(super) ids: rustc_hash::FxHashMap<String, u32>,
    pub(super) names: Vec<String>,
}

impl Names {
    /// The number of node `n` (a new one when it is not known yet).
    pub fn id(&mut self, n: &str) -> u32 {
        if let Some(&i) = self.ids.get(n) {
            return i;
        }
        let i = self.names.len() as u32;
        self.ids.insert(n.to_string(), i);
        self.names.push(n.to_string());
        i
    }

    /// The node numbered `i` (by [`id`](Self::id)).
    pub fn name(&self, i: u32) -> &str {
        &self.names[i as usize]
    }

    /// Every node, by number.
    pub fn all(&self) -> &[String] {
        &self.names
    }
}

pub(super) type Pair = (u32, u32);

/// Per group (path, dims): per data pair, the figures or the failures.
#[derive(Default)]
pub(super) struct Raw {
    pub(super) nodes: BTreeSet<u32>,
    /// Sum and count of the mesh's figures per pair.
    pub(super) mesh: HashMap<Pair, (f64, u32)>,
    pub(super) mesh_failed: HashMap<Pair, String>,
    pub(super) retest: HashMap<Pair, Vec<(u32, f64)>>,
    pub(super) retest_failed: HashMap<Pair, Vec<String>>,
    pub(super) port: Option<f64>,
    /// The mesh cell behind each pair (an index into the cell ids).
    pub(super) templates: HashMap<Pair, u32>,
}

/// What the measurement pass needs of a finished cell (20 bytes: a run
/// of a thousand nodes has millions).
#[derive(Clone, Copy)]
struct CellInfo {
    group: u32,
    /// The driving agent and its peer.
    a: u32,
    b: u32,
    repeat: u32,
    retest: bool,
    /// The directions its data moves in: `a` to `b`, `b` to `a`.
    forward: bool,
    back: bool,
    seen: bool,
}

impl CellInfo {
    /// The (from, to) pairs its data moves between.
    fn planned(&self) -> impl Iterator<Item = Pair> {
        let (a, b) = (self.a, self.b);
        [(self.forward, (a, b)), (self.back, (b, a))]
            .into_iter()
            .filter_map(|(on, p)| on.then_some(p))
    }
}

/// The finished cells by id, kept small: an id of 16 lowercase hex digits
/// (every id fabperf makes) as the number it spells, any other as text.
#[derive(Default)]
struct DoneCells {
    hex: rustc_hash::FxHashMap<u64, CellInfo>,
    other: rustc_hash::FxHashMap<String, CellInfo>,
}

impl DoneCells {
    fn hex(id: &str) -> Option<u64> {
        let lower_hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
        (id.len() == 16 && id.bytes().all(lower_hex))
            .then(|| u64::from_str_radix(id, 16).ok())
            .flatten()
    }

    fn insert(&mut self, id: &str, info: CellInfo) {
        match Self::hex(id) {
            Some(k) => {
                self.hex.insert(k, info);
            }
            None => {
                self.other.insert(id.to_string(), info);
            }
        }
    }

    fn get_mut(&mut self, id: &str) -> Option<&mut CellInfo> {
        match Self::hex(id) {
            Some(k) => self.hex.get_mut(&k),
            None => self.other.get_mut(id),
        }
    }

    fn values(&self) -> impl Iterator<Item = &CellInfo> {
        self.hex.values().chain(self.other.values())
    }
}

/// Analyse the mesh cells of `test` in run `run_id`. The run is read one
/// cell and one measurement at a time; what is kept is per pair (a mean,
/// failures, re-tests), so a mesh of a thousand nodes fits in memory.
pub fn analyze(
    store: &Store,
    run_id: i64,
    test: &str,
    rule: &Rule,
) -> Result<MeshAnalysis, StoreError> {
    let mut feed = MeshFeed::new(test);
    store.each_plan_cell(run_id, Some(test), &mut |c, current| {
        feed.cell(&c, current);
        Ok(())
    })?;
    // The finished cells' measurements, one cell at a time.
    let mut cur: Vec<StoredMeasurement> = Vec::new();
    store.each_measurement(run_id, Some(test), &mut |m| {
        if cur.first().is_some_and(|c| c.cell_id != m.cell_id) {
            feed.measured(&cur);
            cur.clear();
        }
        cur.push(m);
        Ok(())
    })?;
    feed.measured(&cur);
    feed.finish(store, run_id, rule)
}

/// A mesh test's analysis fed by a reader that already goes over the run
/// (the report reads every cell once, for its tables and its matrices):
/// each cell of the run with [`cell`](Self::cell), before its
/// measurements, given together with [`measured`](Self::measured); then
/// [`finish`](Self::finish). [`analyze`] is this fed from the store.
pub struct MeshFeed {
    test: String,
    names: Names,
    /// Each group's (path, dims), in the order first met.
    keys: Vec<(String, serde_json::Value)>,
    groups: Vec<(MeshGroup, Raw)>,
    /// The cells behind the pairs (`Raw::templates` index them).
    cell_ids: CellIds,
    /// The finished cells by id (a fast hash: one insert and one look-up
    /// per cell, millions at 1024 nodes).
    done: DoneCells,
    /// Finished cells given with [`cell_measured`](MeshFeed::cell_measured)
    /// without a single record.
    unrecorded: Vec<CellInfo>,
    stale_cells: Vec<String>,
}

impl MeshFeed {
    pub fn new(test: &str) -> MeshFeed {
        MeshFeed {
            test: test.to_string(),
            names: Names::default(),
            keys: Vec::new(),
            groups: Vec::new(),
            cell_ids: CellIds::new(),
            done: Default::default(),
            unrecorded: Vec::new(),
            stale_cells: Vec::new(),
        }
    }

    /// The test analysed.
    pub fn test(&self) -> &str {
        &self.test
    }

    /// One cell of the run (`current`: part of its current plan); cells of
    /// other tests and patterns are passed over.
    pub fn cell(&mut self, c: &CellRow, current: bool) {
        if let Some(info) = self.enter(c, current) {
            self.done.insert(&c.spec.cell_id, info);
        }
    }

    /// One cell of the run with all its measurements (in the order
    /// stored), for a reader that has both at once: nothing is kept per
    /// finished cell until its records come, which at a thousand nodes is
    /// most of the memory [`cell`](Self::cell) and
    /// [`measured`](Self::measured) need.
    pub fn cell_measured(&mut self, c: &CellRow, current: bool, ms: &[StoredMeasurement]) {
        let Some(mut info) = self.enter(c, current) else {
            return;
        };
        if ms.is_empty() {
            // Judged with the others without a record, in `finish`.
            self.unrecorded.push(info);
            return;
        }
        info.seen = true;
        let (g, raw) = &mut self.groups[info.group as usize];
        record_cell(&info, g.metric, ms, raw);
    }

    /// A cell into its group; a finished one's figures are still to come.
    fn enter(&mut self, c: &CellRow, current: bool) -> Option<CellInfo> {
        if c.spec.test != self.test {
            return None;
        }
        // A rail cell's ends are the nodes' rails: all rails of a sweep
        // point are one group, so a slow rail stands out against the others
        // and is named (`n2/rail1`).
        let on_rails = on_rails(&c.spec);
        let s = on_rails.as_ref().unwrap_or(&c.spec);
        let retest = s.pattern == RETEST;
        if s.pattern != "mesh" && !retest {
            return None;
        }
        if !current {
            self.stale_cells.push(s.cell_id.clone());
            return None;
        }
        let gi = match self
            .keys
            .iter()
            .position(|(path, dims)| *path == s.path && *dims == s.dims)
        {
            Some(i) => i,
            None => {
                self.keys.push((s.path.clone(), s.dims.clone()));
                self.groups
                    .push((MeshGroup::empty(s, metric_of(&s.kind)), Raw::default()));
                self.groups.len() - 1
            }
        };
        let (a, b) = s.flows.first()?;
        let names = &mut self.names;
        let (a, b) = (names.id(a), names.id(b));
        let (forward, back) = planned_dirs(s);
        let info = CellInfo {
            group: u32::try_from(gi).expect("fewer than 2^32 groups"),
            a,
            b,
            repeat: s.repeat,
            retest,
            forward,
            back,
            seen: false,
        };
        let raw = &mut self.groups[gi].1;
        raw.nodes.extend([a, b]);
        if !retest {
            for p in info.planned() {
                if let std::collections::hash_map::Entry::Vacant(e) = raw.templates.entry(p) {
                    e.insert(self.cell_ids.len() as u32);
                    self.cell_ids.push(&s.cell_id);
                }
            }
        }
        match c.state {
            CellState::Pending => None,
            CellState::Failed => {
                let why = c.error.clone().unwrap_or_else(|| "failed".into());
                for p in info.planned() {
                    fail(raw, retest, p, &why);
                }
                None
            }
            CellState::Done => Some(info),
        }
    }

    /// The measurements of one cell given to [`cell`](Self::cell) before
    /// (all of them, in the order stored).
    pub fn measured(&mut self, ms: &[StoredMeasurement]) {
        let Some(first) = ms.first() else {
            return;
        };
        // A cell's rows come together (the store writes each cell in one
        // transaction); rows of a cell already read could only come from a
        // damaged store, and are not counted twice.
        if let Some(info) = self.done.get_mut(&first.cell_id).filter(|i| !i.seen) {
            info.seen = true;
            let (g, raw) = &mut self.groups[info.group as usize];
            record_cell(info, g.metric, ms, raw);
        }
    }

    /// Judge every group; the suspects' re-test templates are read from
    /// `store`.
    pub fn finish(
        self,
        store: &Store,
        run_id: i64,
        rule: &Rule,
    ) -> Result<MeshAnalysis, StoreError> {
        let MeshFeed {
            test,
            names,
            mut groups,
            cell_ids,
            done,
            unrecorded,
            stale_cells,
            ..
        } = self;
        // Finished cells without a single record.
        for info in done.values().filter(|i| !i.seen).chain(&unrecorded) {
            let raw = &mut groups[info.group as usize].1;
            for p in info.planned() {
                fail(raw, info.retest, p, "the cell finished without a figure");
            }
        }
        let mut out = Vec::new();
        for (mut g, raw) in groups {
            judge(&mut g, raw, rule, &names);
            // Re-test templates only for the suspects (the runner derives
            // re-tests from them); every pair's would be a copy of the run.
            for s in &g.suspects {
                let (Some(&x), Some(&y)) = (names.ids.get(&s.src), names.ids.get(&s.dst)) else {
                    continue;
                };
                let Some(&ci) = g.template_ids.get(&(x, y)) else {
                    continue;
                };
                let Some(id) = cell_ids.get(ci as usize) else {
                    continue;
                };
                if let Some(c) = store.cell(run_id, id)? {
                    g.templates.insert((s.src.clone(), s.dst.clone()), c.spec);
                }
            }
            g.template_ids = HashMap::new();
            out.push(g);
        }
        // Groups in (path, dims) order.
        out.sort_by(|x, y| (&x.path, x.dims.to_string()).cmp(&(&y.path, y.dims.to_string())));
        Ok(MeshAnalysis {
            run_id,
            test,
            rule: rule.kind,
            bw_fraction: rule.bw_fraction,
            lat_factor: rule.lat_factor,
            groups: out,
            stale_cells,
        })
    }
}

fn fail(raw: &mut Raw, retest: bool, p: Pair, why: &str) {
    if retest {
        raw.retest_failed
            .entry(p)
            .or_default()
            .push(why.to_string());
    } else {
        raw.mesh_failed.entry(p).or_insert_with(|| why.to_string());
    }
}

/// A finished cell's records into its group's figures and failures.
fn record_cell(info: &CellInfo, metric: Metric, ms: &[StoredMeasurement], raw: &mut Raw) {
    let got: Vec<(Pair, f64)> = measured_pairs(ms, metric)
        .into_iter()
        .map(|(reversed, v)| {
            (
                if reversed {
                    (info.b, info.a)
                } else {
                    (info.a, info.b)
                },
                v,
            )
        })
        .collect();
    for (p, v) in &got {
        if info.retest {
            raw.retest.entry(*p).or_default().push((info.repeat, *v));
        } else {
            let e = raw.mesh.entry(*p).or_insert((0.0, 0));
            e.0 += v;
            e.1 += 1;
        }
    }
    if metric == Metric::BandwidthGbps {
        for m in ms {
            if let Some(r) = real_port_rate(m) {
                raw.port = Some(raw.port.map_or(r, |p| p.max(r)));
            }
        }
    }
    // A planned direction without a figure is a failure, also when the
    // cell itself finished.
    let missing: Vec<Pair> = info
        .planned()
        .filter(|p| !got.iter().any(|(q, _)| q == p))
        .collect();
    if !missing.is_empty() {
        let why = no_figure_reason(ms);
        for p in missing {
            fail(raw, info.retest, p, &why);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::*;
    use super::{CellInfo, DoneCells};

    #[test]
    fn stale_cells_are_left_out_and_listed() {
        let mut f = fixture(
            mesh_cells(|a, _| Ok(vec![rec(if a == "n1" { 1.0 } else { 10.0 }, "forward")])),
            vec![retest("n1", "n2", 0, Ok(vec![rec(1.0, "forward")]))],
        );
        // The plan is edited (another duration: new ids) and re-run: now
        // only n1 -> n2 is slow.
        let edited: Vec<(CellSpec, Outcome)> = mesh_cells(|a, b| {
            Ok(vec![rec(
                if (a, b) == ("n1", "n2") { 1.0 } else { 10.0 },
                "forward",
            )])
        })
        .into_iter()
        .map(|(mut c, o)| {
            c.cell_id = format!("v2-{}", c.cell_id);
            c.params = json!({"size": 65536, "duration_s": 2.0});
            (c, o)
        })
        .collect();
        let specs: Vec<CellSpec> = edited.iter().map(|(c, _)| c.clone()).collect();
        f.store.sync_cells(f.run, &specs, false).unwrap();
        for (c, o) in edited {
            let ms: Vec<Measurement> = o
                .unwrap()
                .into_iter()
                .map(|record| Measurement {
                    role: Role::Total,
                    src: Some(c.flows[0].0.clone()),
                    dst: Some(c.flows[0].1.clone()),
                    record,
                })
                .collect();
            f.store
                .finish_cell_done(f.run, &c.cell_id, &attempt(), &ms)
                .unwrap();
        }
        let (a, g, text) = analyze_one(&f);
        assert_eq!(g.repeats, 1, "the old cells are not repeats");
        let suspects: Vec<(&str, &str)> = g
            .suspects
            .iter()
            .map(|s| (s.src.as_str(), s.dst.as_str()))
            .collect();
        assert_eq!(
            suspects,
            vec![("n1", "n2")],
            "the old slow cells do not count"
        );
        assert!(g
            .cell_template("n1", "n2")
            .unwrap()
            .cell_id
            .starts_with("v2-"));
        assert_eq!(a.stale_cells.len(), 13, "12 old cells and their re-test");
        assert!(
            text.contains("13 stored cells are not part of the run's current plan"),
            "{text}"
        );
    }

    #[test]
    fn finished_cells_are_found_by_any_id() {
        let info = |a| CellInfo {
            group: 0,
            a,
            b: 0,
            repeat: 0,
            retest: false,
            forward: true,
            back: false,
            seen: false,
        };
        let mut d = DoneCells::default();
        let ids = [
            "0123456789abcdef",
            "0123456789ABCDEF",
            "0123456789abcde",
            "0123456789abcdef0",
            "+123456789abcdef",
            "",
            "ffffffffffffffff",
        ];
        for (i, id) in ids.iter().enumerate() {
            d.insert(id, info(i as u32));
        }
        assert_eq!((d.hex.len(), d.other.len()), (2, 5));
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(d.get_mut(id).map(|c| c.a), Some(i as u32), "{id:?}");
        }
        assert!(d.get_mut("0000000000000000").is_none());
        assert_eq!(d.values().count(), ids.len());
        let both = CellInfo {
            back: true,
            ..info(3)
        };
        assert_eq!(both.planned().collect::<Vec<_>>(), [(3, 0), (0, 3)]);
        let back = CellInfo {
            forward: false,
            ..both
        };
        assert_eq!(back.planned().collect::<Vec<_>>(), [(0, 3)]);
    }
}
