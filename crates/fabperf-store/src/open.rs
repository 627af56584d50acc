//! Opening a store for writing or reading, and refusing files that are not
//! a fabperf store (or are one from a newer fabperf) before changing them.

use crate::{schema, Store, StoreError, SCHEMA_VERSION};
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::time::Duration;

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
}
