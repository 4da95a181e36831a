//! Checks of the files and directories a run will touch, made before
//! anything starts (exit 2, nothing started) instead of failing after the
//! VMs ran:
//!
//! - the config file is read only if it is a regular file of at most
//!   [`MAX_CONFIG_BYTES`] (a FIFO would block `pacer validate` for ever,
//!   `/dev/zero` would be read until memory runs out); it is opened
//!   non-blocking and checked again on the open descriptor, so a file
//!   swapped for a FIFO between the two checks cannot block either;
//! - a log directory must be creatable and writable: its nearest existing
//!   ancestor must be a directory this process may write into;
//! - the `--json` (and `--trace`) output must not be a directory and its
//!   directory must be writable (or creatable);
//! - any other file read from a user goes through the same regular-file,
//!   capped read (`crate::input`).
//!
//! Nothing here creates or changes a file.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Largest config file read (a config of hundreds of VMs is a few tens of
/// KiB).
pub const MAX_CONFIG_BYTES: u64 = crate::input::MAX_CONFIG_BYTES;

use crate::input::kind_of;
pub use crate::input::read_regular_file;

/// Read a config file: a regular file of at most [`MAX_CONFIG_BYTES`], as
/// UTF-8.
pub fn read_config_file(path: &Path) -> std::io::Result<String> {
    let bytes = read_regular_file(path, MAX_CONFIG_BYTES, "a config file")?;
    String::from_utf8(bytes).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

/// Whether this process may write into directory `dir` (access(2), which
/// also reports a read-only file system).
fn writable_dir(dir: &Path) -> Result<(), String> {
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| "the path contains a NUL byte".to_string())?;
    // SAFETY: access reads a NUL-terminated string that outlives the call.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } == 0 {
        Ok(())
    } else {
        Err(format!(
            "{} is not writable: {}",
            dir.display(),
            std::io::Error::last_os_error()
        ))
    }
}

/// The nearest ancestor of `p` (or `p` itself) that exists.
fn existing_ancestor(p: &Path) -> Option<(PathBuf, std::fs::Metadata)> {
    let mut cur = Some(p);
    while let Some(c) = cur {
        let probe = if c.as_os_str().is_empty() {
            Path::new(".")
        } else {
            c
        };
        if let Ok(m) = std::fs::metadata(probe) {
            return Some((probe.to_path_buf(), m));
        }
        cur = c.parent();
    }
    None
}

/// Can directory `dir` be created (if missing) and written?
pub fn check_dir_writable(dir: &Path) -> Result<(), String> {
    let Some((at, meta)) = existing_ancestor(dir) else {
        return Err(format!("no part of {} exists", dir.display()));
    };
    if !meta.is_dir() {
        return Err(if at == dir {
            format!(
                "{} exists and is {}, not a directory",
                dir.display(),
                kind_of(meta.file_type())
            )
        } else {
            format!(
                "cannot be created: {} is {}, not a directory",
                at.display(),
                kind_of(meta.file_type())
            )
        });
    }
    writable_dir(&at)
}

/// Can the JSON results be written to `path` (a file to create or replace)?
pub fn check_output_file(path: &Path) -> Result<(), String> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => return Err(format!("{} is a directory", path.display())),
        Ok(m) if !m.is_file() => {
            return Err(format!("{} is {}", path.display(), kind_of(m.file_type())))
        }
        _ => {}
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    check_dir_writable(parent).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    if path.exists() {
        let c = std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|_| "the path contains a NUL byte".to_string())?;
        // SAFETY: access reads a NUL-terminated string that outlives the call.
        if unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
            return Err(format!(
                "{} is not writable: {}",
                path.display(),
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pacer-preflight-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn config_file_must_be_regular_and_small() {
        let d = tmp("cfg");
        let f = d.join("a.toml");
        std::fs::write(&f, "x = 1\n").unwrap();
        assert_eq!(read_config_file(&f).unwrap(), "x = 1\n");
        let e = read_config_file(&d).unwrap_err().to_string();
        assert!(e.contains("a directory"), "{e}");
        let fifo = d.join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo reads a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_config_file(&fifo).unwrap_err().to_string();
        assert!(e.contains("a FIFO"), "{e}");
        let e = read_config_file(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("character device"), "{e}");
        let big = d.join("big.toml");
        std::fs::write(&big, vec![b'#'; MAX_CONFIG_BYTES as usize + 1]).unwrap();
        let e = read_config_file(&big).unwrap_err().to_string();
        assert!(e.contains("more than"), "{e}");
        std::fs::write(&big, b"\xff\xfe").unwrap();
        let e = read_config_file(&big).unwrap_err().to_string();
        assert!(e.contains("UTF-8"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn dirs_and_outputs() {
        let d = tmp("dirs");
        let file = d.join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(check_dir_writable(&d.join("new/deeper")).is_ok());
        assert!(check_dir_writable(&d).is_ok());
        let e = check_dir_writable(&file.join("sub")).unwrap_err();
        assert!(e.contains("not a directory"), "{e}");
        let e = check_dir_writable(&file).unwrap_err();
        assert!(e.contains("exists and is"), "{e}");
        assert!(check_output_file(&d.join("out.json")).is_ok());
        assert!(check_output_file(&d.join("new/out.json")).is_ok());
        let e = check_output_file(&d).unwrap_err();
        assert!(e.contains("is a directory"), "{e}");
        let e = check_output_file(&file.join("out.json")).unwrap_err();
        assert!(e.contains("not a directory"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
