//! The terminal side of a bench run: an indicatif progress bar on stderr
//! (cells done of all, the current cell, ETA) when stderr is a terminal;
//! otherwise one plain line per finished cell on stderr, for logs. Both
//! are status, not results (the table goes to stdout): none with `-q`.

use super::run::BenchEvent;
use super::store::CellStatus;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::Write;
use std::time::Duration;

/// Shows [`BenchEvent`]s.
pub struct Progress {
    bar: ProgressBar,
    todo: u64,
    done_before: usize,
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress {
    pub fn new() -> Progress {
        let target = if crate::output::quiet() {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        };
        let bar = ProgressBar::with_draw_target(Some(0), target);
        if let Ok(style) = ProgressStyle::with_template(
            "{bar:30.cyan/blue} {pos}/{len} cells  {elapsed} elapsed, ETA {eta}  {msg}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        Progress {
            bar,
            todo: 0,
            done_before: 0,
        }
    }

    fn line(&self, text: &str) {
        if self.bar.is_hidden() {
            if !crate::output::quiet() {
                let _ = std::io::stderr()
                    .lock()
                    .write_all(format!("{text}\n").as_bytes());
            }
        } else {
            self.bar.println(text);
        }
    }

    /// Show one event.
    pub fn event(&mut self, ev: &BenchEvent<'_>) {
        match ev {
            BenchEvent::Start {
                total,
                done,
                estimate_s,
            } => {
                self.todo = (total - done) as u64;
                self.done_before = *done;
                self.bar.set_length(self.todo);
                let resumed = if *done > 0 {
                    format!(", {done} already done (resumed)")
                } else {
                    String::new()
                };
                let to_go = if *done >= *total {
                    "nothing left to run".to_string()
                } else {
                    // Never "-0 s": an estimate rounds to at least 1 s.
                    format!("about {:.0} s of guest run time to go", estimate_s.max(1.0))
                };
                self.line(&format!("pacer bench: {total} cells{resumed}; {to_go}"));
                self.bar.enable_steady_tick(Duration::from_millis(250));
            }
            BenchEvent::CellStart { id, .. } => self.bar.set_message(id.to_string()),
            BenchEvent::CellDone(r) => {
                self.bar.inc(1);
                let n = self.bar.position();
                let what = match r.status {
                    CellStatus::Ok => format!("ok ({:.1} s)", r.wall_s()),
                    s => format!("{}: {}", s.as_str(), r.error.lines().next().unwrap_or("")),
                };
                self.line(&format!("[{n}/{}] {}: {what}", self.todo, r.id));
            }
            BenchEvent::Stopping(why) => self.line(&format!(
                "pacer bench: {why} received, stopping after recording the finished cells"
            )),
            BenchEvent::Note(text) => self.line(&format!("pacer bench: {text}")),
        }
    }

    /// Remove the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
