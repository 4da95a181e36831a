//! What every command shares: results on stdout (a closed pipe is no
//! error), status lines on stderr (silenced by `-q`), and the process exit
//! codes.

use std::sync::atomic::{AtomicBool, Ordering};

pub const EXIT_OK: i32 = 0;
pub const EXIT_VM_FAILED: i32 = 1;
pub const EXIT_BAD_INPUT: i32 = 2;
/// A result or log could not be written (full disk, file-size limit): the
/// run's results are incomplete whatever the VMs did.
pub const EXIT_WRITE_FAILED: i32 = 3;
/// With `--exit-status-from-guest`: the VM stopped without a guest status.
pub const EXIT_NO_GUEST_STATUS: i32 = 2;

/// The exit codes, as every `--help` states them.
pub const EXIT_CODES: &str = "\
Exit codes:
  0  success: every VM succeeded (bench: every cell ok or n/a)
  1  a VM (or a bench cell) failed or timed out, or the run was stopped
  2  bad input: a config, matrix or argument error; nothing was started
  3  a result or log could not be written (full disk): the results are incomplete";

/// Whether `-q` asked for no status lines.
static QUIET: AtomicBool = AtomicBool::new(false);

/// Silence (or not) the status lines of [`status`].
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether status lines are silenced (`-q`).
pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// A status line on stderr (progress, where files went), unless `-q`.
pub fn status(text: &str) {
    if !quiet() {
        use std::io::Write;
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }
}

/// The warning for a deprecated flag: it still works, under its old
/// meaning, and says what replaced it (one meaning per flag name: see
/// README's "Flags").
pub fn deprecated(old: &str, new: &str) {
    eprintln!("pacer: warning: {old} is deprecated; use {new}");
}

/// Write to stdout, ignoring errors (a closed pipe must not turn into a
/// panic or a lost run; results are in the files anyway).
pub fn out(text: &str) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}
