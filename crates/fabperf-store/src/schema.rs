//! The store's schema and its migrations.
//!
//! The schema version is SQLite's `user_version`. Each migration takes the
//! store from version `i` to `i + 1` inside one transaction, so a store is
//! always at a version this code knows completely.

use crate::StoreError;
use rusqlite::Connection;
use std::path::Path;

/// One step of the schema.
pub(crate) struct Migration {
    /// What the step adds (for error messages).
    pub what: &'static str,
    pub sql: &'static str,
}

/// Every step, in order; the store's version is the number applied.
pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        what: "runs, agents, cells and measurements",
        sql: r#"
CREATE TABLE runs (
    id              INTEGER PRIMARY KEY,
    plan_name       TEXT NOT NULL,
    plan_hash       TEXT NOT NULL,
    plan_file       TEXT,
    plan_text       TEXT NOT NULL,
    started_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    ended_at        TEXT,
    fabperf_version TEXT NOT NULL
);
CREATE INDEX runs_by_plan ON runs (plan_name, id);

CREATE TABLE agents (
    run_id   INTEGER NOT NULL REFERENCES runs (id),
    name     TEXT NOT NULL,
    path     TEXT NOT NULL,
    addr     TEXT NOT NULL,
    hello    TEXT NOT NULL,
    seen_at  TEXT NOT NULL,
    PRIMARY KEY (run_id, name, path)
);

CREATE TABLE cells (
    run_id     INTEGER NOT NULL REFERENCES runs (id),
    cell_id    TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    batch      INTEGER NOT NULL,
    test       TEXT NOT NULL,
    kind       TEXT NOT NULL,
    path       TEXT NOT NULL,
    pattern    TEXT NOT NULL,
    flows      TEXT NOT NULL,
    params     TEXT NOT NULL,
    dims       TEXT NOT NULL,
    repeat     INTEGER NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('pending', 'done', 'failed')),
    error      TEXT,
    attempts   INTEGER NOT NULL DEFAULT 0,
    started_at TEXT,
    ended_at   TEXT,
    wall_s     REAL,
    in_plan    INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (run_id, cell_id)
);
CREATE INDEX cells_by_order ON cells (run_id, seq);

CREATE TABLE measurements (
    id             INTEGER PRIMARY KEY,
    run_id         INTEGER NOT NULL,
    cell_id        TEXT NOT NULL,
    role           TEXT NOT NULL CHECK (role IN ('total', 'stream', 'flow', 'aggregate')),
    src            TEXT,
    dst            TEXT,
    test           TEXT NOT NULL,
    op             TEXT,
    direction      TEXT,
    stream         INTEGER,
    size           INTEGER NOT NULL,
    streams        INTEGER NOT NULL,
    duration_s     REAL NOT NULL,
    bytes          INTEGER NOT NULL,
    iterations     INTEGER,
    bw_gbps        REAL,
    msg_rate_mpps  REAL,
    lat_kind       TEXT,
    lat_samples    INTEGER,
    lat_min_us     REAL,
    lat_p50_us     REAL,
    lat_p90_us     REAL,
    lat_p99_us     REAL,
    lat_p999_us    REAL,
    lat_max_us     REAL,
    lat_mean_us    REAL,
    cpu_local_pct  REAL,
    cpu_remote_pct REAL,
    retransmits    INTEGER,
    udp_sent       INTEGER,
    udp_lost       INTEGER,
    udp_loss_pct   REAL,
    mtu            INTEGER,
    lat_hist       TEXT,
    record         TEXT NOT NULL,
    FOREIGN KEY (run_id, cell_id) REFERENCES cells (run_id, cell_id)
);
CREATE INDEX measurements_by_cell ON measurements (run_id, cell_id);
"#,
    },
    Migration {
        what: "findings attached to runs (doctor findings, suspects of mesh re-tests)",
        sql: r#"
CREATE TABLE findings (
    id       INTEGER PRIMARY KEY,
    run_id   INTEGER NOT NULL REFERENCES runs (id),
    kind     TEXT NOT NULL,
    subject  TEXT NOT NULL,
    body     TEXT NOT NULL,
    at       TEXT NOT NULL
);
CREATE INDEX findings_by_run ON findings (run_id, kind);
"#,
    },
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The application id in the SQLite header: "FBPF".
pub(crate) const APPLICATION_ID: i64 = 0x4642_5046;

/// An SQLite error in words, without the SQL text it came from (a failed
/// migration would otherwise quote the whole schema).
pub(crate) fn brief(e: &rusqlite::Error) -> String {
    match e {
        rusqlite::Error::SqlInputError { msg, .. } => msg.clone(),
        rusqlite::Error::SqliteFailure(f, Some(m)) => format!("{m} ({:?})", f.code),
        e => e.to_string(),
    }
}

pub(crate) fn migrate(
    conn: &mut Connection,
    path: &Path,
    steps: &[Migration],
    read_only: bool,
) -> Result<(), StoreError> {
    let sql = |what: &str, e: rusqlite::Error| StoreError::sql(path, what, e);
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| sql("reading the schema version", e))?;
    let app: i64 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(|e| sql("reading the application id", e))?;
    let tables: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .map_err(|e| sql("reading the schema", e))?;
    if app != APPLICATION_ID && (tables > 0 || version > 0) {
        return Err(StoreError::NotAStore {
            path: path.to_path_buf(),
            why: "an SQLite database of another program".into(),
        });
    }
    let known = MIGRATIONS.len() as i64;
    if version < 0 {
        return Err(StoreError::NotAStore {
            path: path.to_path_buf(),
            why: format!(
                "its schema version is {version}, which no fabperf writes: the file was changed by another program"
            ),
        });
    }
    if version == 0 && tables > 0 {
        return Err(StoreError::NotAStore {
            path: path.to_path_buf(),
            why: format!(
                "it holds {tables} schema object(s) but schema version 0: damaged, or changed by another program"
            ),
        });
    }
    if version > known {
        return Err(StoreError::Newer {
            path: path.to_path_buf(),
            found: version,
            supported: known,
        });
    }
    let target = steps.len() as i64;
    if version >= target {
        return Ok(());
    }
    if read_only && version == 0 {
        return Err(StoreError::NotAStore {
            path: path.to_path_buf(),
            why: "it is empty: no run was ever written to it (`fabperf run PLAN --db FILE` writes one)"
                .into(),
        });
    }
    if read_only {
        return Err(StoreError::Invalid {
            path: path.to_path_buf(),
            msg: format!(
                "schema version {version} is older than this fabperf's {target}; \
                 open it once for writing (e.g. `fabperf run … --db` on it) to migrate it"
            ),
        });
    }
    for (i, m) in steps.iter().enumerate().skip(version as usize) {
        let tx = conn
            .transaction()
            .map_err(|e| sql("starting a migration", e))?;
        tx.execute_batch(m.sql).map_err(|e| StoreError::Sql {
            path: path.to_path_buf(),
            what: format!("migrating to schema version {} ({})", i + 1, m.what),
            msg: brief(&e),
        })?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)
            .map_err(|e| sql("writing the schema version", e))?;
        tx.pragma_update(None, "application_id", APPLICATION_ID)
            .map_err(|e| sql("writing the application id", e))?;
        tx.commit().map_err(|e| sql("committing a migration", e))?;
    }
    Ok(())
}
