//! Reading measurements: decoded, as stored, one at a time over a whole
//! run, and alongside their cells in plan order.

use crate::cell_readers::{cell_columns, CellDecoder, CELL_COLUMNS};
use crate::{CellRow, Measurement, RawMeasurement, Role, Store, StoreError, StoredMeasurement};
use fabperf_results::Record;
use rusqlite::params;

impl Store {
    /// [`Store::each_plan_cell`] over the whole run with each cell's
    /// measurements as stored (as [`Store::measurements_raw`] reads them, in
    /// the order stored), one cell at a time, in the same order. The cells
    /// and the measurements are read in one pass (the cells driving a join
    /// to their records), and nothing is kept but the planned cells' hashes
    /// and the cells no longer in the plan (which come last, as in
    /// `each_plan_cell`): a run of millions of cells is read in bounded
    /// memory. A cell that is not part of the current plan comes without
    /// its measurements (nothing counts them). Each record is read as `R`
    /// (a `serde_json::Value`, or a reader's own type that takes what it
    /// needs straight from the text); one that does not read is skipped and
    /// counted.
    pub fn each_plan_cell_measured<R: serde::de::DeserializeOwned>(
        &self,
        run_id: i64,
        f: &mut dyn FnMut(CellRow, bool, Vec<RawMeasurement<R>>) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let plan = self.plan_filter(run_id, None)?;
        let mut st = self
            .conn
            .prepare(&format!(
                // One pass: the cells drive (a LEFT JOIN keeps them the
                // outer loop, and keeps the cells without records), in plan
                // order by their index, each cell's measurements by theirs,
                // sorted only among cells of one `seq` — not the whole run's
                // records through a temporary b-tree. A cell's columns come
                // with each of its records and are read with its first.
                "SELECT {}, m.id, m.role, m.src, m.dst, m.record, m.lat_hist
                 FROM cells c LEFT JOIN measurements m
                   ON m.run_id = c.run_id AND m.cell_id = c.cell_id
                 WHERE c.run_id = ?1
                 ORDER BY c.seq, c.cell_id, m.id",
                cell_columns("c.")
            ))
            .map_err(self.err("reading measurements"))?;
        let mut rows = st
            .query([run_id])
            .map_err(self.err("reading measurements"))?;
        let mut decoder = CellDecoder::default();
        let mut later: Vec<(CellRow, bool, Vec<RawMeasurement<R>>)> = Vec::new();
        // The cell being read: (cell, in_plan, its measurements); `None`
        // while passing over the records of a cell that could not be read.
        let mut cell: Option<(CellRow, bool, Vec<RawMeasurement<R>>)> = None;
        // The (seq, cell id) of the cell being read (or passed over).
        let mut at: Option<(i64, String)> = None;
        let mut hand = |cell: Option<(CellRow, bool, Vec<RawMeasurement<R>>)>,
                        later: &mut Vec<_>|
         -> Result<(), StoreError> {
            let Some((c, in_plan, mut ms)) = cell else {
                return Ok(());
            };
            let current = plan.current(&c, in_plan);
            if !current {
                ms = Vec::new();
            }
            if in_plan {
                f(c, current, ms)
            } else {
                later.push((c, current, ms));
                Ok(())
            }
        };
        // The measurement's columns come after the cell's.
        const M: usize = CELL_COLUMNS.len();
        while let Some(r) = rows.next().map_err(self.err("reading measurements"))? {
            let get = |e| StoreError::sql(&self.path, "reading measurements", e);
            let seq: i64 = r.get(1).map_err(get)?;
            let same = match &at {
                Some((s, id)) => {
                    *s == seq && r.get_ref(0).map_err(get)?.as_str().ok() == Some(id.as_str())
                }
                None => false,
            };
            if !same {
                hand(cell.take(), &mut later)?;
                cell = decoder
                    .read(self, run_id, r, 0)?
                    .map(|(c, in_plan)| (c, in_plan, Vec::new()));
                at = Some((seq, r.get(0).map_err(get)?));
            }
            // Records of a cell that could not be read are passed over, and
            // a cell without any has a row of NULLs.
            let Some((c, _, ms)) = cell.as_mut() else {
                continue;
            };
            if r.get_ref(M).map_err(get)? == rusqlite::types::ValueRef::Null {
                continue;
            }
            let role = r.get_ref(M + 1).map_err(get)?;
            let Some(role) = role.as_str().ok().and_then(Role::parse) else {
                self.skip(format!(
                    "run {run_id} cell {}: unknown role {:?}",
                    c.spec.cell_id,
                    String::from_utf8_lossy(role.as_bytes().unwrap_or_default())
                ));
                continue;
            };
            let rec: String = r.get(M + 4).map_err(get)?;
            match serde_json::from_str(&rec) {
                Ok(record) => ms.push(RawMeasurement {
                    cell_id: c.spec.cell_id.clone(),
                    role,
                    src: r.get(M + 2).map_err(get)?,
                    dst: r.get(M + 3).map_err(get)?,
                    record,
                    json: rec,
                    lat_hist: r.get(M + 5).map_err(get)?,
                }),
                Err(e) => self.skip(format!(
                    "run {run_id} cell {}: stored record: {e}",
                    c.spec.cell_id
                )),
            }
        }
        hand(cell.take(), &mut later)?;
        for (c, current, ms) in later {
            f(c, current, ms)?;
        }
        Ok(())
    }

    /// Measurements of a run (optionally one cell), in cell order.
    pub fn measurements(
        &self,
        run_id: i64,
        cell_id: Option<&str>,
    ) -> Result<Vec<(String, Measurement)>, StoreError> {
        Ok(self
            .stored_rows::<Record>(run_id, cell_id)?
            .into_iter()
            .map(|mut r| {
                // The histogram is stored in its column, not in the record.
                if r.record.lat_hist.is_none() {
                    r.record.lat_hist = r.lat_hist;
                }
                (
                    r.cell_id,
                    Measurement {
                        role: r.role,
                        src: r.src,
                        dst: r.dst,
                        record: r.record,
                    },
                )
            })
            .collect())
    }

    /// Every measurement of a run (of one test when `test` is given), one at
    /// a time, grouped by cell, keeping none: the main figures from their
    /// columns and the record's JSON text as stored (not the histogram).
    ///
    /// Rows come in the order they were stored, which reads the file front
    /// to back (in cell-id order, a large run's rows are read from all over
    /// the file: 43 s instead of 16 s for a 1024-node mesh read from disk).
    /// A cell's rows are together: each finished cell is stored in one
    /// transaction that first deletes its earlier rows.
    pub fn each_measurement(
        &self,
        run_id: i64,
        test: Option<&str>,
        f: &mut dyn FnMut(StoredMeasurement) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        // The run's first row (from the index), then the table from there
        // in row order: `+m.run_id` keeps the planner off the cell index.
        let first: Option<i64> = self
            .conn
            .query_row(
                "SELECT min(id) FROM measurements WHERE run_id = ?1",
                [run_id],
                |r| r.get(0),
            )
            .map_err(self.err("reading measurements"))?;
        let Some(first) = first else {
            return Ok(());
        };
        // A run of one test needs no look-up of each row's cell.
        let test = match test {
            Some(t) => {
                let (any, others): (bool, bool) = self
                    .conn
                    .query_row(
                        "SELECT EXISTS (SELECT 1 FROM cells WHERE run_id = ?1 AND test = ?2),
                                EXISTS (SELECT 1 FROM cells WHERE run_id = ?1 AND test <> ?2)",
                        params![run_id, t],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .map_err(self.err("reading measurements"))?;
                if !any {
                    return Ok(());
                }
                others.then_some(t)
            }
            None => None,
        };
        let sql =
            format!(
            "SELECT m.cell_id, m.role, m.src, m.dst, m.direction, m.bw_gbps, m.lat_p50_us, m.record
             FROM measurements m {}
             WHERE m.id >= ?2 AND +m.run_id = ?1 {}
             ORDER BY m.id",
            if test.is_some() {
                "JOIN cells c ON c.run_id = m.run_id AND c.cell_id = m.cell_id"
            } else {
                ""
            },
            if test.is_some() { "AND c.test = ?3" } else { "" }
        );
        let mut st = self
            .conn
            .prepare(&sql)
            .map_err(self.err("reading measurements"))?;
        let mut rows = match test {
            Some(t) => st.query(params![run_id, first, t]),
            None => st.query(params![run_id, first]),
        }
        .map_err(self.err("reading measurements"))?;
        while let Some(r) = rows.next().map_err(self.err("reading measurements"))? {
            let get = |e| StoreError::sql(&self.path, "reading measurements", e);
            let cell_id: String = r.get(0).map_err(get)?;
            let role: String = r.get(1).map_err(get)?;
            let Some(role) = Role::parse(&role) else {
                self.skip(format!(
                    "run {run_id} cell {cell_id}: unknown role {role:?}"
                ));
                continue;
            };
            let record: String = r.get(7).map_err(get)?;
            // A record that is not even JSON is damaged: skipped and counted,
            // as every other reader does, though the indexed figures beside
            // it may still read. (Its fields are checked by whoever decodes
            // it; syntax alone is checked here, without building anything.)
            if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(&record) {
                self.skip(format!(
                    "run {run_id} cell {cell_id}: the {} record is not JSON ({e})",
                    role.as_str()
                ));
                continue;
            }
            f(StoredMeasurement {
                role,
                src: r.get(2).map_err(get)?,
                dst: r.get(3).map_err(get)?,
                direction: r.get(4).map_err(get)?,
                bw_gbps: r.get(5).map_err(get)?,
                lat_p50_us: r.get(6).map_err(get)?,
                record,
                cell_id,
            })?;
        }
        Ok(())
    }

    /// Measurements of a run as stored: the record JSON as written (keys
    /// this fabperf version does not model included, so readers tolerate
    /// records from newer writers) and the stored latency histogram.
    pub fn measurements_raw(&self, run_id: i64) -> Result<Vec<RawMeasurement>, StoreError> {
        Ok(self
            .stored_rows::<serde_json::Value>(run_id, None)?
            .into_iter()
            .map(|r| RawMeasurement {
                cell_id: r.cell_id,
                role: r.role,
                src: r.src,
                dst: r.dst,
                record: r.record,
                json: r.json,
                lat_hist: r.lat_hist,
            })
            .collect())
    }

    /// The measurements of a run (optionally one cell) in cell order, each
    /// record read as `T`; rows with an unknown role or a record that does
    /// not read are skipped and counted.
    fn stored_rows<T: serde::de::DeserializeOwned>(
        &self,
        run_id: i64,
        cell_id: Option<&str>,
    ) -> Result<Vec<StoredRow<T>>, StoreError> {
        let mut st = self
            .conn
            .prepare(
                "SELECT m.cell_id, m.role, m.src, m.dst, m.record, m.lat_hist FROM measurements m
                 JOIN cells c ON c.run_id = m.run_id AND c.cell_id = m.cell_id
                 WHERE m.run_id = ?1 AND (?2 IS NULL OR m.cell_id = ?2)
                 ORDER BY c.seq, m.cell_id, m.id",
            )
            .map_err(self.err("reading measurements"))?;
        let rows = st
            .query_map(params![run_id, cell_id], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, Option<String>>(5)?,
                ))
            })
            .map_err(self.err("reading measurements"))?;
        let mut out = Vec::new();
        for row in rows {
            let (cell_id, role, src, dst, json, lat_hist) =
                row.map_err(self.err("reading measurements"))?;
            let Some(role) = Role::parse(&role) else {
                self.skip(format!(
                    "run {run_id} cell {cell_id}: unknown role {role:?}"
                ));
                continue;
            };
            let record: T = match serde_json::from_str(&json) {
                Ok(r) => r,
                Err(e) => {
                    self.skip(format!("run {run_id} cell {cell_id}: stored record: {e}"));
                    continue;
                }
            };
            out.push(StoredRow {
                cell_id,
                role,
                src,
                dst,
                record,
                json,
                lat_hist,
            });
        }
        Ok(out)
    }
}

/// One row of the measurements table, its record read as `T`.
struct StoredRow<T> {
    cell_id: String,
    role: Role,
    src: Option<String>,
    dst: Option<String>,
    record: T,
    json: String,
    lat_hist: Option<String>,
}
