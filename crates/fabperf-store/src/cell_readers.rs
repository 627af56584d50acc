//! Reading cells: all of a run's, one by id, one at a time in plan order,
//! and split by the run's current plan (which re-tests count).

use crate::{CellRow, CellSpec, CellState, PlanCells, Store, StoreError, RETEST};
use rusqlite::params;

/// The current plan's cells ([`Store::plan_cells`]): a re-test counts when
/// it repeats a planned cell — the same test, kind, path, parameters, sweep
/// point and flows (as stored: the same text) — kept as a 128-bit hash.
pub(crate) struct PlanFilter {
    hasher: (
        std::collections::hash_map::RandomState,
        std::collections::hash_map::RandomState,
    ),
    planned: std::collections::HashSet<u128>,
    retests: bool,
}

impl PlanFilter {
    fn key(&self, parts: [&str; 6]) -> u128 {
        use std::hash::{BuildHasher, Hash, Hasher};
        let (mut a, mut b) = (self.hasher.0.build_hasher(), self.hasher.1.build_hasher());
        for p in parts {
            p.hash(&mut a);
            p.hash(&mut b);
        }
        (u128::from(a.finish()) << 64) | u128::from(b.finish())
    }

    /// Is the cell (with its `in_plan` flag) part of the current plan?
    pub(crate) fn current(&self, c: &CellRow, in_plan: bool) -> bool {
        if c.spec.pattern == RETEST {
            self.retests
                && self.planned.contains(&self.key([
                    &c.spec.test,
                    &c.spec.kind,
                    &c.spec.path,
                    &c.spec.params.to_string(),
                    &c.spec.dims.to_string(),
                    &serde_json::to_string(&c.spec.flows).unwrap_or_default(),
                ]))
        } else {
            in_plan
        }
    }
}

/// The canonical text of `t`, as the plan filter compares texts: parsed as
/// JSON and written again (`t` itself when it is not JSON), without parsing
/// when `t` is plainly its own ([`plainly_canonical`]: flows as fabperf
/// writes them, millions in a mesh).
fn canonical(t: &str) -> std::borrow::Cow<'_, str> {
    if plainly_canonical(t) {
        std::borrow::Cow::Borrowed(t)
    } else {
        std::borrow::Cow::Owned(parsed_canonical(t))
    }
}

/// `t` parsed as JSON and written again, or `t` when it is not JSON.
fn parsed_canonical(t: &str) -> String {
    serde_json::from_str::<serde_json::Value>(t)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| t.to_string())
}

/// Is `t` its own canonical text ([`parsed_canonical`]), known without
/// parsing it? True when outside its strings there are only brackets and commas
/// and inside them no escape: written again such a text is the same (JSON
/// without whitespace, numbers or objects, strings that need no escape),
/// and one that is not JSON stays as it is.
fn plainly_canonical(t: &str) -> bool {
    let mut in_string = false;
    for b in t.bytes() {
        match (in_string, b) {
            (_, b'"') => in_string = !in_string,
            (true, b'\\') => return false,
            (true, _) | (false, b'[' | b']' | b',') => {}
            (false, _) => return false,
        }
    }
    true
}

/// A row's text column `i` ("" when it is not text).
fn text<'r>(r: &'r rusqlite::Row<'_>, i: usize) -> &'r str {
    r.get_ref(i)
        .ok()
        .and_then(|v| v.as_str().ok())
        .unwrap_or("")
}

/// The columns [`CellDecoder::read`] reads, in its order.
pub(crate) const CELL_COLUMNS: [&str; 18] = [
    "cell_id",
    "seq",
    "batch",
    "test",
    "kind",
    "path",
    "pattern",
    "flows",
    "params",
    "dims",
    "repeat",
    "state",
    "error",
    "attempts",
    "started_at",
    "ended_at",
    "wall_s",
    "in_plan",
];

/// [`CELL_COLUMNS`] as an SQL list, each name after `prefix` (`"c."` in a
/// join).
pub(crate) fn cell_columns(prefix: &str) -> String {
    CELL_COLUMNS.map(|c| format!("{prefix}{c}")).join(", ")
}

/// Decodes cell rows ([`CELL_COLUMNS`]). The cells of one test and sweep
/// point share their parameters' and sweep point's text (a mesh of a
/// thousand nodes: a million cells, a handful of texts): the last text of
/// each is kept with its parsed value, and a cell with the same text gets
/// a copy instead of a second parse.
#[derive(Default)]
pub(crate) struct CellDecoder {
    params: Option<(String, serde_json::Value)>,
    dims: Option<(String, serde_json::Value)>,
}

/// `t` parsed, or the copy kept for the same text.
fn parsed_once(
    last: &mut Option<(String, serde_json::Value)>,
    what: &str,
    t: &str,
) -> Result<serde_json::Value, String> {
    if let Some((text, v)) = last {
        if text == t {
            return Ok(v.clone());
        }
    }
    let v: serde_json::Value = serde_json::from_str(t).map_err(|e| format!("{what}: {e}"))?;
    *last = Some((t.to_string(), v.clone()));
    Ok(v)
}

impl CellDecoder {
    /// The cell of row `r`, its columns from `at` on, and its `in_plan`
    /// flag; `None` for a cell the readers cannot decode (skipped and
    /// counted by the store, [`Store::skipped`], the same for every reader).
    pub(crate) fn read(
        &mut self,
        store: &Store,
        run_id: i64,
        r: &rusqlite::Row<'_>,
        at: usize,
    ) -> Result<Option<(CellRow, bool)>, StoreError> {
        let get = |e| StoreError::sql(&store.path, "reading cells", e);
        let str_at = |i: usize| -> Result<&str, StoreError> {
            let v = r.get_ref(at + i).map_err(get)?;
            v.as_str().map_err(|_| {
                get(rusqlite::Error::InvalidColumnType(
                    at + i,
                    String::new(),
                    v.data_type(),
                ))
            })
        };
        let string =
            |i: usize| -> Result<String, StoreError> { r.get::<_, String>(at + i).map_err(get) };
        let cell_id: String = string(0)?;
        let (flows_t, params_t, dims_t, state_t) =
            (str_at(7)?, str_at(8)?, str_at(9)?, str_at(11)?);
        let decoded = (|| -> Result<_, String> {
            let flows: Vec<(String, String)> =
                serde_json::from_str(flows_t).map_err(|e| format!("flows: {e}"))?;
            let params = parsed_once(&mut self.params, "params", params_t)?;
            let dims = parsed_once(&mut self.dims, "dims", dims_t)?;
            let state = CellState::parse(state_t)
                .ok_or_else(|| format!("state: unknown state {state_t:?}"))?;
            Ok((flows, params, dims, state))
        })();
        let (flows, params, dims, state) = match decoded {
            Ok(d) => d,
            Err(e) => {
                store.skip(format!("run {run_id} cell {cell_id}: {e}"));
                return Ok(None);
            }
        };
        let row = CellRow {
            spec: CellSpec {
                cell_id,
                seq: r.get(at + 1).map_err(get)?,
                batch: r.get(at + 2).map_err(get)?,
                test: string(3)?,
                kind: string(4)?,
                path: string(5)?,
                pattern: string(6)?,
                flows,
                params,
                dims,
                repeat: r.get(at + 10).map_err(get)?,
            },
            state,
            error: r.get(at + 12).map_err(get)?,
            attempts: r.get(at + 13).map_err(get)?,
            started_at: r.get(at + 14).map_err(get)?,
            ended_at: r.get(at + 15).map_err(get)?,
            wall_s: r.get(at + 16).map_err(get)?,
        };
        Ok(Some((row, r.get(at + 17).map_err(get)?)))
    }
}

impl Store {
    /// Every cell of the run, in plan order (cells no longer in the plan
    /// last). Readers that judge a run use [`Store::plan_cells`]: this list
    /// also holds the cells of earlier versions of its plan.
    pub fn cells(&self, run_id: i64) -> Result<Vec<CellRow>, StoreError> {
        let mut out = Vec::new();
        self.each_cell(run_id, None, &mut |c, _| {
            out.push(c);
            Ok(())
        })?;
        Ok(out)
    }

    /// One cell of a run by its id.
    pub fn cell(&self, run_id: i64, cell_id: &str) -> Result<Option<CellRow>, StoreError> {
        let mut out = None;
        self.each_cell_where(
            run_id,
            "AND cell_id = ?2",
            &[&run_id, &cell_id],
            &mut |c, _| {
                out = Some(c);
                Ok(())
            },
        )?;
        Ok(out)
    }

    /// Calls `f` with each cell of the run (of one test when `test` is
    /// given) and its `in_plan` flag, in plan order, keeping none: readers
    /// of a large run hold what they derive, not the cells.
    fn each_cell(
        &self,
        run_id: i64,
        test: Option<&str>,
        f: &mut dyn FnMut(CellRow, bool) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        match test {
            Some(t) => self.each_cell_where(run_id, "AND test = ?2", &[&run_id, &t], f),
            None => self.each_cell_where(run_id, "", &[&run_id], f),
        }
    }

    fn each_cell_where(
        &self,
        run_id: i64,
        filter: &str,
        args: &[&dyn rusqlite::ToSql],
        f: &mut dyn FnMut(CellRow, bool) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.each_cell_ordered(run_id, filter, "in_plan DESC, seq, cell_id", args, f)
    }

    pub(crate) fn each_cell_ordered(
        &self,
        run_id: i64,
        filter: &str,
        order: &str,
        args: &[&dyn rusqlite::ToSql],
        f: &mut dyn FnMut(CellRow, bool) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let mut st = self
            .conn
            .prepare(&format!(
                "SELECT {} FROM cells WHERE run_id = ?1 {filter} ORDER BY {order}",
                cell_columns("")
            ))
            .map_err(self.err("reading cells"))?;
        let mut rows = st.query(args).map_err(self.err("reading cells"))?;
        let mut decoder = CellDecoder::default();
        while let Some(r) = rows.next().map_err(self.err("reading cells"))? {
            if let Some((c, in_plan)) = decoder.read(self, run_id, r, 0)? {
                f(c, in_plan)?;
            }
        }
        Ok(())
    }

    /// The run's cells split by its current plan — the plan its last
    /// `fabperf run` synced ([`Store::sync_cells`]). `current`: the plan's
    /// cells and the re-tests derived from them; `stale`: cells of earlier
    /// versions of the plan (an edited plan gives edited cells new ids) and
    /// re-tests derived from those. Everything that judges a run — the mesh
    /// summary, the re-test scheduler, reports — counts `current` only and
    /// lists `stale` as not part of the plan.
    pub fn plan_cells(&self, run_id: i64) -> Result<PlanCells, StoreError> {
        let mut out = PlanCells::default();
        self.each_plan_cell(run_id, None, &mut |c, current| {
            if current {
                out.current.push(c);
            } else {
                out.stale.push(c);
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// [`Store::plan_cells`] one cell at a time (of one test when `test` is
    /// given), in plan order, each with whether it is part of the current
    /// plan; nothing is kept but a 128-bit hash per planned cell, so a run
    /// of millions of cells can be read in bounded memory.
    pub fn each_plan_cell(
        &self,
        run_id: i64,
        test: Option<&str>,
        f: &mut dyn FnMut(CellRow, bool) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let plan = self.plan_filter(run_id, test)?;
        self.each_cell(run_id, test, &mut |c, in_plan| {
            let current = plan.current(&c, in_plan);
            f(c, current)
        })
    }

    /// What tells the current plan's cells from the others
    /// ([`Store::plan_cells`]): the hash of every planned cell a re-test
    /// may repeat, when the run has re-tests.
    pub(crate) fn plan_filter(
        &self,
        run_id: i64,
        test: Option<&str>,
    ) -> Result<PlanFilter, StoreError> {
        let mut plan = PlanFilter {
            hasher: (
                std::collections::hash_map::RandomState::new(),
                std::collections::hash_map::RandomState::new(),
            ),
            planned: std::collections::HashSet::new(),
            retests: false,
        };
        plan.retests = self
            .conn
            .query_row(
                &format!("SELECT EXISTS (SELECT 1 FROM cells WHERE run_id = ?1 AND pattern = '{RETEST}')"),
                [run_id],
                |r| r.get(0),
            )
            .map_err(self.err("reading cells"))?;
        // Canonical text ([`canonical`]), as `current` makes it from the
        // parsed cell.
        if plan.retests {
            // A re-test repeats a planned cell of its own pair: only the
            // planned cells of the re-tests' pairs can be one (at 1024
            // nodes, tens of thousands of the six million), so only they
            // are made canonical and hashed.
            let mut pairs: std::collections::HashSet<String> = std::collections::HashSet::new();
            self.each_cell_text(
                "flows",
                &format!("pattern = '{RETEST}'"),
                run_id,
                test,
                &mut |r| {
                    pairs.insert(canonical(text(r, 0)).into_owned());
                },
            )?;
            self.each_cell_text(
                "test, kind, path, params, dims, flows",
                &format!("in_plan = 1 AND pattern <> '{RETEST}'"),
                run_id,
                test,
                &mut |r| {
                    let t = |i| text(r, i);
                    let flows = canonical(t(5));
                    if !pairs.contains(flows.as_ref()) {
                        return;
                    }
                    let (params, dims) = (canonical(t(3)), canonical(t(4)));
                    let k = plan.key([t(0), t(1), t(2), &params, &dims, &flows]);
                    plan.planned.insert(k);
                },
            )?;
        }
        Ok(plan)
    }

    /// `SELECT columns FROM cells` of the run where `filter` holds (and, with
    /// `test`, of that test), each row given to `f` (read its columns with
    /// [`text`]).
    fn each_cell_text(
        &self,
        columns: &str,
        filter: &str,
        run_id: i64,
        test: Option<&str>,
        f: &mut dyn FnMut(&rusqlite::Row<'_>),
    ) -> Result<(), StoreError> {
        let sql = format!(
            "SELECT {columns} FROM cells WHERE run_id = ?1 AND {filter} {}",
            if test.is_some() { "AND test = ?2" } else { "" }
        );
        let mut st = self.conn.prepare(&sql).map_err(self.err("reading cells"))?;
        let mut rows = match test {
            Some(t) => st.query(params![run_id, t]),
            None => st.query(params![run_id]),
        }
        .map_err(self.err("reading cells"))?;
        while let Some(r) = rows.next().map_err(self.err("reading cells"))? {
            f(r);
        }
        Ok(())
    }

    /// The tests with cells of `pattern` in the run's current plan, in plan
    /// order (of each test's first such cell), read from the cells' columns
    /// alone: nothing is decoded, whatever the size of the run. Not for
    /// `retest` (a re-test's place in the plan is decided per cell).
    pub fn plan_tests_with_pattern(
        &self,
        run_id: i64,
        pattern: &str,
    ) -> Result<Vec<String>, StoreError> {
        let mut st = self
            .conn
            .prepare(
                "SELECT test FROM cells WHERE run_id = ?1 AND in_plan = 1 AND pattern = ?2
                 GROUP BY test ORDER BY min(seq), min(cell_id)",
            )
            .map_err(self.err("reading cells"))?;
        let rows = st
            .query_map(params![run_id, pattern], |r| r.get::<_, String>(0))
            .map_err(self.err("reading cells"))?;
        rows.collect::<Result<_, _>>()
            .map_err(self.err("reading cells"))
    }
}

#[cfg(test)]
mod tests {
    use super::{parsed_canonical, plainly_canonical};

    /// A text taken as canonical without parsing is: over every text of up
    /// to 5 characters from an alphabet of JSON's punctuation, whitespace,
    /// escapes, numbers, objects and non-ASCII, and the flows fabperf writes
    /// (which are taken so, names with quotes or backslashes aside).
    #[test]
    fn plainly_canonical_texts_are_canonical() {
        let alphabet = [
            "[", "]", ",", "\"", "a", "\\", " ", "1", "{", "}", ":", "é", "\t",
        ];
        let mut taken = 0;
        let mut stack = vec![String::new()];
        while let Some(t) = stack.pop() {
            if plainly_canonical(&t) {
                taken += 1;
                assert_eq!(parsed_canonical(&t), t, "{t:?}");
            }
            if t.chars().count() < 5 {
                for a in alphabet {
                    stack.push(format!("{t}{a}"));
                }
            }
        }
        assert!(taken > 1000, "{taken}");
        for flows in [
            vec![("node1024".to_string(), "node0001".to_string())],
            vec![
                ("fp-node1".into(), "fp-node2".into()),
                ("ä".into(), "b/c".into()),
            ],
            Vec::new(),
        ] {
            let t = serde_json::to_string(&flows).unwrap();
            assert!(plainly_canonical(&t), "{t}");
        }
        for hostile in [
            r#"[["a\"b","c"]]"#,
            r#"[["a\\b","c"]]"#,
            "[ [\"a\",\"b\"] ]",
            "[[1,2]]",
        ] {
            assert!(!plainly_canonical(hostile), "{hostile}");
        }
    }
}
