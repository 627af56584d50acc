//! The agents a run saw, with what they said about themselves.

use crate::{AgentRow, Store, StoreError};
use rusqlite::params;

impl Store {
    /// Store (or refresh) what the run's agents said about themselves.
    pub fn put_agents(&mut self, run_id: i64, agents: &[AgentRow]) -> Result<(), StoreError> {
        let path = self.path.clone();
        let e = |e| StoreError::sql(&path, "storing the agents", e);
        let tx = self.conn.transaction().map_err(e)?;
        {
            let mut st = tx
                .prepare(
                    "INSERT INTO agents (run_id, name, path, addr, hello, seen_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                     ON CONFLICT (run_id, name, path) DO UPDATE SET addr = excluded.addr, hello = excluded.hello, seen_at = excluded.seen_at",
                )
                .map_err(e)?;
            for a in agents {
                st.execute(params![
                    run_id,
                    a.name,
                    a.path,
                    a.addr,
                    a.hello.to_string(),
                    a.seen_at
                ])
                .map_err(e)?;
            }
        }
        tx.commit().map_err(e)
    }

    pub fn agents(&self, run_id: i64) -> Result<Vec<AgentRow>, StoreError> {
        let mut st = self
            .conn
            .prepare(
                "SELECT name, path, addr, hello, seen_at FROM agents WHERE run_id = ?1 ORDER BY path, name",
            )
            .map_err(self.err("reading agents"))?;
        let rows = st
            .query_map([run_id], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                ))
            })
            .map_err(self.err("reading agents"))?;
        let mut out = Vec::new();
        for row in rows {
            let (name, path, addr, hello, seen_at) = row.map_err(self.err("reading agents"))?;
            let hello = match serde_json::from_str(&hello) {
                Ok(h) => h,
                Err(e) => {
                    self.skip(format!("run {run_id} agent {name}: hello is not JSON: {e}"));
                    continue;
                }
            };
            out.push(AgentRow {
                name,
                path,
                addr,
                hello,
                seen_at,
            });
        }
        Ok(out)
    }
}
