//! What a refused config reports: one [`Diagnostic`] per problem, at its
//! line and column with its field path, and the [`ConfigError`] that
//! prints them one line each (`file:line:col: field: message`).

use crate::text::one_line;
use std::path::{Path, PathBuf};

/// One problem found in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub line: usize,
    pub column: usize,
    /// Dotted path of the field, e.g. `vm[1].cpus` (empty for syntax errors).
    pub field: String,
    pub message: String,
}

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {source}", one_line(&.path.display().to_string()))]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}", format_diagnostics(.path, .diagnostics))]
    Invalid {
        path: PathBuf,
        diagnostics: Vec<Diagnostic>,
    },
    #[error("cannot read the host's online CPUs ({path}): {reason}")]
    HostCpus {
        path: PathBuf,
        reason: vcpu_engine::host_cpus::OnlineCpusError,
    },
    /// `--mode` (or `--policy P:MODE`) under a policy that has no modes.
    #[error("{}: --mode {mode}: policy \"{policy}\" has no mode (the host kernel schedules its threads)", .path.display())]
    ModeWithoutModes {
        path: PathBuf,
        mode: vcpu_sched::Mode,
        policy: crate::policy::Policy,
    },
    /// `--log-dir DIR` that cannot be created or written.
    #[error("--log-dir {}: expected a directory Pacer can create and write, but {why}", .dir.display())]
    LogDirOverride {
        dir: PathBuf,
        why: crate::input::WriteCheckError,
    },
}

fn format_diagnostics(path: &Path, diags: &[Diagnostic]) -> String {
    // One line per diagnostic, whatever the file name or the values hold.
    let file = one_line(&path.display().to_string());
    diags
        .iter()
        .map(|d| {
            let (field, message) = (one_line(&d.field), one_line(&d.message));
            if field.is_empty() {
                format!("{file}:{}:{}: {message}", d.line, d.column)
            } else {
                format!("{file}:{}:{}: {field}: {message}", d.line, d.column)
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Line and column (1-based) of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rfind('\n')
        .map(|i| before[i + 1..].chars().count())
        .unwrap_or_else(|| before.chars().count())
        + 1;
    (line, col)
}
