//! The open store: its connection, its file, what its readers skipped, and
//! the helpers every part of it shares.

use crate::StoreError;
use rusqlite::Connection;
use std::path::{Path, PathBuf};

/// An open results store.
pub struct Store {
    pub(crate) conn: Connection,
    pub(crate) path: PathBuf,
    /// Stored items a reader could not decode and skipped (one line each).
    pub(crate) skipped: std::cell::RefCell<Vec<String>>,
}

impl Store {
    /// What readers of this store skipped because it could not be decoded
    /// (a damaged store, or one written by a newer fabperf): one line each.
    /// Every reader skips the same way; commands say how many.
    pub fn skipped(&self) -> Vec<String> {
        self.skipped.borrow().clone()
    }

    pub(crate) fn skip(&self, what: String) {
        let mut s = self.skipped.borrow_mut();
        if !s.contains(&what) {
            s.push(what);
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn err(&self, what: &str) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        let what = what.to_string();
        move |e| StoreError::sql(&self.path, what.clone(), e)
    }

    pub(crate) fn invalid(&self, msg: String) -> StoreError {
        StoreError::Invalid {
            path: self.path.clone(),
            msg,
        }
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
