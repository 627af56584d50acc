//! Writing cells: syncing a run's cells with its plan, adding re-tests,
//! and recording each cell's end (done with its measurements, or failed).

use crate::insert::{insert_measurement, measurement_insert_sql};
use crate::{Attempt, CellSpec, CellState, Measurement, Store, StoreError, SyncReport};
use rusqlite::{params, OptionalExtension};

impl Store {
    /// Bring the run's cells in line with the plan's: new cells are added as
    /// pending, existing ones keep their state (their order is refreshed).
    /// With `retry_failed`, failed cells of the plan become pending again.
    pub fn sync_cells(
        &mut self,
        run_id: i64,
        cells: &[CellSpec],
        retry_failed: bool,
    ) -> Result<SyncReport, StoreError> {
        let path = self.path.clone();
        let e = |e| StoreError::sql(&path, "adding the plan's cells", e);
        let tx = self.conn.transaction().map_err(e)?;
        let mut rep = SyncReport::default();
        {
            let mut get = tx
                .prepare("SELECT state FROM cells WHERE run_id = ?1 AND cell_id = ?2")
                .map_err(e)?;
            let mut ins = tx
                .prepare(
                    "INSERT INTO cells (run_id, cell_id, seq, batch, test, kind, path, pattern, flows, params, dims, repeat, state, attempts)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 'pending', 0)",
                )
                .map_err(e)?;
            let mut reorder = tx
                .prepare("UPDATE cells SET seq = ?3, batch = ?4, in_plan = 1 WHERE run_id = ?1 AND cell_id = ?2")
                .map_err(e)?;
            let mut retry = tx
                .prepare("UPDATE cells SET state = 'pending' WHERE run_id = ?1 AND cell_id = ?2")
                .map_err(e)?;
            // Re-test cells are added by the runner, not the plan: leave them be.
            tx.execute(
                "UPDATE cells SET in_plan = 0 WHERE run_id = ?1 AND pattern <> 'retest'",
                [run_id],
            )
            .map_err(e)?;
            for c in cells {
                let state: Option<String> = get
                    .query_row(params![run_id, c.cell_id], |r| r.get(0))
                    .optional()
                    .map_err(e)?;
                match state.as_deref().and_then(CellState::parse) {
                    None => {
                        ins.execute(params![
                            run_id,
                            c.cell_id,
                            c.seq,
                            c.batch,
                            c.test,
                            c.kind,
                            c.path,
                            c.pattern,
                            serde_json::to_string(&c.flows).unwrap_or_default(),
                            c.params.to_string(),
                            c.dims.to_string(),
                            c.repeat
                        ])
                        .map_err(e)?;
                        rep.pending += 1;
                    }
                    Some(st) => {
                        reorder
                            .execute(params![run_id, c.cell_id, c.seq, c.batch])
                            .map_err(e)?;
                        match st {
                            CellState::Done => rep.done += 1,
                            CellState::Pending => rep.pending += 1,
                            CellState::Failed if retry_failed => {
                                retry.execute(params![run_id, c.cell_id]).map_err(e)?;
                                rep.pending += 1;
                            }
                            CellState::Failed => rep.failed += 1,
                        }
                    }
                }
            }
            rep.not_in_plan = tx
                .query_row(
                    "SELECT count(*) FROM cells WHERE run_id = ?1 AND in_plan = 0 AND pattern <> 'retest'",
                    [run_id],
                    |r| r.get::<_, i64>(0),
                )
                .map_err(e)? as usize;
        }
        tx.commit().map_err(e)?;
        Ok(rep)
    }

    /// Add cells the runner derives while running (re-tests); cells already
    /// stored keep their state.
    pub fn add_cells(&mut self, run_id: i64, cells: &[CellSpec]) -> Result<usize, StoreError> {
        let path = self.path.clone();
        let e = |e| StoreError::sql(&path, "adding cells", e);
        let tx = self.conn.transaction().map_err(e)?;
        let mut added = 0;
        {
            let mut ins = tx
                .prepare(
                    "INSERT OR IGNORE INTO cells (run_id, cell_id, seq, batch, test, kind, path, pattern, flows, params, dims, repeat, state, attempts)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 'pending', 0)",
                )
                .map_err(e)?;
            for c in cells {
                added += ins
                    .execute(params![
                        run_id,
                        c.cell_id,
                        c.seq,
                        c.batch,
                        c.test,
                        c.kind,
                        c.path,
                        c.pattern,
                        serde_json::to_string(&c.flows).unwrap_or_default(),
                        c.params.to_string(),
                        c.dims.to_string(),
                        c.repeat
                    ])
                    .map_err(e)?;
            }
        }
        tx.commit().map_err(e)?;
        Ok(added)
    }

    /// Make the failed cells among `cell_ids` pending again (`--retry-failed`
    /// for cells the runner derives, such as re-tests); returns how many.
    pub fn retry_failed_cells(
        &mut self,
        run_id: i64,
        cell_ids: &[&str],
    ) -> Result<usize, StoreError> {
        let path = self.path.clone();
        let e = |e| StoreError::sql(&path, "marking failed cells for another attempt", e);
        let tx = self.conn.transaction().map_err(e)?;
        let mut n = 0;
        {
            let mut st = tx
                .prepare(
                    "UPDATE cells SET state = 'pending' WHERE run_id = ?1 AND cell_id = ?2 AND state = 'failed'",
                )
                .map_err(e)?;
            for id in cell_ids {
                n += st.execute(params![run_id, id]).map_err(e)?;
            }
        }
        tx.commit().map_err(e)?;
        Ok(n)
    }

    /// Store a finished cell and its measurements in one transaction.
    pub fn finish_cell_done(
        &mut self,
        run_id: i64,
        cell_id: &str,
        attempt: &Attempt,
        measurements: &[Measurement],
    ) -> Result<(), StoreError> {
        self.finish_cells_done(run_id, &[(cell_id, attempt, measurements)])
    }

    /// Store several finished cells and their measurements in one
    /// transaction (an import; the runner stores each cell as it finishes,
    /// so that a kill loses at most the cell that was running).
    pub fn finish_cells_done(
        &mut self,
        run_id: i64,
        cells: &[(&str, &Attempt, &[Measurement])],
    ) -> Result<(), StoreError> {
        let path = self.path.clone();
        let what = |id: &str| {
            if cells.len() == 1 {
                format!("storing cell {id}")
            } else {
                format!("storing {} cells (at cell {id})", cells.len())
            }
        };
        let first = cells.first().map(|c| c.0).unwrap_or("");
        let tx = self
            .conn
            .transaction()
            .map_err(|e| StoreError::sql(&path, what(first), e))?;
        {
            let mut del = tx
                .prepare_cached("DELETE FROM measurements WHERE run_id = ?1 AND cell_id = ?2")
                .map_err(|e| StoreError::sql(&path, what(first), e))?;
            let mut ins = tx
                .prepare_cached(measurement_insert_sql())
                .map_err(|e| StoreError::sql(&path, what(first), e))?;
            let mut done = tx
                .prepare_cached(
                    "UPDATE cells SET state = 'done', error = NULL, attempts = ?3, started_at = ?4, ended_at = ?5, wall_s = ?6
                     WHERE run_id = ?1 AND cell_id = ?2",
                )
                .map_err(|e| StoreError::sql(&path, what(first), e))?;
            for (cell_id, attempt, measurements) in cells {
                let e = |e| StoreError::sql(&path, what(cell_id), e);
                del.execute(params![run_id, cell_id]).map_err(e)?;
                for m in *measurements {
                    insert_measurement(&mut ins, run_id, cell_id, m).map_err(e)?;
                }
                let n = done
                    .execute(params![
                        run_id,
                        cell_id,
                        attempt.attempts,
                        attempt.started_at,
                        attempt.ended_at,
                        attempt.wall_s
                    ])
                    .map_err(e)?;
                if n != 1 {
                    return Err(StoreError::Invalid {
                        path,
                        msg: format!("cell {cell_id} is not in run {run_id}"),
                    });
                }
            }
        }
        if let Some((_, last, _)) = cells.last() {
            tx.execute(
                "UPDATE runs SET updated_at = ?2 WHERE id = ?1",
                params![run_id, last.ended_at],
            )
            .map_err(|e| StoreError::sql(&path, what(first), e))?;
        }
        tx.commit()
            .map_err(|e| StoreError::sql(&path, what(first), e))
    }

    /// Store a failed cell with its error.
    pub fn finish_cell_failed(
        &mut self,
        run_id: i64,
        cell_id: &str,
        attempt: &Attempt,
        error: &str,
    ) -> Result<(), StoreError> {
        let path = self.path.clone();
        let e = |e| StoreError::sql(&path, format!("storing failed cell {cell_id}"), e);
        let n = self
            .conn
            .execute(
                "UPDATE cells SET state = 'failed', error = ?3, attempts = ?4, started_at = ?5, ended_at = ?6, wall_s = ?7
                 WHERE run_id = ?1 AND cell_id = ?2",
                params![
                    run_id,
                    cell_id,
                    error,
                    attempt.attempts,
                    attempt.started_at,
                    attempt.ended_at,
                    attempt.wall_s
                ],
            )
            .map_err(e)?;
        if n != 1 {
            return Err(self.invalid(format!("cell {cell_id} is not in run {run_id}")));
        }
        Ok(())
    }
}
