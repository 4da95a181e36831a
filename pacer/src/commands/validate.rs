//! `pacer validate FILE`: a config file checked as `pacer run` would
//! check it, with the same overrides, starting nothing.

use crate::output::{out, EXIT_BAD_INPUT, EXIT_OK};
use std::path::{Path, PathBuf};
use vmm::config::{Config, Overrides};
use vmm::policy::PolicyChoice;

/// The closing text of `pacer validate --help`.
pub const HELP: &str = "Examples:
  pacer validate configs/demo.toml
  pacer validate configs/demo.toml --policy pinned    would pinned honour it?

Prints the config as resolved on stdout; every error is one line,
file:line:col: field.path: what was expected, what was found.

Exit codes:
  0  the config is valid
  2  it is not (every problem is listed)";

/// Arguments of `pacer validate`.
#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// The config file (TOML; see docs/config-reference.md).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Check against this policy (and mode) instead of the file's.
    #[arg(long, value_name = "POLICY[:MODE]")]
    pub policy: Option<PolicyChoice>,
    /// Check with this Haiku mode instead of the file's.
    #[arg(long, value_name = "MODE", value_parser = vmm::suggest::mode)]
    pub mode: Option<vcpu_sched::Mode>,
    /// Check with this dispatch mechanism instead of the file's.
    #[arg(long, value_name = "DISPATCH", value_parser = vmm::suggest::dispatch)]
    pub dispatch: Option<vcpu_engine::DispatchKind>,
    /// Check this log directory instead of the file's `log_dir`.
    #[arg(long, value_name = "DIR")]
    pub log_dir: Option<PathBuf>,
}

/// Run `pacer validate`; returns the process exit code.
pub fn main(args: &ValidateArgs) -> i32 {
    match load_config(
        &args.file,
        args.policy,
        args.mode,
        args.dispatch,
        args.log_dir.as_deref(),
    ) {
        Ok(c) => {
            out(&format!("{}: OK\n{c}", args.file.display()));
            EXIT_OK
        }
        Err(e) => {
            eprintln!("{e}");
            EXIT_BAD_INPUT
        }
    }
}

/// Load `file` with the command line's choices: `--policy P[:MODE]`,
/// `--mode`, `--dispatch` and `--log-dir` override the file's (merged into
/// it as it is checked); an error is one line.
pub fn load_config(
    file: &Path,
    policy: Option<PolicyChoice>,
    mode: Option<vcpu_sched::Mode>,
    dispatch: Option<vcpu_engine::DispatchKind>,
    log_dir: Option<&Path>,
) -> Result<Config, String> {
    let overrides = Overrides {
        policy: policy.map(|c| c.policy),
        mode: policy.and_then(|c| c.mode).or(mode),
        dispatch,
        log_dir: log_dir.map(Path::to_path_buf),
    };
    let mut config = Config::load_overridden(file, &overrides).map_err(|e| e.to_string())?;
    // What the run will use, so that every document says so.
    if let Some(warning) = config.fall_back_from_ranked() {
        log::warn!("{warning}");
    }
    Ok(config)
}
