//! `fabperf export`: a store's measurements in fabperf's record formats,
//! each record with the cell it came from.

use crate::{CellRow, Measurement, Store, StoreError};
use std::collections::HashMap;
use std::io::Write;

/// One exported measurement with its context.
pub struct ExportRow<'a> {
    pub run_id: i64,
    pub cell: &'a CellRow,
    pub m: &'a Measurement,
}

/// The context keys each exported record carries besides its own.
pub const CONTEXT_COLUMNS: [&str; 10] = [
    "run_id",
    "cell_id",
    "plan_test",
    "path",
    "pattern",
    "role",
    "src_node",
    "dst_node",
    "repeat",
    "dims",
];

impl ExportRow<'_> {
    fn context(&self) -> Vec<(&'static str, serde_json::Value)> {
        use serde_json::json;
        vec![
            ("run_id", json!(self.run_id)),
            ("cell_id", json!(self.cell.spec.cell_id)),
            ("plan_test", json!(self.cell.spec.test)),
            ("path", json!(self.cell.spec.path)),
            ("pattern", json!(self.cell.spec.pattern)),
            ("role", json!(self.m.role.as_str())),
            ("src_node", json!(self.m.src)),
            ("dst_node", json!(self.m.dst)),
            ("repeat", json!(self.cell.spec.repeat)),
            ("dims", self.cell.spec.dims.clone()),
        ]
    }
}

/// Visit every measurement of the chosen runs (all when `run` is None).
fn each_row(
    store: &Store,
    run: Option<i64>,
    mut f: impl FnMut(ExportRow<'_>) -> Result<(), StoreError>,
) -> Result<usize, StoreError> {
    let runs = match run {
        Some(id) => vec![store.run(id)?],
        None => store.runs()?,
    };
    let mut n = 0;
    for r in runs {
        let cells: HashMap<String, CellRow> = store
            .cells(r.id)?
            .into_iter()
            .map(|c| (c.spec.cell_id.clone(), c))
            .collect();
        for (cell_id, m) in store.measurements(r.id, None)? {
            let Some(cell) = cells.get(&cell_id) else {
                continue;
            };
            f(ExportRow {
                run_id: r.id,
                cell,
                m: &m,
            })?;
            n += 1;
        }
    }
    Ok(n)
}

fn io_err(store: &Store, e: impl std::fmt::Display) -> StoreError {
    StoreError::Invalid {
        path: store.path().to_path_buf(),
        msg: format!("writing the export: {e}"),
    }
}

/// JSON Lines: each line is the record with the context keys added.
pub fn export_jsonl<W: Write>(
    store: &Store,
    run: Option<i64>,
    mut w: W,
) -> Result<usize, StoreError> {
    let n = each_row(store, run, |row| {
        let mut v = serde_json::to_value(&row.m.record).map_err(|e| io_err(store, e))?;
        if let Some(o) = v.as_object_mut() {
            for (k, val) in row.context() {
                o.insert(k.to_string(), val);
            }
        }
        serde_json::to_writer(&mut w, &v).map_err(|e| io_err(store, e))?;
        w.write_all(b"\n").map_err(|e| io_err(store, e))
    })?;
    w.flush().map_err(|e| io_err(store, e))?;
    Ok(n)
}

/// CSV: the context columns, then fabperf's record columns.
pub fn export_csv<W: Write>(store: &Store, run: Option<i64>, w: W) -> Result<usize, StoreError> {
    let mut out = csv::WriterBuilder::new().has_headers(false).from_writer(w);
    let mut header: Vec<String> = CONTEXT_COLUMNS.iter().map(|s| s.to_string()).collect();
    header.extend(fabperf_results::csv_header().iter().map(|s| s.to_string()));
    out.write_record(&header).map_err(|e| io_err(store, e))?;
    let n = each_row(store, run, |row| {
        let mut fields: Vec<String> = row
            .context()
            .into_iter()
            .map(|(_, v)| match v {
                serde_json::Value::Null => String::new(),
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            })
            .collect();
        let mut one = Vec::new();
        fabperf_results::write_csv(&mut one, std::slice::from_ref(&row.m.record), false)
            .map_err(|e| io_err(store, e))?;
        let mut rdr = csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(one.as_slice());
        if let Some(rec) = rdr.records().next() {
            let rec = rec.map_err(|e| io_err(store, e))?;
            fields.extend(rec.iter().map(str::to_string));
        }
        out.write_record(
            fields
                .iter()
                .map(|f| fabperf_results::escape::csv_field(f).into_owned()),
        )
        .map_err(|e| io_err(store, e))
    })?;
    out.flush().map_err(|e| io_err(store, e))?;
    Ok(n)
}
