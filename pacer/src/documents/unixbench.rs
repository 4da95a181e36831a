//! `pacer-unixbench` (`pacer unixbench --json`): the scored runs of the
//! UnixBench-style suite, one section per copy count, each beside the
//! host reference of the same copy count when one was given. A test's
//! `score` is in its own `unit` (lps, KBps, MWIPS, lpm: UnixBench's);
//! indexes are UnixBench's (score / baseline x 10, geometric means).

use crate::unixbench::report::Section;
use crate::unixbench::score::{Row, Summary};
use serde::Serialize;
use std::path::PathBuf;
use vmm::documents::{Header, UNIXBENCH};

/// One scored run (one copy count).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunDoc {
    pub copies: u32,
    /// The CPUs the suite saw; null when the log does not say.
    pub cpus: Option<u32>,
    /// One test of a run, as the table has it (`unixbench::score::Row`).
    pub tests: Vec<Row>,
    /// Geometric mean of the tests' indexes; null without any.
    pub index: Option<f64>,
    pub tests_scored: usize,
    /// All twelve tests scored.
    pub full: bool,
    /// The run's end line was seen.
    pub complete: bool,
}

fn run(s: &Summary) -> RunDoc {
    RunDoc {
        copies: s.copies,
        cpus: (s.cpus > 0).then_some(s.cpus),
        tests: s.rows.clone(),
        index: s.index,
        tests_scored: s.tests_scored,
        full: s.full,
        complete: s.complete,
    }
}

/// A copy count: the run and its reference.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SectionDoc {
    pub copies: u32,
    pub result: RunDoc,
    pub reference: Option<RunDoc>,
}

/// The whole document.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UnixbenchDocument {
    #[serde(flatten)]
    pub header: Header,
    /// What was measured: `host` (`--host`) or `guest` (`--report`).
    pub side: String,
    /// `--report`: the console log scored; null for `--host`.
    pub log: Option<PathBuf>,
    /// `--host-ref`: the host run compared with.
    pub host_ref: Option<PathBuf>,
    pub sections: Vec<SectionDoc>,
}

impl UnixbenchDocument {
    pub fn new(
        side: &str,
        log: Option<PathBuf>,
        host_ref: Option<PathBuf>,
        sections: &[Section],
    ) -> UnixbenchDocument {
        UnixbenchDocument {
            header: Header::new(UNIXBENCH),
            side: side.to_string(),
            log,
            host_ref,
            sections: sections
                .iter()
                .map(|s| SectionDoc {
                    copies: s.copies,
                    result: run(&s.result),
                    reference: s.reference.as_ref().map(run),
                })
                .collect(),
        }
    }
}
