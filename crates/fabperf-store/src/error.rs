//! The store's errors: each names the file and what to do.

use std::path::{Path, PathBuf};

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
    pub(crate) fn sql(path: &Path, what: impl Into<String>, e: rusqlite::Error) -> StoreError {
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
