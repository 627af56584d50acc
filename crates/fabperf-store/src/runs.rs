//! Runs: creating one, reading them, recording a resumed plan and the end.

use crate::{NewRun, RunInfo, Store, StoreError};
use rusqlite::{params, OptionalExtension};

impl Store {
    pub fn create_run(&mut self, r: &NewRun<'_>) -> Result<RunInfo, StoreError> {
        let now = fabperf_results::now_rfc3339();
        self.conn
            .execute(
                "INSERT INTO runs (plan_name, plan_hash, plan_file, plan_text, started_at, updated_at, fabperf_version)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6)",
                params![
                    r.plan_name,
                    r.plan_hash,
                    r.plan_file,
                    r.plan_text,
                    now,
                    fabperf_results::FABPERF_VERSION
                ],
            )
            .map_err(self.err("creating a run"))?;
        let id = self.conn.last_insert_rowid();
        self.run(id)
    }

    fn run_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunInfo> {
        Ok(RunInfo {
            id: row.get(0)?,
            plan_name: row.get(1)?,
            plan_hash: row.get(2)?,
            plan_file: row.get(3)?,
            plan_text: row.get(4)?,
            started_at: row.get(5)?,
            updated_at: row.get(6)?,
            ended_at: row.get(7)?,
            fabperf_version: row.get(8)?,
        })
    }

    const RUN_COLS: &'static str = "id, plan_name, plan_hash, plan_file, plan_text, started_at, updated_at, ended_at, fabperf_version";

    pub fn run(&self, id: i64) -> Result<RunInfo, StoreError> {
        self.conn
            .query_row(
                &format!("SELECT {} FROM runs WHERE id = ?1", Self::RUN_COLS),
                [id],
                Self::run_from_row,
            )
            .optional()
            .map_err(self.err("reading a run"))?
            .ok_or_else(|| StoreError::NoSuchRun {
                path: self.path.clone(),
                id,
            })
    }

    /// Every run, oldest first.
    pub fn runs(&self) -> Result<Vec<RunInfo>, StoreError> {
        let mut st = self
            .conn
            .prepare(&format!("SELECT {} FROM runs ORDER BY id", Self::RUN_COLS))
            .map_err(self.err("listing runs"))?;
        let rows = st
            .query_map([], Self::run_from_row)
            .map_err(self.err("listing runs"))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(self.err("listing runs"))
    }

    /// The newest run of the plan named `plan_name`.
    pub fn latest_run_for_plan(&self, plan_name: &str) -> Result<Option<RunInfo>, StoreError> {
        self.conn
            .query_row(
                &format!(
                    "SELECT {} FROM runs WHERE plan_name = ?1 ORDER BY id DESC LIMIT 1",
                    Self::RUN_COLS
                ),
                [plan_name],
                Self::run_from_row,
            )
            .optional()
            .map_err(self.err("looking up the plan's last run"))
    }

    /// The newest run in the store.
    pub fn latest_run(&self) -> Result<Option<RunInfo>, StoreError> {
        self.conn
            .query_row(
                &format!(
                    "SELECT {} FROM runs ORDER BY id DESC LIMIT 1",
                    Self::RUN_COLS
                ),
                [],
                Self::run_from_row,
            )
            .optional()
            .map_err(self.err("looking up the last run"))
    }

    /// Record that a run was resumed with a (possibly changed) plan.
    pub fn update_run_plan(
        &mut self,
        id: i64,
        plan_hash: &str,
        plan_text: &str,
        plan_file: Option<&str>,
    ) -> Result<(), StoreError> {
        let now = fabperf_results::now_rfc3339();
        self.conn
            .execute(
                "UPDATE runs SET plan_hash = ?2, plan_text = ?3, plan_file = ?4, updated_at = ?5, ended_at = NULL WHERE id = ?1",
                params![id, plan_hash, plan_text, plan_file, now],
            )
            .map_err(self.err("updating the run's plan"))?;
        Ok(())
    }

    /// Mark a run as ended (every cell done or failed).
    pub fn end_run(&mut self, id: i64) -> Result<(), StoreError> {
        let now = fabperf_results::now_rfc3339();
        self.conn
            .execute(
                "UPDATE runs SET ended_at = ?2, updated_at = ?2 WHERE id = ?1",
                params![id, now],
            )
            .map_err(self.err("ending the run"))?;
        Ok(())
    }
}
