//! The run plan (`fabperf run`'s TOML) the runner Job executes, generated
//! from the k8s plan and validated with `fabperf_run::plan::parse` at render
//! time. Keys the user wrote under `[runner]` are copied into the run plan
//! with a source map, so a problem the run-plan parser finds is reported at
//! the line and column of the k8s plan where the user wrote it.

use std::ops::Range;

/// One stretch of the generated text and where it came from.
#[derive(Debug, Clone)]
struct Segment {
    gen: Range<usize>,
    src: usize,
    /// Copied byte for byte: offsets inside map one to one.
    verbatim: bool,
}

/// Generated TOML text with a map back to the k8s plan.
#[derive(Debug, Default)]
pub struct Gen {
    pub text: String,
    segments: Vec<Segment>,
}

impl Gen {
    /// A line of our own (a comment, a generated key).
    pub fn line(&mut self, s: &str) {
        self.text.push_str(s);
        self.text.push('\n');
    }

    /// A line of our own that stands for something the user wrote (a
    /// `[[tests]]` header for a test table): errors on it point there.
    pub fn line_from(&mut self, s: &str, src: usize) {
        let start = self.text.len();
        self.line(s);
        self.segments.push(Segment {
            gen: start..self.text.len(),
            src,
            verbatim: false,
        });
    }

    /// `key = value` as the user wrote them in `source` (key and value copied
    /// byte for byte when the value's text re-parses as the same value, so
    /// columns inside an array map exactly), else the value re-serialized.
    pub fn key_value(
        &mut self,
        source: &str,
        key: &str,
        key_span: Range<usize>,
        value: &toml::Value,
        value_span: Range<usize>,
    ) {
        let key_text = source.get(key_span.clone()).unwrap_or_default();
        let start = self.text.len();
        if bare_key(key) {
            self.text.push_str(key);
            self.segments.push(Segment {
                gen: start..self.text.len(),
                src: key_span.start,
                verbatim: key_text == key,
            });
        } else {
            self.text
                .push_str(&toml::Value::String(key.into()).to_string());
            self.segments.push(Segment {
                gen: start..self.text.len(),
                src: key_span.start,
                verbatim: false,
            });
        }
        self.text.push_str(" = ");
        let vstart = self.text.len();
        let raw = source.get(value_span.clone()).unwrap_or_default();
        if reparses_as(raw, value) {
            self.text.push_str(raw);
            self.segments.push(Segment {
                gen: vstart..self.text.len(),
                src: value_span.start,
                verbatim: true,
            });
        } else {
            self.text.push_str(&value.to_string());
            self.segments.push(Segment {
                gen: vstart..self.text.len(),
                src: value_span.start,
                verbatim: false,
            });
        }
        self.text.push('\n');
    }

    /// The offset in the k8s plan for an offset in the generated text: inside
    /// a copied stretch exactly, else the start of what the stretch stands
    /// for; `fallback` for text of our own before any stretch.
    pub fn source_offset(&self, gen: usize, fallback: usize) -> usize {
        if let Some(s) = self
            .segments
            .iter()
            .find(|s| s.gen.start <= gen && gen < s.gen.end.max(s.gen.start + 1))
        {
            return if s.verbatim {
                s.src + (gen - s.gen.start)
            } else {
                s.src
            };
        }
        // Between stretches (the newline after a value, an error at the end
        // of a table): the closest stretch before it.
        self.segments
            .iter()
            .filter(|s| s.gen.start <= gen)
            .max_by_key(|s| s.gen.start)
            .map_or(fallback, |s| s.src)
    }

    /// The byte offset of a 1-based line and column (columns count
    /// characters, as the run-plan parser reports them).
    pub fn offset_of(&self, line: usize, col: usize) -> usize {
        let mut off = 0;
        for (i, l) in self.text.split_inclusive('\n').enumerate() {
            if i + 1 == line {
                let within: usize = l
                    .chars()
                    .take(col.saturating_sub(1))
                    .map(char::len_utf8)
                    .sum();
                return off + within;
            }
            off += l.len();
        }
        self.text.len()
    }
}

fn bare_key(k: &str) -> bool {
    !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether `raw` (a value's text in the user's file) is that value's TOML.
fn reparses_as(raw: &str, value: &toml::Value) -> bool {
    if raw.is_empty() || raw.len() > 1 << 20 {
        return false;
    }
    match toml::from_str::<toml::Table>(&format!("v = {raw}\n")) {
        Ok(t) => t.get("v") == Some(value),
        Err(_) => false,
    }
}

/// A TOML basic string.
pub fn quoted(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbatim_values_map_column_for_column() {
        let src = "x = 1\nsizes = [\"64K\",\n  \"1Q\"]\n";
        let v: toml::Table = toml::from_str(src).unwrap();
        let vs = src.find('[').unwrap();
        let ve = src.rfind(']').unwrap() + 1;
        let mut g = Gen::default();
        g.line("# generated");
        g.key_value(src, "sizes", 6..11, &v["sizes"], vs..ve);
        assert_eq!(g.text, "# generated\nsizes = [\"64K\",\n  \"1Q\"]\n");
        // The bad size on the generated line 3, column 3, is at the same
        // place in the source.
        let off = g.offset_of(3, 3);
        assert_eq!(&g.text[off..off + 4], "\"1Q\"");
        let s = g.source_offset(off, 0);
        assert_eq!(&src[s..s + 4], "\"1Q\"");
        // The key.
        let k = g.source_offset(g.offset_of(2, 1), 0);
        assert_eq!(&src[k..k + 5], "sizes");
    }

    #[test]
    fn values_that_do_not_reparse_are_serialized_and_map_to_their_start() {
        // A dotted key's value span is the key itself.
        let src = "params.omit_s = 1.5\n";
        let v: toml::Table = toml::from_str(src).unwrap();
        let mut g = Gen::default();
        g.key_value(src, "params", 0..6, &v["params"], 0..6);
        assert_eq!(g.text, "params = { omit_s = 1.5 }\n");
        assert_eq!(g.source_offset(g.offset_of(1, 12), 99), 0);
        // A key whose span is not its text (a top-level `[runner]` key
        // given with its value's span) is still written bare.
        let mut g = Gen::default();
        g.key_value(src, "params", 16..19, &toml::Value::Integer(1), 16..19);
        assert!(g.text.starts_with("params = "), "{}", g.text);
        // A key that is not a bare key is written quoted.
        let mut g = Gen::default();
        g.key_value(src, "a b", 0..6, &toml::Value::Integer(1), 7..8);
        assert!(g.text.starts_with("\"a b\" = "), "{}", g.text);
    }

    #[test]
    fn text_of_our_own_maps_to_the_closest_stretch_or_the_fallback() {
        let mut g = Gen::default();
        g.line("name = \"x\"");
        g.line_from("[[tests]]", 42);
        g.line("kind = \"tcp-bw\"");
        assert_eq!(g.source_offset(0, 7), 7);
        assert_eq!(g.source_offset(g.offset_of(2, 1), 7), 42);
        assert_eq!(g.source_offset(g.offset_of(3, 4), 7), 42);
        assert_eq!(g.offset_of(99, 1), g.text.len());
    }
}
