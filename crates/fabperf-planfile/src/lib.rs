//! The plan-file layer every plan kind shares (`fabperf run` plans,
//! `fabperf k8s` plans): reading a plan file (size cap, regular files only,
//! UTF-8), parsing its TOML with spans (unknown keys are refused by the
//! schema's `deny_unknown_fields`, located like any other problem), and
//! reporting every problem at once as `FILE:LINE:COL: message`.
//!
//! The format is fabperf's own one-line `FILE:LINE:COL: message` (what the
//! tests, goldens and editors' error matchers read); a diagnostics crate
//! (annotate-snippets, codespan-reporting) would render source snippets
//! instead, so none is used.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

pub use toml::Spanned;

/// One problem in a plan, located in its source.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanError {
    pub file: String,
    pub line: usize,
    pub col: usize,
    pub msg: String,
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: {}", self.file, self.line, self.col, self.msg)
    }
}

/// Every problem found in a plan (reported together).
#[derive(Debug, Clone)]
pub struct PlanErrors(pub Vec<PlanError>);

impl fmt::Display for PlanErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        write!(
            f,
            "the plan has {n} problem{}:",
            if n == 1 { "" } else { "s" }
        )?;
        for e in &self.0 {
            write!(f, "\n  {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for PlanErrors {}

/// The problems of one plan text, collected while it is checked: each is
/// given at a byte span of the text and located when it is recorded.
pub struct Diagnostics<'a> {
    file: &'a str,
    text: &'a str,
    errors: Vec<PlanError>,
}

impl<'a> Diagnostics<'a> {
    /// `file` names the text in every location.
    pub fn new(file: &'a str, text: &'a str) -> Self {
        Diagnostics {
            file,
            text,
            errors: Vec::new(),
        }
    }

    /// Record `msg` at the start of `span`.
    pub fn at(&mut self, span: Range<usize>, msg: impl Into<String>) {
        let (line, col) = fabperf_proto::text::line_col(self.text, span.start);
        self.errors.push(PlanError {
            file: self.file.to_string(),
            line,
            col,
            msg: msg.into(),
        });
    }

    /// The name the text is located by.
    pub fn file(&self) -> &'a str {
        self.file
    }

    /// The text being checked.
    pub fn text(&self) -> &'a str {
        self.text
    }

    /// No problem recorded yet.
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    /// How many problems are recorded.
    pub fn len(&self) -> usize {
        self.errors.len()
    }

    /// An integer key's value if it is within `lo..=hi`; otherwise the
    /// problem "`what` N is out of range LO..=HI" at the value, and `None`.
    pub fn int_in(&mut self, v: &Spanned<i64>, what: &str, lo: i64, hi: i64) -> Option<i64> {
        let n = *v.get_ref();
        if (lo..=hi).contains(&n) {
            Some(n)
        } else {
            self.at(v.span(), format!("{what} {n} is out of range {lo}..={hi}"));
            None
        }
    }

    /// `value` if no problem was recorded, else every problem.
    pub fn finish<T>(self, value: T) -> Result<T, PlanErrors> {
        if self.errors.is_empty() {
            Ok(value)
        } else {
            Err(PlanErrors(self.errors))
        }
    }
}

/// Parse `text` as the TOML schema `R` (spans kept where `R` holds
/// [`Spanned`] values) and check it with `check`, which records every
/// problem it finds. A text that is not TOML, or does not fit the schema (a
/// wrong type, an unknown or missing key), gives its one located problem.
pub fn parse<R, T>(
    text: &str,
    file: &str,
    check: impl FnOnce(&mut Diagnostics<'_>, R) -> T,
) -> Result<T, PlanErrors>
where
    R: serde::de::DeserializeOwned,
{
    let mut cx = Diagnostics::new(file, text);
    match toml::from_str::<R>(text) {
        Ok(raw) => {
            let value = check(&mut cx, raw);
            cx.finish(value)
        }
        Err(e) => {
            cx.at(e.span().unwrap_or(0..0), e.message().trim());
            Err(PlanErrors(cx.errors))
        }
    }
}

/// A plan file read for checking.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanFile {
    /// The file's text.
    pub text: String,
    /// The path as given, the name its problems are located by.
    pub name: String,
    /// The file's directory: relative files named in the plan resolve
    /// against it.
    pub base_dir: PathBuf,
}

/// Read a plan file of at most `max_bytes` (a regular file, UTF-8); the
/// error names the file and says what is wrong with it.
pub fn read(path: &Path, max_bytes: u64) -> Result<PlanFile, String> {
    read_as(path, max_bytes, "plan")
}

/// As [`read`], for a file its errors call `what` (`"profile"`: a tuning
/// profile is read and checked like a plan).
pub fn read_as(path: &Path, max_bytes: u64, what: &str) -> Result<PlanFile, String> {
    let text = fabperf_results::files::read_text(path, max_bytes, what)?;
    Ok(PlanFile {
        text,
        name: path.display().to_string(),
        base_dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Raw {
        name: Spanned<String>,
        count: Option<Spanned<i64>>,
    }

    fn check(text: &str) -> Result<(String, Option<i64>), PlanErrors> {
        parse(text, "p.toml", |cx, raw: Raw| {
            if raw.name.get_ref().is_empty() {
                cx.at(raw.name.span(), "name is empty");
            }
            let count = raw.count.as_ref().and_then(|c| cx.int_in(c, "count", 1, 9));
            (raw.name.into_inner(), count)
        })
    }

    #[test]
    fn every_problem_is_located_by_file_line_and_column() {
        let e = check("\n\nname = \"\"\ncount = 10\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "the plan has 2 problems:\n  p.toml:3:8: name is empty\n  p.toml:4:9: count 10 is out of range 1..=9"
        );
        assert_eq!((e.0[1].line, e.0[1].col), (4, 9));
    }

    #[test]
    fn a_schema_mismatch_is_one_located_problem() {
        let e = check("name = \"a\"\ncolor = 1\n").unwrap_err();
        assert_eq!(e.0.len(), 1);
        assert_eq!((e.0[0].line, e.0[0].col), (2, 1));
        assert!(
            e.0[0].msg.starts_with("unknown field `color`"),
            "{}",
            e.0[0].msg
        );
        assert_eq!(
            e.to_string().lines().next(),
            Some("the plan has 1 problem:")
        );
        let e = check("name = [\n").unwrap_err();
        assert_eq!(e.0.len(), 1);
        assert!(e.0[0].line >= 1 && e.0[0].col >= 1);
        let e = check("").unwrap_err();
        assert_eq!((e.0[0].line, e.0[0].col), (1, 1));
        assert!(e.0[0].msg.contains("name"), "{}", e.0[0].msg);
    }

    #[test]
    fn a_clean_plan_gives_the_checked_value() {
        assert_eq!(
            check("name = \"a\"\ncount = 3\n").unwrap(),
            ("a".to_string(), Some(3))
        );
        assert_eq!(check("name = \"é\"").unwrap(), ("é".to_string(), None));
    }

    #[test]
    fn columns_count_characters_not_bytes() {
        let e = check("name = \"\"\ncount = 0 # é\n").unwrap_err();
        assert_eq!((e.0[1].line, e.0[1].col), (2, 9));
        let e = check("name = \"ééé\"\ncount = 0\n").unwrap_err();
        assert_eq!((e.0[0].line, e.0[0].col), (2, 9));
    }

    #[test]
    fn read_gives_text_name_and_directory_or_a_clear_error() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("plan.toml");
        std::fs::write(&p, "name = \"a\"\n").unwrap();
        let f = read(&p, 1024).unwrap();
        assert_eq!(f.text, "name = \"a\"\n");
        assert_eq!(f.name, p.display().to_string());
        assert_eq!(f.base_dir, d.path());
        let e = read(&p, 4).unwrap_err();
        assert!(e.contains(&p.display().to_string()), "{e}");
        let e = read(&d.path().join("missing.toml"), 1024).unwrap_err();
        assert!(e.contains("missing.toml"), "{e}");
        std::fs::write(&p, [0xff, 0xfe]).unwrap();
        assert!(read(&p, 1024).is_err());
    }
}
