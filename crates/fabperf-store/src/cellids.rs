//! A list of cell ids kept in one buffer: a mesh of a thousand nodes has
//! millions of cells, and a `String` each costs three times the id.

use serde::{Serialize, Serializer};
use std::fmt;

/// Cell ids in the order pushed, one after another in one buffer; it
/// serializes as a list of strings. Ids of one length (fabperf's are 16
/// hex digits) take their bytes and nothing else.
#[derive(Clone, Default)]
pub struct CellIds {
    text: String,
    /// How many ids, and their length while they all have the same.
    n: usize,
    width: usize,
    /// Where each id ends in `text`, once the ids differ in length.
    ends: Option<Vec<usize>>,
}

impl CellIds {
    pub fn new() -> CellIds {
        CellIds::default()
    }

    pub fn push(&mut self, id: &str) {
        if self.n == 0 {
            self.width = id.len();
        }
        if self.ends.is_none() && id.len() != self.width {
            let w = self.width;
            self.ends = Some((1..=self.n).map(|i| i * w).collect());
        }
        self.text.push_str(id);
        self.n += 1;
        if let Some(e) = &mut self.ends {
            e.push(self.text.len());
        }
    }

    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The `i`th id.
    pub fn get(&self, i: usize) -> Option<&str> {
        if i >= self.n {
            return None;
        }
        let (start, end) = match &self.ends {
            None => (i * self.width, (i + 1) * self.width),
            Some(e) => (if i == 0 { 0 } else { e[i - 1] }, e[i]),
        };
        Some(&self.text[start..end])
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        (0..self.len()).map(|i| self.get(i).expect("in range"))
    }

    pub fn contains(&self, id: &str) -> bool {
        self.iter().any(|c| c == id)
    }

    /// The ids joined with `sep`.
    pub fn join(&self, sep: &str) -> String {
        let mut s = String::with_capacity(self.text.len() + sep.len() * self.len());
        for (i, c) in self.iter().enumerate() {
            if i > 0 {
                s.push_str(sep);
            }
            s.push_str(c);
        }
        s
    }

    pub fn to_vec(&self) -> Vec<String> {
        self.iter().map(str::to_string).collect()
    }

    /// Memory no longer needed for pushing more.
    pub fn shrink_to_fit(&mut self) {
        self.text.shrink_to_fit();
        if let Some(e) = &mut self.ends {
            e.shrink_to_fit();
        }
    }
}

impl PartialEq for CellIds {
    fn eq(&self, o: &CellIds) -> bool {
        self.n == o.n && self.iter().eq(o.iter())
    }
}

impl Eq for CellIds {}

impl<S: AsRef<str>> FromIterator<S> for CellIds {
    fn from_iter<I: IntoIterator<Item = S>>(it: I) -> CellIds {
        let mut c = CellIds::new();
        for s in it {
            c.push(s.as_ref());
        }
        c
    }
}

impl fmt::Debug for CellIds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for CellIds {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::CellIds;

    #[test]
    fn ids_come_back_as_pushed_and_serialize_as_a_list() {
        let mut c = CellIds::new();
        assert!(c.is_empty());
        assert_eq!(c.get(0), None);
        for id in ["a1b2", "", "ff00ff00ff00ff00", "é≠"] {
            c.push(id);
        }
        assert_eq!(c.len(), 4);
        assert_eq!(
            c.iter().collect::<Vec<_>>(),
            ["a1b2", "", "ff00ff00ff00ff00", "é≠"]
        );
        assert_eq!(c.get(2), Some("ff00ff00ff00ff00"));
        assert_eq!(c.get(4), None);
        assert!(c.contains("") && c.contains("é≠") && !c.contains("a1"));
        assert_eq!(c.join(", "), "a1b2, , ff00ff00ff00ff00, é≠");
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            r#"["a1b2","","ff00ff00ff00ff00","é≠"]"#
        );
        assert_eq!(
            format!("{c:?}"),
            r#"["a1b2", "", "ff00ff00ff00ff00", "é≠"]"#
        );
        let back: CellIds = c.to_vec().into_iter().collect();
        assert_eq!(back, c);
    }

    #[test]
    fn ids_of_one_length_then_another() {
        let mut c = CellIds::new();
        c.push("0123456789abcdef");
        c.push("fedcba9876543210");
        assert_eq!(c.get(1), Some("fedcba9876543210"));
        assert!(c.ends.is_none());
        c.push("short");
        c.push("0123456789abcdef");
        assert_eq!(
            c.to_vec(),
            [
                "0123456789abcdef",
                "fedcba9876543210",
                "short",
                "0123456789abcdef"
            ]
        );
        let same: CellIds = c.iter().collect();
        assert_eq!(same, c);
        let mut e = CellIds::new();
        e.push("");
        e.push("");
        e.push("x");
        assert_eq!(e.to_vec(), ["", "", "x"]);
        assert_ne!(e, c);
    }
}
