//! JSON Lines: one record per line, the tool's lossless export.

use crate::Record;
use std::io::{self, BufRead, Write};

/// Write records as JSON Lines: one object per line.
pub fn write_json_lines<W: Write>(mut w: W, records: &[Record]) -> io::Result<()> {
    for r in records {
        serde_json::to_writer(&mut w, r)?;
        w.write_all(b"\n")?;
    }
    w.flush()
}

/// Read JSON Lines written by [`write_json_lines`] (blank lines skipped).
/// An error names the line and what is wrong with it.
pub fn read_json_lines<R: BufRead>(r: R) -> io::Result<Vec<Record>> {
    let mut out = Vec::new();
    for (i, line) in r.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let rec: Record = serde_json::from_str(&line).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("line {}: not a fabperf record: {e}", i + 1),
            )
        })?;
        out.push(rec);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::tests::sample;

    #[test]
    fn one_object_per_line_and_back() {
        let mut buf = Vec::new();
        write_json_lines(&mut buf, &sample()).unwrap();
        let s = String::from_utf8(buf.clone()).unwrap();
        let lines: Vec<_> = s.lines().collect();
        assert_eq!(lines.len(), 2);
        for l in lines {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert!(v.is_object());
        }
        let back = read_json_lines(buf.as_slice()).unwrap();
        assert_eq!(back, sample_with_same_times(&back));
        let e = read_json_lines("{}\n".as_bytes()).unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
    }

    fn sample_with_same_times(back: &[Record]) -> Vec<Record> {
        let mut s = sample();
        for (a, b) in s.iter_mut().zip(back) {
            a.started_at = b.started_at.clone();
        }
        s
    }
}
