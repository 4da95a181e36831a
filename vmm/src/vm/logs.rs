//! A VM's files in the run's log directory: `<vm>.console.log` (COM1, if
//! the console goes to a log), `<vm>.results.jsonl` (the results log), and
//! for a Linux guest `<vm>.user.log`, its user command's output cut from
//! the console log when the VM stops. Every file is created with the VM:
//! the controller thread that fills the user log at the end may only open
//! files read-only once confined (seccomp).

use super::{Vm, VmError, VmSpec};
use crate::boot::GuestKind;
use std::path::{Path, PathBuf};

/// The files of one VM (all None without a log directory).
pub(super) struct LogFiles {
    /// Where the results log goes.
    pub results: Option<PathBuf>,
    /// The console log, open for writing.
    pub console: Option<(PathBuf, std::fs::File)>,
    /// A Linux guest's user command output (only with a console log).
    pub user_log: Option<(PathBuf, std::fs::File)>,
}

impl LogFiles {
    /// Create `log_dir` and the VM's console and user logs in it.
    pub(super) fn open(log_dir: Option<&Path>, spec: &VmSpec) -> Result<LogFiles, VmError> {
        let Some(dir) = log_dir else {
            return Ok(LogFiles {
                results: None,
                console: None,
                user_log: None,
            });
        };
        std::fs::create_dir_all(dir).map_err(|source| VmError::File {
            path: dir.to_path_buf(),
            source,
        })?;
        let console = if spec.console.log {
            Some(open_log(dir, format!("{}.console.log", spec.name))?)
        } else {
            None
        };
        let user_log = match (&console, spec.boot.guest) {
            (Some(_), GuestKind::Linux) => Some(open_log(dir, format!("{}.user.log", spec.name))?),
            _ => None,
        };
        Ok(LogFiles {
            results: Some(dir.join(format!("{}.results.jsonl", spec.name))),
            console,
            user_log,
        })
    }
}

fn open_log(dir: &Path, file: String) -> Result<(PathBuf, std::fs::File), VmError> {
    let path = dir.join(file);
    let f = std::fs::File::create(&path).map_err(|source| VmError::File {
        path: path.clone(),
        source,
    })?;
    Ok((path, f))
}

impl Vm {
    /// A Linux guest's user command output, cut from its console log with
    /// the UnixBench-style suite's parser, into `<log_dir>/<vm>.user.log`
    /// (None: not a Linux guest, no console log, no user command).
    pub(super) fn write_user_log(&self) -> Result<Option<PathBuf>, UserLogWriteError> {
        let (Some(console), Some((path, file))) =
            (self.console_log.as_ref(), self.user_log.as_ref())
        else {
            return Ok(None);
        };
        match save_user_output(console, file) {
            Ok(true) => Ok(Some(path.clone())),
            Ok(false) => Ok(None),
            Err(UserLogError::Read(e)) => {
                log::warn!("[{}] user command output: {e}", self.spec.name);
                Ok(None)
            }
            Err(UserLogError::Write(source)) => Err(UserLogWriteError {
                path: path.clone(),
                source,
            }),
        }
    }
}

/// The user log could not be written: the VM's run fails for it.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {}: {source}", .path.display())]
pub(super) struct UserLogWriteError {
    path: PathBuf,
    source: std::io::Error,
}

/// Why the user log was not written.
#[derive(Debug)]
enum UserLogError {
    /// The console log could not be read.
    Read(std::io::Error),
    /// The user log could not be written (a failed run).
    Write(std::io::Error),
}

impl std::fmt::Display for UserLogError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UserLogError::Read(e) | UserLogError::Write(e) => e.fmt(f),
        }
    }
}

/// Cut the user command's output (between `UB user begin` and `UB user
/// end`, or to the end if the guest stopped mid-command) out of a console
/// log into `out`. Ok(false): the log has no user command.
fn save_user_output(console: &Path, mut out: &std::fs::File) -> Result<bool, UserLogError> {
    use std::io::Write;
    let text =
        crate::input::read_regular_file(console, crate::input::MAX_LOG_BYTES, "a console log")
            .map_err(UserLogError::Read)?;
    match crate::unixbench::parse_log(&String::from_utf8_lossy(&text)).user_output {
        Some(user) => out
            .write_all(user.as_bytes())
            .map(|()| true)
            .map_err(UserLogError::Write),
        None => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_output_cut_from_the_console_log() {
        let dir = std::env::temp_dir().join(format!("pacer-userlog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let console = dir.join("deb.console.log");
        let out = dir.join("deb.user.log");
        std::fs::write(
            &console,
            "[    1.0] Linux version 6.1\r\nUB init kernel=6.1 cpus=2 mem_kib=1 suite=x\r\n\
             UB user begin\r\nhello from /user\r\nline 2\r\nUB user end status=0\r\nUB done end=reboot\r\n",
        )
        .unwrap();
        let file = || std::fs::File::create(&out).unwrap();
        assert!(save_user_output(&console, &file()).unwrap());
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "hello from /user\nline 2\n"
        );
        std::fs::write(&console, "UB done end=reboot\n").unwrap();
        assert!(!save_user_output(&console, &file()).unwrap());
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "");
        assert!(save_user_output(&dir.join("missing"), &file()).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
