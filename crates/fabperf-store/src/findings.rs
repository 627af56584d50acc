//! Findings attached to a run (doctor findings, mesh re-test suspects).

use crate::{Finding, Store, StoreError};
use rusqlite::params;

impl Store {
    /// Replace the run's findings of `kind` with `items` (subject, body).
    pub fn set_findings(
        &mut self,
        run_id: i64,
        kind: &str,
        items: &[(String, serde_json::Value)],
    ) -> Result<(), StoreError> {
        let path = self.path.clone();
        let e = |e| StoreError::sql(&path, format!("storing {kind} findings"), e);
        let now = fabperf_results::now_rfc3339();
        let tx = self.conn.transaction().map_err(e)?;
        tx.execute(
            "DELETE FROM findings WHERE run_id = ?1 AND kind = ?2",
            params![run_id, kind],
        )
        .map_err(e)?;
        {
            let mut st = tx
                .prepare("INSERT INTO findings (run_id, kind, subject, body, at) VALUES (?1, ?2, ?3, ?4, ?5)")
                .map_err(e)?;
            for (subject, body) in items {
                st.execute(params![run_id, kind, subject, body.to_string(), now])
                    .map_err(e)?;
            }
        }
        tx.commit().map_err(e)
    }

    /// The run's findings (of one kind, or all).
    pub fn findings(&self, run_id: i64, kind: Option<&str>) -> Result<Vec<Finding>, StoreError> {
        let mut st = self
            .conn
            .prepare(
                "SELECT kind, subject, body, at FROM findings WHERE run_id = ?1 AND (?2 IS NULL OR kind = ?2) ORDER BY id",
            )
            .map_err(self.err("reading findings"))?;
        let rows = st
            .query_map(params![run_id, kind], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                ))
            })
            .map_err(self.err("reading findings"))?;
        let mut out = Vec::new();
        for row in rows {
            let (kind, subject, body, at) = row.map_err(self.err("reading findings"))?;
            let body = match serde_json::from_str(&body) {
                Ok(b) => b,
                Err(e) => {
                    self.skip(format!("run {run_id} finding {kind}/{subject}: {e}"));
                    continue;
                }
            };
            out.push(Finding {
                kind,
                subject,
                body,
                at,
            });
        }
        Ok(out)
    }
}
