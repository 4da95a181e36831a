//! One directory per run, so that no run overwrites another's results.
//!
//! `pacer run` writes its consoles, results and snapshots into
//! `<log_dir>/run-<UTC date>-<time>-<n>/` (n counts runs started in the
//! same second), created with `mkdir` so two runs at once can never share
//! one, and points the symbolic link `<log_dir>/latest` at it (replaced
//! atomically by a rename; a `latest` that is not a symbolic link is left
//! alone). Nothing is ever deleted.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Runs started in the same second get `-1`, `-2`, ... up to this many.
const MAX_SAME_SECOND: u32 = 10_000;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    #[error("cannot create log directory {path}: {source}")]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot find a free run directory name in {0}")]
    Exhausted(PathBuf),
}

/// `YYYYmmdd-HHMMSS` (UTC) of `secs` since the Unix epoch.
pub fn utc_stamp(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Create a fresh run directory under `log_dir` (creating `log_dir` too)
/// and point `<log_dir>/latest` at it.
pub fn create(log_dir: &Path) -> Result<PathBuf, RunDirError> {
    std::fs::create_dir_all(log_dir).map_err(|source| RunDirError::Create {
        path: log_dir.to_path_buf(),
        source,
    })?;
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let stamp = utc_stamp(secs);
    for n in 1..=MAX_SAME_SECOND {
        let name = format!("run-{stamp}-{n}");
        let dir = log_dir.join(&name);
        match std::fs::create_dir(&dir) {
            Ok(()) => {
                point_latest(log_dir, &name);
                return Ok(dir);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(source) => return Err(RunDirError::Create { path: dir, source }),
        }
    }
    Err(RunDirError::Exhausted(log_dir.to_path_buf()))
}

/// Keep what a run was started with in its directory: `config.toml`, a
/// copy of the config file (when the config came from one), and
/// `config.resolved.toml`, the config as the run used it (defaults filled
/// in, paths resolved, the policy after `--policy`; the same view the
/// `pacer-run` document carries), which runs again as it is. A file that
/// cannot be written is a warning: the run itself does not depend on it.
pub fn keep_config(dir: &Path, config: &crate::config::Config) {
    let warn = |what: &str, e: &dyn std::fmt::Display| {
        log::warn!("cannot keep {what} in {}: {e}", dir.display());
    };
    if config.path.is_file() {
        // The file as it is now, read as the config was (bounded, regular).
        let copied = crate::input::read_config_text(&config.path, "a config")
            .and_then(|text| crate::whole_file::write(&dir.join("config.toml"), text));
        if let Err(e) = copied {
            warn("config.toml", &e);
        }
    }
    let view = crate::config::view::ConfigView::of(config);
    match view.to_toml() {
        Ok(text) => {
            let from = view
                .file
                .as_ref()
                .map(|f| format!("# Read from {}.\n", f.display()))
                .unwrap_or_default();
            let text = format!(
                "# The config as this run used it (written by pacer {}); `pacer run` reads it as it is.\n{from}{text}",
                crate::documents::version_line()
            );
            if let Err(e) = crate::whole_file::write(&dir.join("config.resolved.toml"), text) {
                warn("config.resolved.toml", &e);
            }
        }
        Err(e) => warn("config.resolved.toml", &e),
    }
}

/// Point `<log_dir>/latest` at `name` (relative, so the tree can move).
fn point_latest(log_dir: &Path, name: &str) {
    let latest = log_dir.join("latest");
    if let Ok(m) = std::fs::symlink_metadata(&latest) {
        if !m.file_type().is_symlink() {
            log::warn!(
                "{} is not a symbolic link; not pointing it at this run",
                latest.display()
            );
            return;
        }
    }
    let tmp = log_dir.join(format!(".latest-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let linked =
        std::os::unix::fs::symlink(name, &tmp).and_then(|()| std::fs::rename(&tmp, &latest));
    if let Err(e) = linked {
        let _ = std::fs::remove_file(&tmp);
        log::warn!("cannot point {} at {name}: {e}", latest.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps() {
        assert_eq!(utc_stamp(0), "19700101-000000");
        assert_eq!(utc_stamp(951_782_400), "20000229-000000");
        assert_eq!(utc_stamp(1_798_761_599), "20261231-235959");
    }

    #[test]
    fn runs_never_share_a_directory() {
        let log = std::env::temp_dir().join(format!("pacer-rundir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&log);
        let a = create(&log).unwrap();
        let b = create(&log).unwrap();
        assert_ne!(a, b);
        assert!(a.is_dir() && b.is_dir());
        let latest = std::fs::read_link(log.join("latest")).unwrap();
        assert_eq!(log.join(latest), b);
        // A `latest` that is a real directory is left alone.
        std::fs::remove_file(log.join("latest")).unwrap();
        std::fs::create_dir(log.join("latest")).unwrap();
        let c = create(&log).unwrap();
        assert!(c.is_dir());
        assert!(log.join("latest").is_dir());
        assert!(std::fs::symlink_metadata(log.join("latest"))
            .unwrap()
            .is_dir());
        std::fs::remove_dir_all(&log).unwrap();
    }
}
