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

/// A row's text column `i` ("" when it is not text).
fn text<'r>(r: &'r rusqlite::Row<'_>, i: usize) -> &'r str {
    r.get_ref(i)
        .ok()
        .and_then(|v| v.as_str().ok())
        .unwrap_or("")
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
                "SELECT cell_id, seq, batch, test, kind, path, pattern, flows, params, dims, repeat,
                        state, error, attempts, started_at, ended_at, wall_s, in_plan
                 FROM cells WHERE run_id = ?1 {filter} ORDER BY {order}"
            ))
            .map_err(self.err("reading cells"))?;
        let mut rows = st.query(args).map_err(self.err("reading cells"))?;
        while let Some(r) = rows.next().map_err(self.err("reading cells"))? {
            let get = |e| StoreError::sql(&self.path, "reading cells", e);
            let cell_id: String = r.get(0).map_err(get)?;
            let text =
                |i: usize| -> Result<String, StoreError> { r.get::<_, String>(i).map_err(get) };
            let (flows_t, params_t, dims_t, state_t) = (text(7)?, text(8)?, text(9)?, text(11)?);
            // A cell the readers cannot decode is skipped and counted by the
            // store (Store::skipped), the same for every reader.
            let decoded = (|| -> Result<_, String> {
                fn j<T: serde::de::DeserializeOwned>(what: &str, t: &str) -> Result<T, String> {
                    serde_json::from_str(t).map_err(|e| format!("{what}: {e}"))
                }
                let flows: Vec<(String, String)> = j("flows", &flows_t)?;
                let params: serde_json::Value = j("params", &params_t)?;
                let dims: serde_json::Value = j("dims", &dims_t)?;
                let state = CellState::parse(&state_t)
                    .ok_or_else(|| format!("state: unknown state {state_t:?}"))?;
                Ok((flows, params, dims, state))
            })();
            let (flows, params, dims, state) = match decoded {
                Ok(d) => d,
                Err(e) => {
                    self.skip(format!("run {run_id} cell {cell_id}: {e}"));
                    continue;
                }
            };
            let row = CellRow {
                spec: CellSpec {
                    cell_id: cell_id.clone(),
                    seq: r.get(1).map_err(get)?,
                    batch: r.get(2).map_err(get)?,
                    test: text(3)?,
                    kind: text(4)?,
                    path: text(5)?,
                    pattern: text(6)?,
                    flows,
                    params,
                    dims,
                    repeat: r.get(10).map_err(get)?,
                },
                state,
                error: r.get(12).map_err(get)?,
                attempts: r.get(13).map_err(get)?,
                started_at: r.get(14).map_err(get)?,
                ended_at: r.get(15).map_err(get)?,
                wall_s: r.get(16).map_err(get)?,
            };
            f(row, r.get(17).map_err(get)?)?;
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
        // Canonical text, as `current` makes it from the parsed cell.
        let canon = |t: &str| -> String {
            serde_json::from_str::<serde_json::Value>(t)
                .map(|v| v.to_string())
                .unwrap_or_else(|_| t.to_string())
        };
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
                    pairs.insert(canon(text(r, 0)));
                },
            )?;
            self.each_cell_text(
                "test, kind, path, params, dims, flows",
                &format!("in_plan = 1 AND pattern <> '{RETEST}'"),
                run_id,
                test,
                &mut |r| {
                    let t = |i| text(r, i);
                    let flows = canon(t(5));
                    if !pairs.contains(&flows) {
                        return;
                    }
                    let (params, dims) = (canon(t(3)), canon(t(4)));
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
