//! fabperf's results store: one SQLite file holding runs, their cells and
//! every measurement.
//!
//! - **runs**: one execution of a plan (resumable: the same run is continued
//!   until every cell is done), with the plan's text and hash, the fabperf
//!   version and the agents' hello (node, path, inventory).
//! - **cells**: one point of the plan's cross product (test × sweep point ×
//!   pattern instance × repeat), identified by a stable id; its state
//!   (`pending`, `done`, `failed`), last error and attempts.
//! - **measurements**: the records a finished cell produced, with the main
//!   figures as columns (for SQL), the whole record as JSON (lossless
//!   export) and the latency histogram when the record carries one.
//!
//! Durability: WAL journal with `synchronous=FULL`; each finished cell is one
//! transaction, so a runner killed at any instant (SIGKILL included) leaves
//! a consistent file that lacks at most the cell that was running. The schema
//! version lives in SQLite's `user_version`: older stores are migrated on
//! open, newer ones are refused with a message naming both versions.

mod export;
mod lease;
mod schema;

pub use export::{export_csv, export_jsonl, ExportRow};
pub use lease::{Lease, LeaseHolder};
pub use schema::SCHEMA_VERSION;

use fabperf_results::Record;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Errors from the store, each naming the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the results store {}: {msg}", path.display())]
    Open { path: PathBuf, msg: String },
    #[error("{} is not a fabperf results store ({why}); give another --db file", path.display())]
    NotAStore { path: PathBuf, why: String },
    #[error(
        "the results store {} has schema version {found}, newer than this fabperf \
         (knows up to {supported}); read it with the fabperf version that wrote it or a newer one",
        path.display()
    )]
    Newer {
        path: PathBuf,
        found: i64,
        supported: i64,
    },
    #[error(
        "the results store {} is locked by another process (another `fabperf run` on the same \
         file?); wait for it to finish or give another --db file",
        path.display()
    )]
    Locked { path: PathBuf },
    #[error(
        "the results store {} is in use by {holder}{waited}; wait for that run to end or stop it \
         (a runner that is killed frees the store at once), or give another --db file",
        path.display()
    )]
    Leased {
        path: PathBuf,
        /// Who holds the lease, in words.
        holder: String,
        /// "; waited N s" when the runner waited for it.
        waited: String,
    },
    #[error("results store {}: {what}: {msg}", path.display())]
    Sql {
        path: PathBuf,
        what: String,
        msg: String,
    },
    #[error("results store {}: {msg}", path.display())]
    Invalid { path: PathBuf, msg: String },
    #[error("no run {id} in the results store {}; `fabperf runs --db {}` lists the runs", path.display(), path.display())]
    NoSuchRun { path: PathBuf, id: i64 },
}

impl StoreError {
    fn sql(path: &Path, what: impl Into<String>, e: rusqlite::Error) -> StoreError {
        if is_locked(&e) {
            return StoreError::Locked {
                path: path.to_path_buf(),
            };
        }
        StoreError::Sql {
            path: path.to_path_buf(),
            what: what.into(),
            msg: e.to_string(),
        }
    }
}

fn is_locked(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// The state of a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CellState {
    Pending,
    Done,
    Failed,
}

impl CellState {
    pub fn as_str(self) -> &'static str {
        match self {
            CellState::Pending => "pending",
            CellState::Done => "done",
            CellState::Failed => "failed",
        }
    }
    fn parse(s: &str) -> Option<CellState> {
        match s {
            "pending" => Some(CellState::Pending),
            "done" => Some(CellState::Done),
            "failed" => Some(CellState::Failed),
            _ => None,
        }
    }
}

/// What a measurement row is within its cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The result of a single-flow cell (a pair).
    Total,
    /// One stream or QP of a multi-stream result.
    Stream,
    /// One sender→receiver flow of a cell with concurrent flows (incast,
    /// bisection).
    Flow,
    /// The sum over a cell's concurrent flows.
    Aggregate,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Total => "total",
            Role::Stream => "stream",
            Role::Flow => "flow",
            Role::Aggregate => "aggregate",
        }
    }
    fn parse(s: &str) -> Option<Role> {
        match s {
            "total" => Some(Role::Total),
            "stream" => Some(Role::Stream),
            "flow" => Some(Role::Flow),
            "aggregate" => Some(Role::Aggregate),
            _ => None,
        }
    }
}

/// A run as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunInfo {
    pub id: i64,
    pub plan_name: String,
    pub plan_hash: String,
    pub plan_file: Option<String>,
    pub plan_text: String,
    pub started_at: String,
    pub updated_at: String,
    /// Set when every cell was done or failed at the end of an execution.
    pub ended_at: Option<String>,
    pub fabperf_version: String,
}

/// A run to create.
#[derive(Debug, Clone)]
pub struct NewRun<'a> {
    pub plan_name: &'a str,
    pub plan_hash: &'a str,
    pub plan_file: Option<&'a str>,
    pub plan_text: &'a str,
}

/// An agent seen by a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRow {
    /// The plan's name for it (the node name).
    pub name: String,
    pub path: String,
    pub addr: String,
    /// What the agent said about itself (node, path label, inventory).
    pub hello: serde_json::Value,
    pub seen_at: String,
}

/// One cell of a run's cross product, as planned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellSpec {
    /// Stable id: a hash of the plan's identity and the cell's parameters.
    pub cell_id: String,
    /// Position in the plan's deterministic order.
    pub seq: i64,
    /// Cells sharing a batch number run at the same time (a mesh round).
    pub batch: i64,
    /// The plan's name for the test.
    pub test: String,
    /// The test kind (`tcp-bw`, `rdma-lat`, ...).
    pub kind: String,
    /// The path label the agents serve (`host`, `overlay`, ...).
    pub path: String,
    /// `pairs`, `mesh`, `incast`, `bisection`, or `retest`.
    pub pattern: String,
    /// The concurrent flows: (sender agent, receiver agent) names.
    pub flows: Vec<(String, String)>,
    /// The engine parameters sent to the agents.
    pub params: serde_json::Value,
    /// The sweep point (size, streams, op, ...) for reports.
    pub dims: serde_json::Value,
    pub repeat: u32,
}

/// The pattern of the cells the runner adds to re-test a mesh's suspects.
pub const RETEST: &str = "retest";

/// A run's cells, split by its current plan ([`Store::plan_cells`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlanCells {
    /// The current plan's cells and their re-tests, in plan order.
    pub current: Vec<CellRow>,
    /// Cells of earlier versions of the plan: kept, counted nowhere.
    pub stale: Vec<CellRow>,
}

impl PlanCells {
    /// The ids of the current plan's cells.
    pub fn current_ids(&self) -> std::collections::HashSet<&str> {
        self.current
            .iter()
            .map(|c| c.spec.cell_id.as_str())
            .collect()
    }
}

/// A cell with its state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CellRow {
    #[serde(flatten)]
    pub spec: CellSpec,
    pub state: CellState,
    pub error: Option<String>,
    pub attempts: u32,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    /// Wall time of the last attempt, from the first request to the results.
    pub wall_s: Option<f64>,
}

/// One record of a finished cell.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    pub role: Role,
    pub src: Option<String>,
    pub dst: Option<String>,
    pub record: Record,
}

/// One measurement as stored, the record left as JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct RawMeasurement {
    pub cell_id: String,
    pub role: Role,
    pub src: Option<String>,
    pub dst: Option<String>,
    /// The record as stored. The store keeps a histogram once, in its
    /// column: a record stored by this version has no `lat_hist` key (one
    /// from an older store may still have it); read `lat_hist` below.
    pub record: serde_json::Value,
    /// The `lat_hist` column (the record's histogram, when it carried one).
    pub lat_hist: Option<String>,
}

/// One stored measurement for readers that go over a whole run
/// ([`Store::each_measurement`]): the main figures as their columns hold
/// them (written from the record), the record as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredMeasurement {
    pub cell_id: String,
    pub role: Role,
    pub src: Option<String>,
    pub dst: Option<String>,
    /// The record's `direction`.
    pub direction: Option<String>,
    /// The record's `bw_gbps`.
    pub bw_gbps: Option<f64>,
    /// The record's `lat_us.p50`.
    pub lat_p50_us: Option<f64>,
    /// The record's JSON text as stored: since the histogram is kept in its
    /// column, a record stored by this version has no `lat_hist` key (one
    /// from an older store may still have it).
    pub record: String,
    /// The `lat_hist` column.
    pub lat_hist: Option<String>,
}

/// How the cells of a plan met the cells already stored for its run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Cells of the plan already done in the store (kept, not rerun).
    pub done: usize,
    /// Cells of the plan that failed before (rerun with --retry-failed).
    pub failed: usize,
    /// Cells of the plan still to run (new or never finished).
    pub pending: usize,
    /// Cells in the store that the plan no longer has (kept, not rerun).
    pub not_in_plan: usize,
}

/// Timing of one attempt at a cell.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub attempts: u32,
    pub started_at: String,
    pub ended_at: String,
    pub wall_s: f64,
}

/// An open results store.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    /// Stored items a reader could not decode and skipped (one line each).
    skipped: std::cell::RefCell<Vec<String>>,
}

/// The SQLite header's user_version and application_id of an existing,
/// non-empty file (`None` when it is not an SQLite file at all: SQLite's
/// own open then says so). The file's first page may be older than what
/// its WAL holds: a newer version there is found once SQLite opens it.
fn header_fields(path: &Path) -> Option<(i64, i64)> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).ok()?;
    let mut h = [0u8; 100];
    f.read_exact(&mut h).ok()?;
    if &h[..16] != b"SQLite format 3\0" {
        return None;
    }
    let be = |o: usize| i64::from(i32::from_be_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]));
    Some((be(60), be(68)))
}

/// The current plan's cells ([`Store::plan_cells`]): a re-test counts when
/// it repeats a planned cell — the same test, kind, path, parameters, sweep
/// point and flows (as stored: the same text) — kept as a 128-bit hash.
struct PlanFilter {
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
    fn current(&self, c: &CellRow, in_plan: bool) -> bool {
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

impl Store {
    /// Open (creating when missing) a store for writing; migrates an older
    /// schema, refuses a newer one.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Self::open_with(path, schema::MIGRATIONS, false)
    }

    /// Open an existing store for reading only (reports, exports). A store
    /// it refuses is left as it was: no `-wal`/`-shm` file is left beside it.
    pub fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(_) => {
                return Err(StoreError::Open {
                    path: path.to_path_buf(),
                    msg: "no such file; `fabperf run PLAN --db FILE` creates it".into(),
                })
            }
        };
        let not_a_store = |why: String| StoreError::NotAStore {
            path: path.to_path_buf(),
            why,
        };
        if meta.is_file() && meta.len() == 0 {
            return Err(not_a_store(
                "it is an empty file: no run was ever written to it (`fabperf run PLAN --db FILE` writes one)"
                    .into(),
            ));
        }
        // What the header already says is refused before SQLite opens the
        // file (and makes its -wal/-shm files).
        if let Some((version, app)) = header_fields(path) {
            let known = SCHEMA_VERSION;
            if app != schema::APPLICATION_ID && app != 0 {
                return Err(not_a_store("an SQLite database of another program".into()));
            }
            if version < 0 {
                return Err(not_a_store(format!(
                    "its schema version is {version}, which no fabperf writes: the file was changed by another program"
                )));
            }
            if version > known {
                return Err(StoreError::Newer {
                    path: path.to_path_buf(),
                    found: version,
                    supported: known,
                });
            }
        }
        let side = |ext: &str| {
            let mut p = path.as_os_str().to_owned();
            p.push(ext);
            PathBuf::from(p)
        };
        let (wal, shm) = (side("-wal"), side("-shm"));
        let had = (wal.exists(), shm.exists());
        let r = Self::open_with(path, schema::MIGRATIONS, true);
        if r.is_err() {
            // The connection is closed; remove what opening it made.
            if !had.0 && std::fs::metadata(&wal).is_ok_and(|m| m.len() == 0) {
                let _ = std::fs::remove_file(&wal);
            }
            if !had.1 {
                let _ = std::fs::remove_file(&shm);
            }
        }
        r
    }

    /// What readers of this store skipped because it could not be decoded
    /// (a damaged store, or one written by a newer fabperf): one line each.
    /// Every reader skips the same way; commands say how many.
    pub fn skipped(&self) -> Vec<String> {
        self.skipped.borrow().clone()
    }

    fn skip(&self, what: String) {
        let mut s = self.skipped.borrow_mut();
        if !s.contains(&what) {
            s.push(what);
        }
    }

    #[doc(hidden)]
    /// Open applying only the first `migrations` (tests of migration).
    pub fn open_with_migrations(path: &Path, steps: usize) -> Result<Store, StoreError> {
        Self::open_with(path, &schema::MIGRATIONS[..steps], false)
    }

    fn open_with(
        path: &Path,
        migrations: &[schema::Migration],
        read_only: bool,
    ) -> Result<Store, StoreError> {
        if let Ok(m) = std::fs::metadata(path) {
            if !m.is_file() {
                return Err(StoreError::NotAStore {
                    path: path.to_path_buf(),
                    why: "not a regular file".into(),
                });
            }
        }
        let flags = if read_only {
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
        } else {
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
        };
        let conn = Connection::open_with_flags(path, flags).map_err(|e| StoreError::Open {
            path: path.to_path_buf(),
            msg: e.to_string(),
        })?;
        let _ = conn.busy_timeout(Duration::from_secs(5));
        let mut s = Store {
            conn,
            path: path.to_path_buf(),
            skipped: Default::default(),
        };
        s.check_header()?;
        if !read_only {
            s.conn
                .pragma_update(None, "journal_mode", "WAL")
                .map_err(|e| s.not_a_store_or(e, "setting WAL mode"))?;
            s.conn
                .pragma_update(None, "synchronous", "FULL")
                .map_err(|e| StoreError::sql(&s.path, "setting synchronous=FULL", e))?;
        }
        s.conn
            .pragma_update(None, "foreign_keys", "ON")
            .map_err(|e| StoreError::sql(&s.path, "enabling foreign keys", e))?;
        schema::migrate(&mut s.conn, &s.path, migrations, read_only)?;
        Ok(s)
    }

    /// Refuse files that are not SQLite databases before SQLite gets a
    /// chance to treat them as one.
    fn check_header(&self) -> Result<(), StoreError> {
        let r: Result<i64, _> =
            self.conn
                .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0));
        match r {
            Ok(_) => Ok(()),
            Err(e) => Err(self.not_a_store_or(e, "reading the schema")),
        }
    }

    fn not_a_store_or(&self, e: rusqlite::Error, what: &str) -> StoreError {
        if let rusqlite::Error::SqliteFailure(f, _) = &e {
            if matches!(
                f.code,
                rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt
            ) {
                return StoreError::NotAStore {
                    path: self.path.clone(),
                    why: e.to_string(),
                };
            }
        }
        StoreError::sql(&self.path, what, e)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, what: &str) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        let what = what.to_string();
        move |e| StoreError::sql(&self.path, what.clone(), e)
    }

    // ---------------------------------------------------------------- runs

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

    // -------------------------------------------------------------- agents

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

    fn invalid(&self, msg: String) -> StoreError {
        StoreError::Invalid {
            path: self.path.clone(),
            msg,
        }
    }

    // --------------------------------------------------------------- cells

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

    fn each_cell_ordered(
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
    fn plan_filter(&self, run_id: i64, test: Option<&str>) -> Result<PlanFilter, StoreError> {
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
            let sql = format!(
                "SELECT test, kind, path, params, dims, flows FROM cells
                 WHERE run_id = ?1 AND in_plan = 1 AND pattern <> '{RETEST}' {}",
                if test.is_some() { "AND test = ?2" } else { "" }
            );
            let mut st = self.conn.prepare(&sql).map_err(self.err("reading cells"))?;
            let mut rows = match test {
                Some(t) => st.query(params![run_id, t]),
                None => st.query(params![run_id]),
            }
            .map_err(self.err("reading cells"))?;
            while let Some(r) = rows.next().map_err(self.err("reading cells"))? {
                let t = |i: usize| {
                    r.get_ref(i)
                        .ok()
                        .and_then(|v| v.as_str().ok())
                        .unwrap_or("")
                };
                let (params, dims, flows) = (canon(t(3)), canon(t(4)), canon(t(5)));
                let k = plan.key([t(0), t(1), t(2), &params, &dims, &flows]);
                plan.planned.insert(k);
            }
        }
        Ok(plan)
    }

    /// [`Store::each_plan_cell`] over the whole run with each cell's
    /// measurements as stored (as [`Store::measurements_raw`] reads them, in
    /// the order stored), one cell at a time, in the same order. The cells
    /// and the measurements are read by two cursors that advance together,
    /// and nothing is kept but the planned cells' hashes and the cells no
    /// longer in the plan (which come last, as in `each_plan_cell`): a run
    /// of millions of cells is read in bounded memory. A cell that is not
    /// part of the current plan comes without its measurements (nothing
    /// counts them).
    pub fn each_plan_cell_measured(
        &self,
        run_id: i64,
        f: &mut dyn FnMut(CellRow, bool, Vec<RawMeasurement>) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let plan = self.plan_filter(run_id, None)?;
        let mut st = self
            .conn
            .prepare(
                // The cells drive (CROSS JOIN keeps them the outer loop): in
                // plan order by their index, each cell's measurements by
                // theirs, sorted only among cells of one `seq` — not the
                // whole run's records through a temporary b-tree.
                "SELECT c.seq, m.cell_id, m.role, m.src, m.dst, m.record, m.lat_hist
                 FROM cells c CROSS JOIN measurements m
                   ON m.run_id = c.run_id AND m.cell_id = c.cell_id
                 WHERE c.run_id = ?1
                 ORDER BY c.seq, c.cell_id, m.id",
            )
            .map_err(self.err("reading measurements"))?;
        let mut rows = st
            .query([run_id])
            .map_err(self.err("reading measurements"))?;
        // The next measurement not yet handed out: (seq, cell id, row).
        type Pending = (
            i64,
            String,
            String,
            Option<String>,
            Option<String>,
            String,
            Option<String>,
        );
        let mut next: Option<Pending> = None;
        let mut done = false;
        let mut later: Vec<(CellRow, bool, Vec<RawMeasurement>)> = Vec::new();
        // Cells in (seq, cell id) order, as the measurements come; the cells
        // of earlier plans (`in_plan` = 0) are handed out after the others.
        self.each_cell_ordered(run_id, "", "seq, cell_id", &[&run_id], &mut |c, in_plan| {
            let mut ms = Vec::new();
            let here = (c.spec.seq, c.spec.cell_id.as_str());
            loop {
                if next.is_none() && !done {
                    match rows.next().map_err(self.err("reading measurements"))? {
                        Some(r) => {
                            let get = |e| StoreError::sql(&self.path, "reading measurements", e);
                            next = Some((
                                r.get(0).map_err(get)?,
                                r.get(1).map_err(get)?,
                                r.get(2).map_err(get)?,
                                r.get(3).map_err(get)?,
                                r.get(4).map_err(get)?,
                                r.get(5).map_err(get)?,
                                r.get(6).map_err(get)?,
                            ));
                        }
                        None => done = true,
                    }
                }
                let Some(m) = next.as_ref() else { break };
                let at = (m.0, m.1.as_str()).cmp(&here);
                if at == std::cmp::Ordering::Greater {
                    break;
                }
                let (_, cell_id, role, src, dst, rec, lat_hist) = next.take().expect("peeked");
                // Records of a cell that could not be read are passed over.
                if at == std::cmp::Ordering::Less {
                    continue;
                }
                let Some(role) = Role::parse(&role) else {
                    self.skip(format!(
                        "run {run_id} cell {cell_id}: unknown role {role:?}"
                    ));
                    continue;
                };
                match serde_json::from_str(&rec) {
                    Ok(record) => ms.push(RawMeasurement {
                        cell_id,
                        role,
                        src,
                        dst,
                        record,
                        lat_hist,
                    }),
                    Err(e) => self.skip(format!("run {run_id} cell {cell_id}: stored record: {e}")),
                }
            }
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
        })?;
        for (c, current, ms) in later {
            f(c, current, ms)?;
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

    /// Measurements of a run (optionally one cell), in cell order.
    pub fn measurements(
        &self,
        run_id: i64,
        cell_id: Option<&str>,
    ) -> Result<Vec<(String, Measurement)>, StoreError> {
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
            let (cell, role, src, dst, rec, hist) =
                row.map_err(self.err("reading measurements"))?;
            let Some(role) = Role::parse(&role) else {
                self.skip(format!("run {run_id} cell {cell}: unknown role {role:?}"));
                continue;
            };
            let mut record: Record = match serde_json::from_str(&rec) {
                Ok(r) => r,
                Err(e) => {
                    self.skip(format!("run {run_id} cell {cell}: stored record: {e}"));
                    continue;
                }
            };
            // The histogram is stored in its column, not in the record.
            if record.lat_hist.is_none() {
                record.lat_hist = hist;
            }
            out.push((
                cell,
                Measurement {
                    role,
                    src,
                    dst,
                    record,
                },
            ));
        }
        Ok(out)
    }

    /// Every measurement of a run (of one test when `test` is given), one at
    /// a time, grouped by cell (cells in id order, a cell's measurements in
    /// the order stored), keeping none: the main figures from their columns,
    /// the record's JSON text as stored and the `lat_hist` column.
    pub fn each_measurement(
        &self,
        run_id: i64,
        test: Option<&str>,
        f: &mut dyn FnMut(StoredMeasurement) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let sql = format!(
            "SELECT m.cell_id, m.role, m.src, m.dst, m.direction, m.bw_gbps, m.lat_p50_us, m.record, m.lat_hist
             FROM measurements m {}
             WHERE m.run_id = ?1 {}
             ORDER BY m.cell_id, m.id",
            if test.is_some() {
                "JOIN cells c ON c.run_id = m.run_id AND c.cell_id = m.cell_id"
            } else {
                ""
            },
            if test.is_some() { "AND c.test = ?2" } else { "" }
        );
        let mut st = self
            .conn
            .prepare(&sql)
            .map_err(self.err("reading measurements"))?;
        let mut rows = match test {
            Some(t) => st.query(params![run_id, t]),
            None => st.query(params![run_id]),
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
                lat_hist: r.get(8).map_err(get)?,
                cell_id,
            })?;
        }
        Ok(())
    }

    /// Measurements of a run as stored: the record JSON as written (keys
    /// this fabperf version does not model included, so readers tolerate
    /// records from newer writers) and the stored latency histogram.
    pub fn measurements_raw(&self, run_id: i64) -> Result<Vec<RawMeasurement>, StoreError> {
        let mut st = self
            .conn
            .prepare(
                "SELECT m.cell_id, m.role, m.src, m.dst, m.record, m.lat_hist FROM measurements m
                 JOIN cells c ON c.run_id = m.run_id AND c.cell_id = m.cell_id
                 WHERE m.run_id = ?1
                 ORDER BY c.seq, m.cell_id, m.id",
            )
            .map_err(self.err("reading measurements"))?;
        let rows = st
            .query_map([run_id], |r| {
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
            let (cell_id, role, src, dst, rec, lat_hist) =
                row.map_err(self.err("reading measurements"))?;
            let Some(role) = Role::parse(&role) else {
                self.skip(format!(
                    "run {run_id} cell {cell_id}: unknown role {role:?}"
                ));
                continue;
            };
            let record: serde_json::Value = match serde_json::from_str(&rec) {
                Ok(r) => r,
                Err(e) => {
                    self.skip(format!("run {run_id} cell {cell_id}: stored record: {e}"));
                    continue;
                }
            };
            out.push(RawMeasurement {
                cell_id,
                role,
                src,
                dst,
                record,
                lat_hist,
            });
        }
        Ok(out)
    }

    /// Run `sql` read-only over the store (for ad-hoc analysis in tests and
    /// tools): returns the first column of the first row as i64.
    pub fn count(&self, sql: &str, run_id: i64) -> Result<i64, StoreError> {
        self.conn
            .query_row(sql, [run_id], |r| r.get(0))
            .map_err(self.err("counting"))
    }

    /// SQLite's own consistency check ("ok" when sound).
    pub fn integrity_check(&self) -> Result<String, StoreError> {
        self.conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .map_err(self.err("checking integrity"))
    }
}

/// A finding attached to a run (a doctor finding of an agent's node, the
/// suspects of a mesh re-test, ...).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub kind: String,
    pub subject: String,
    pub body: serde_json::Value,
    pub at: String,
}

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

fn measurement_insert_sql() -> &'static str {
    "INSERT INTO measurements (run_id, cell_id, role, src, dst, test, op, direction, stream, size, streams,
        duration_s, bytes, iterations, bw_gbps, msg_rate_mpps, lat_kind, lat_samples, lat_min_us,
        lat_p50_us, lat_p90_us, lat_p99_us, lat_p999_us, lat_max_us, lat_mean_us, cpu_local_pct,
        cpu_remote_pct, retransmits, udp_sent, udp_lost, udp_loss_pct, mtu, lat_hist, record)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19,
        ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34)"
}

fn insert_measurement(
    st: &mut rusqlite::Statement<'_>,
    run_id: i64,
    cell_id: &str,
    m: &Measurement,
) -> rusqlite::Result<()> {
    let r = &m.record;
    let l = r.lat_us.as_ref();
    let u = r.udp.as_ref();
    let mut record = serde_json::to_value(r).unwrap_or(serde_json::Value::Null);
    // The histogram is kept once, in its column (the largest part of a
    // latency record); readers put it back into the record they return.
    let hist = match record.as_object_mut().and_then(|o| o.remove("lat_hist")) {
        Some(serde_json::Value::String(h)) => Some(h),
        _ => None,
    };
    st.execute(params![
        run_id,
        cell_id,
        m.role.as_str(),
        m.src,
        m.dst,
        r.test,
        r.op,
        r.direction,
        r.stream,
        r.size as i64,
        r.streams,
        r.duration_s,
        clamp_i64(r.bytes),
        r.iterations.map(clamp_i64),
        r.bw_gbps,
        r.msg_rate_mpps,
        l.map(|l| l.kind.label()),
        l.map(|l| clamp_i64(l.samples)),
        l.map(|l| l.min),
        l.map(|l| l.p50),
        l.map(|l| l.p90),
        l.map(|l| l.p99),
        l.map(|l| l.p999),
        l.map(|l| l.max),
        l.map(|l| l.mean),
        r.cpu_local_pct,
        r.cpu_remote_pct,
        r.retransmits.map(clamp_i64),
        u.map(|u| clamp_i64(u.sent)),
        u.map(|u| clamp_i64(u.lost)),
        u.map(|u| u.loss_pct),
        r.mtu,
        hist,
        record.to_string(),
    ])?;
    Ok(())
}

/// SQLite integers are signed 64-bit; counts above that are stored capped
/// in the columns (the record JSON keeps the exact value).
fn clamp_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}
