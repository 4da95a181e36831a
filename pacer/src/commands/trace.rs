//! `pacer trace`: reading a scheduling trace recorded with
//! `pacer run --trace FILE` (or a bench matrix's `trace = true`).
//!
//! ```text
//! pacer trace summary FILE [--json OUT]      per-path latency breakdown (p50/p99)
//! pacer trace export FILE --out OUT.json     Chrome/Perfetto trace event JSON
//! pacer trace plot FILE --out OUT.png|svg [--from MS --to MS]   the timeline
//! pacer trace dump FILE [--from MS --to MS]  every event as a line of text
//! ```
//! Exit codes: 0 ok, 2 bad input (a file that is not a readable trace),
//! 1 an output that cannot be written.

use crate::output::{out, EXIT_BAD_INPUT, EXIT_OK, EXIT_VM_FAILED};
use crate::trace::read::TraceFile;
use std::path::{Path, PathBuf};

/// The closing text of `pacer trace --help`.
pub const HELP: &str = "Examples:
  pacer run configs/demo.toml --trace /tmp/demo.trace
  pacer trace summary /tmp/demo.trace
  pacer trace export /tmp/demo.trace --out /tmp/demo.json     open in ui.perfetto.dev
  pacer trace plot /tmp/demo.trace --out /tmp/demo.png --from 100 --to 120
  pacer sim --replay /tmp/demo.trace --compare

Exit codes:
  0  done
  1  an output cannot be written
  2  bad input: a file that is not a readable trace, a bad window, an
     output that cannot be created";

/// Arguments of `pacer trace`.
#[derive(Debug, clap::Args)]
pub struct TraceArgs {
    #[command(subcommand)]
    pub command: TraceCommand,
}

/// A window of a trace, in ms from its first event.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct Window {
    /// Start of the window, ms after the trace's first event.
    #[arg(long, value_name = "MS")]
    pub from: Option<f64>,
    /// End of the window, ms after the trace's first event.
    #[arg(long, value_name = "MS")]
    pub to: Option<f64>,
}

impl Window {
    /// The window as absolute ns on the trace's clock.
    pub fn bounds(&self, trace: &TraceFile) -> Result<(u64, u64), String> {
        let (first, last) = trace.span();
        let at = |ms: f64, flag: &str| {
            if !ms.is_finite() || ms < 0.0 {
                return Err(format!("--{flag}: expected milliseconds >= 0, found {ms}"));
            }
            Ok(first.saturating_add((ms * 1e6) as u64))
        };
        let from = self
            .from
            .map(|m| at(m, "from"))
            .transpose()?
            .unwrap_or(first);
        let to = self.to.map(|m| at(m, "to")).transpose()?.unwrap_or(last);
        if to <= from && last > first {
            return Err("--to must be after --from".into());
        }
        Ok((from, to.max(from)))
    }
}

/// The exit codes every `pacer trace` command shares.
macro_rules! trace_exit_codes {
    () => {
        "

Exit codes:
  0  done
  1  an output cannot be written
  2  bad input: a file that is not a readable trace, a bad window, an
     output that cannot be created"
    };
}

#[derive(Debug, clap::Subcommand)]
pub enum TraceCommand {
    /// Per-path latency breakdown: for each kind of wake (timer, IPI,
    /// device line) and for interrupts to running vCPUs, every step from
    /// the cause to the guest's handler, p50 and p99; IPI round trips.
    #[command(after_help = concat!(
        "Examples:
  pacer trace summary /tmp/demo.trace
  pacer trace summary /tmp/demo.trace --json /tmp/demo-summary.json",
        trace_exit_codes!()
    ))]
    Summary {
        /// The trace (`pacer run --trace FILE`).
        #[arg(value_name = "TRACE")]
        file: PathBuf,
        /// Also write the summary as JSON into FILE.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
    /// Write the trace as Chrome/Perfetto trace event JSON (open it in
    /// ui.perfetto.dev or chrome://tracing).
    #[command(after_help = concat!(
        "Examples:
  pacer trace export /tmp/demo.trace --out /tmp/demo.json     then open it in ui.perfetto.dev",
        trace_exit_codes!()
    ))]
    Export {
        /// The trace (`pacer run --trace FILE`).
        #[arg(value_name = "TRACE")]
        file: PathBuf,
        /// Write the trace event JSON into FILE.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Draw the timeline (one lane per host CPU, a colour per vCPU, wakes
    /// and preemptions marked; one lane per vCPU: running and waiting) as
    /// PNG or SVG, by the extension of --out. Without --from/--to a trace
    /// too long to read whole is drawn over its busiest window (said).
    #[command(after_help = concat!(
        "Examples:
  pacer trace plot /tmp/demo.trace --out /tmp/demo.png
  pacer trace plot /tmp/demo.trace --out /tmp/demo.svg --from 100 --to 120   20 ms of it",
        trace_exit_codes!()
    ))]
    Plot {
        /// The trace (`pacer run --trace FILE`).
        #[arg(value_name = "TRACE")]
        file: PathBuf,
        /// Write the picture into FILE (.png or .svg).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        #[command(flatten)]
        window: Window,
    },
    /// Print every event as a line of text.
    #[command(after_help = concat!(
        "Examples:
  pacer trace dump /tmp/demo.trace --from 100 --to 101 | less",
        trace_exit_codes!()
    ))]
    Dump {
        /// The trace (`pacer run --trace FILE`).
        #[arg(value_name = "TRACE")]
        file: PathBuf,
        #[command(flatten)]
        window: Window,
    },
}

/// Read a trace for a command (`pacer trace ...`, `pacer sim --replay`):
/// the one reader ([`TraceFile::read`]); a file that cannot be read is one
/// line naming it once (exit 2), and a file that reads with a note (format
/// version 1, a tail cut short, no END frame) says so on stderr.
pub(crate) fn load(path: &Path) -> Result<TraceFile, i32> {
    match TraceFile::read(path) {
        Ok(t) => {
            for note in t.notes() {
                eprintln!("{}: note: {note}", path.display());
            }
            Ok(t)
        }
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            Err(EXIT_BAD_INPUT)
        }
    }
}

/// Run `pacer trace`; returns the exit code.
pub fn main(args: TraceArgs) -> i32 {
    match run(args) {
        Ok(()) => EXIT_OK,
        Err(code) => code,
    }
}

fn run(args: TraceArgs) -> Result<(), i32> {
    match args.command {
        TraceCommand::Dump { file, window } => {
            let trace = load(&file)?;
            let (from, to) = window.bounds(&trace).map_err(bad)?;
            let text = crate::trace::describe::dump(&trace, from, to);
            out(&text);
            // What was found, on stderr (stdout stays the events alone).
            eprintln!("{}", found_line(&trace, from, to, text.lines().count()));
            Ok(())
        }
        TraceCommand::Summary { file, json } => {
            if let Some(path) = &json {
                writable("--json", path)?;
            }
            let trace = load(&file)?;
            let s = crate::trace::summary::Summary::of(&trace);
            out(&s.to_text(&trace));
            if let Some(path) = json {
                write(&path, &s.to_json_text())?;
                out(&format!(
                    "pacer: summary (pacer-trace-summary) written to {}\n",
                    path.display()
                ));
            }
            Ok(())
        }
        TraceCommand::Export { file, out: path } => {
            writable("--out", &path)?;
            let trace = load(&file)?;
            let text = crate::trace::export::perfetto_json(&trace);
            write(&path, &text)?;
            let (first, last) = trace.span();
            out(&format!(
                "pacer: {} events over {} written to {} as Chrome trace event JSON ({} bytes); open it in ui.perfetto.dev or chrome://tracing\n",
                trace.events.len(),
                crate::trace::summary::us(last - first),
                path.display(),
                text.len()
            ));
            Ok(())
        }
        TraceCommand::Plot {
            file,
            out: path,
            window,
        } => {
            writable("--out", &path)?;
            let trace = load(&file)?;
            let busiest = match (window.from, window.to) {
                (None, None) => crate::trace::plot::busiest_window(&trace),
                _ => None,
            };
            let (from, to) = match busiest {
                Some(w) => w,
                None => window.bounds(&trace).map_err(bad)?,
            };
            crate::trace::plot::draw(&trace, from, to, busiest.is_some(), &path).map_err(|e| {
                eprintln!("pacer trace plot: {e}");
                EXIT_VM_FAILED
            })?;
            let (first, last) = trace.span();
            let ms = |ns: u64| ns.saturating_sub(first) as f64 / 1e6;
            let what = if busiest.is_some() {
                format!(
                    "the busiest {:.1} ms of the trace's {:.1} ms ({:.1}-{:.1} ms; --from/--to draw another window, --from 0 the whole trace)",
                    ms(to) - ms(from),
                    ms(last),
                    ms(from),
                    ms(to)
                )
            } else {
                format!(
                    "{:.1}-{:.1} ms of the trace's {:.1} ms",
                    ms(from),
                    ms(to),
                    ms(last)
                )
            };
            out(&format!(
                "pacer: timeline of {what} written to {}\n",
                path.display()
            ));
            Ok(())
        }
    }
}

/// What `dump` found in the window `from..=to` (ns on the trace's clock).
fn found_line(trace: &TraceFile, from: u64, to: u64, events: usize) -> String {
    let (first, last) = trace.span();
    let ms = |ns: u64| ns.saturating_sub(first) as f64 / 1e6;
    let window = format!("{:.3}-{:.3} ms", ms(from), ms(to));
    if events == 0 {
        format!(
            "pacer: no events in {window}; the trace has {} events over 0.000-{:.3} ms",
            trace.events.len(),
            ms(last)
        )
    } else {
        format!("pacer: {events} events in {window}")
    }
}

/// Before the trace is read: an output that cannot be written is bad
/// input.
fn writable(flag: &str, path: &Path) -> Result<(), i32> {
    vmm::input::check_output_file(path).map_err(|why| bad(format!("{flag}: {why}")))
}

fn bad(msg: String) -> i32 {
    eprintln!("pacer trace: {msg}");
    EXIT_BAD_INPUT
}

fn write(path: &Path, text: &str) -> Result<(), i32> {
    vmm::whole_file::write(path, text).map_err(|e| {
        eprintln!("pacer trace: cannot write {}: {e}", path.display());
        EXIT_VM_FAILED
    })
}
