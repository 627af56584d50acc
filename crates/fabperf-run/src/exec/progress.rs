//! What a run shows while it goes: a progress bar on a terminal, plain log
//! lines otherwise, or only warnings; foreign text made terminal-safe.

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// A progress bar on a terminal, plain lines otherwise.
    Auto,
    /// Plain log lines.
    Plain,
    /// Only warnings and the summary.
    Quiet,
}

/// Text that came from agents or a store, made safe for a terminal: control
/// and bidirectional characters (escape sequences, newlines) are shown
/// escaped (fabperf-results' one escaping rule).
pub fn printable(s: &str) -> String {
    fabperf_results::escape::terminal(s)
}

/// As [`printable`], keeping line breaks (a rendered block whose pieces of
/// foreign text were escaped one by one).
pub fn printable_block(s: &str) -> String {
    fabperf_results::escape::terminal_block(s)
}

pub(super) struct Progress {
    pub(super) mode: ProgressMode,
    pub(super) bar: Option<indicatif::ProgressBar>,
    pub(super) total: usize,
    pub(super) done: usize,
}

impl Progress {
    pub(super) fn new(mode: ProgressMode, total: usize, done: usize) -> Progress {
        use std::io::IsTerminal;
        let bar = if mode == ProgressMode::Auto && std::io::stderr().is_terminal() {
            let b = indicatif::ProgressBar::new(total as u64);
            b.set_position(done as u64);
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} cells, ETA {msg}",
            ) {
                b.set_style(style.progress_chars("=> "));
            }
            Some(b)
        } else {
            None
        };
        Progress {
            mode,
            bar,
            total,
            done,
        }
    }

    pub(super) fn line(&self, s: &str) {
        let s = printable(s);
        match &self.bar {
            Some(b) => b.println(s),
            None if self.mode != ProgressMode::Quiet => eprintln!("{s}"),
            None => {}
        }
    }

    pub(super) fn warn(&self, s: &str) {
        let s = printable(s);
        match &self.bar {
            Some(b) => b.println(format!("warning: {s}")),
            None => eprintln!("fabperf run: warning: {s}"),
        }
    }

    pub(super) fn running(&self, what: &str, eta: Option<f64>) {
        let what = printable(what);
        let eta = eta.map(fmt_secs).unwrap_or_else(|| "?".into());
        match &self.bar {
            Some(b) => b.set_message(format!("{eta} | {what}")),
            None if self.mode == ProgressMode::Plain || self.mode == ProgressMode::Auto => {
                eprintln!(
                    "fabperf run: [{}/{}] running {what} (ETA {eta})",
                    self.done, self.total
                )
            }
            None => {}
        }
    }

    pub(super) fn finished(&mut self, n: usize) {
        self.done += n;
        if let Some(b) = &self.bar {
            b.set_position(self.done as u64);
        }
    }

    pub(super) fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

fn fmt_secs(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}
