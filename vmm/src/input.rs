//! Every file Pacer reads from a user, and every directory or file a run
//! will write, checked before anything starts (exit 2, nothing started)
//! instead of failing after the VMs ran.
//!
//! Reading: a regular file only (a FIFO, a device, a directory or a
//! socket is refused by name), opened non-blocking (a FIFO swapped in
//! between the check and the open cannot hang it) and checked again on the
//! descriptor, and read no further than a cap per kind of file (the file's
//! claimed size is not trusted: `/proc`-like files claim 0). Each refusal
//! is one line: what the path is, or how large it is against its cap.
//!
//! | what | cap | read by |
//! |---|---|---|
//! | host config, bench matrix, sim scenario | [`MAX_CONFIG_BYTES`] (1 MiB) | `pacer validate/run`, `pacer bench`, `pacer sim` |
//! | console log, unixbench report, process output | [`MAX_LOG_BYTES`] (256 MiB) | `pacer unixbench --report`, bench cells |
//! | bench results (`--resume`) | [`MAX_RESULTS_BYTES`] (1 GiB) | `pacer bench --resume` |
//! | scheduling trace (opened with [`open_regular_file`], its header checked first, read a frame at a time) | `pacer::trace::read::MAX_TRACE_BYTES` | `pacer trace`, `pacer sim --replay` |
//!
//! Kernel images and initrds are checked as regular files by config
//! validation and read by the boot loaders, whose formats bound the reads.
//!
//! Writing: a log directory must be creatable and writable (its nearest
//! existing ancestor a directory this process may write into:
//! [`check_dir_writable`]); the `--json` (and `--trace`) output must not
//! be a directory, its directory must exist, and the file is tried:
//! created and removed again, or opened for writing if it exists
//! ([`check_output_file`]). Nothing else here creates or changes a file.

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Largest config, matrix or scenario file (a config of hundreds of VMs is
/// a few tens of KiB).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// Largest console log, unixbench report or process output read back (a
/// VM's console log is capped below this: `console_log_limit_mib`).
pub const MAX_LOG_BYTES: u64 = 256 << 20;
/// Largest bench results.jsonl read back by `--resume` (a cell record is a
/// few KiB: hundreds of thousands of cells).
pub const MAX_RESULTS_BYTES: u64 = 1 << 30;

/// What kind of file a non-regular path is, in words.
fn kind_of(ft: std::fs::FileType) -> &'static str {
    if ft.is_file() {
        "a regular file"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    }
}

fn invalid(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, msg)
}

/// Open a regular file for reading: checked by path, then again on the
/// descriptor opened non-blocking (for a reader that reads it in pieces
/// and bounds what it reads itself).
pub fn open_regular_file(path: &Path) -> std::io::Result<std::fs::File> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(invalid(format!(
            "{}, not a regular file",
            kind_of(meta.file_type())
        )));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(invalid(format!(
            "{}, not a regular file",
            kind_of(meta.file_type())
        )));
    }
    Ok(file)
}

/// Read a regular file of at most `max` bytes (`what` names it in the
/// error): checked by path, then again on the descriptor opened
/// non-blocking, and read no further than `max` + 1 bytes whatever the
/// file claims.
pub fn read_regular_file(path: &Path, max: u64, what: &str) -> std::io::Result<Vec<u8>> {
    let file = open_regular_file(path)?;
    let meta = file.metadata()?;
    if meta.len() > max {
        return Err(invalid(format!(
            "{} bytes, more than the {max} bytes {what} may have",
            meta.len()
        )));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(invalid(format!(
            "more than the {max} bytes {what} may have"
        )));
    }
    Ok(bytes)
}

/// [`read_regular_file`] as UTF-8 text (an invalid byte is an error naming
/// its line and column).
pub fn read_text(path: &Path, max: u64, what: &str) -> std::io::Result<String> {
    let bytes = read_regular_file(path, max, what)?;
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let before = &e.as_bytes()[..at];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let col = at
            - before
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1)
            + 1;
        invalid(format!(
            "not UTF-8 text (invalid byte at line {line}, column {col}, offset {at})"
        ))
    })
}

/// [`read_regular_file`] as text, invalid UTF-8 replaced (what a guest
/// printed: a console log, a process's output).
pub fn read_lossy(path: &Path, max: u64, what: &str) -> std::io::Result<String> {
    read_regular_file(path, max, what).map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// A config, matrix or scenario file: [`MAX_CONFIG_BYTES`], UTF-8.
pub fn read_config_text(path: &Path, what: &str) -> std::io::Result<String> {
    read_text(path, MAX_CONFIG_BYTES, what)
}

/// Why a directory or an output file cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteCheckError {
    #[error("the path contains a NUL byte")]
    Nul,
    #[error("{} is not writable: {source}", .path.display())]
    NotWritable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no part of {} exists", .0.display())]
    Nothing(PathBuf),
    #[error("{} exists and is {kind}, not a directory", .path.display())]
    NotADirectory { path: PathBuf, kind: &'static str },
    #[error("cannot be created: {} is {kind}, not a directory", .at.display())]
    UnderAFile { at: PathBuf, kind: &'static str },
    #[error("{} is a directory", .0.display())]
    IsADirectory(PathBuf),
    #[error("directory {} does not exist (Pacer creates no directory for it)", .0.display())]
    NoDirectory(PathBuf),
    #[error("{} cannot be created: {source}", .path.display())]
    CannotCreate {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is {kind}", .path.display())]
    NotAFile { path: PathBuf, kind: &'static str },
    /// The output file's directory.
    #[error("cannot write {}: {dir}", .path.display())]
    Directory {
        path: PathBuf,
        dir: Box<WriteCheckError>,
    },
}

/// Whether this process may write `path` (access(2) with `mode`, which
/// also reports a read-only file system).
fn access(path: &Path, mode: libc::c_int) -> Result<(), WriteCheckError> {
    let c =
        std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| WriteCheckError::Nul)?;
    // SAFETY: access reads a NUL-terminated string that outlives the call.
    if unsafe { libc::access(c.as_ptr(), mode) } == 0 {
        Ok(())
    } else {
        Err(WriteCheckError::NotWritable {
            path: path.to_path_buf(),
            source: std::io::Error::last_os_error(),
        })
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
pub fn check_dir_writable(dir: &Path) -> Result<(), WriteCheckError> {
    let Some((at, meta)) = existing_ancestor(dir) else {
        return Err(WriteCheckError::Nothing(dir.to_path_buf()));
    };
    if !meta.is_dir() {
        let kind = kind_of(meta.file_type());
        return Err(if at == dir {
            WriteCheckError::NotADirectory {
                path: dir.to_path_buf(),
                kind,
            }
        } else {
            WriteCheckError::UnderAFile { at, kind }
        });
    }
    access(&at, libc::W_OK | libc::X_OK)
}

/// Can an output document be written to `path` (a file to create or
/// replace), into a directory that exists? Tried, not asked: access(2)
/// says yes to root anywhere (`/proc`), so the file is opened for writing
/// (created and removed again if it did not exist), and beside an
/// existing one a scratch file is created and removed, as the document's
/// temporary file will be ([`crate::whole_file`]).
pub fn check_output_file(path: &Path) -> Result<(), WriteCheckError> {
    use std::fs::OpenOptions;
    let existing = match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => return Err(WriteCheckError::IsADirectory(path.to_path_buf())),
        Ok(m) if !m.is_file() => {
            return Err(WriteCheckError::NotAFile {
                path: path.to_path_buf(),
                kind: kind_of(m.file_type()),
            })
        }
        Ok(_) => true,
        Err(_) => false,
    };
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let in_dir = |e: WriteCheckError| WriteCheckError::Directory {
        path: path.to_path_buf(),
        dir: Box::new(e),
    };
    match std::fs::metadata(parent) {
        Ok(m) if m.is_dir() => {}
        Ok(m) => {
            return Err(in_dir(WriteCheckError::NotADirectory {
                path: parent.to_path_buf(),
                kind: kind_of(m.file_type()),
            }))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Below a file somewhere up the path, or simply missing.
            return Err(in_dir(match existing_ancestor(parent) {
                Some((at, m)) if !m.is_dir() => WriteCheckError::UnderAFile {
                    at,
                    kind: kind_of(m.file_type()),
                },
                _ => WriteCheckError::NoDirectory(parent.to_path_buf()),
            }));
        }
        Err(source) => {
            return Err(in_dir(WriteCheckError::NotWritable {
                path: parent.to_path_buf(),
                source,
            }))
        }
    }
    if existing {
        OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|source| WriteCheckError::NotWritable {
                path: path.to_path_buf(),
                source,
            })?;
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let scratch = parent.join(format!(".{name}.pacer-check-{}", std::process::id()));
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&scratch)
            .map_err(|source| {
                in_dir(WriteCheckError::NotWritable {
                    path: parent.to_path_buf(),
                    source,
                })
            })?;
        let _ = std::fs::remove_file(&scratch);
    } else {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|source| WriteCheckError::CannotCreate {
                path: path.to_path_buf(),
                source,
            })?;
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_files_and_large_files_are_refused_without_blocking() {
        let dir = std::env::temp_dir().join(format!("pacer-input-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let e = read_config_text(Path::new("/dev/zero"), "a matrix").unwrap_err();
        assert_eq!(e.to_string(), "a character device, not a regular file");
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_config_text(&fifo, "a matrix").unwrap_err();
        assert_eq!(e.to_string(), "a FIFO, not a regular file");
        let e = read_config_text(&dir, "a matrix").unwrap_err();
        assert_eq!(e.to_string(), "a directory, not a regular file");
        let big = dir.join("big.toml");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_CONFIG_BYTES + 1)
            .unwrap();
        let e = read_config_text(&big, "a matrix").unwrap_err();
        assert!(
            e.to_string()
                .contains("more than the 1048576 bytes a matrix may have"),
            "{e}"
        );
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, b"a = 1\nb = \"\xff\"\n").unwrap();
        let e = read_config_text(&bad, "a matrix").unwrap_err();
        assert!(e.to_string().contains("line 2, column 6"), "{e}");
        assert_eq!(
            read_lossy(&bad, 100, "a log").unwrap(),
            "a = 1\nb = \"\u{fffd}\"\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pacer-input-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn config_file_must_be_regular_and_small() {
        let d = tmp("cfg");
        let f = d.join("a.toml");
        std::fs::write(&f, "x = 1\n").unwrap();
        assert_eq!(read_config_text(&f, "a config file").unwrap(), "x = 1\n");
        let e = read_config_text(&d, "a config file")
            .unwrap_err()
            .to_string();
        assert!(e.contains("a directory"), "{e}");
        let fifo = d.join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo reads a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_config_text(&fifo, "a config file")
            .unwrap_err()
            .to_string();
        assert!(e.contains("a FIFO"), "{e}");
        let e = read_config_text(Path::new("/dev/zero"), "a config file")
            .unwrap_err()
            .to_string();
        assert!(e.contains("character device"), "{e}");
        let big = d.join("big.toml");
        std::fs::write(&big, vec![b'#'; MAX_CONFIG_BYTES as usize + 1]).unwrap();
        let e = read_config_text(&big, "a config file")
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than"), "{e}");
        std::fs::write(&big, b"\xff\xfe").unwrap();
        let e = read_config_text(&big, "a config file")
            .unwrap_err()
            .to_string();
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
        let e = check_dir_writable(&file.join("sub"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a directory"), "{e}");
        let e = check_dir_writable(&file).unwrap_err().to_string();
        assert!(e.contains("exists and is"), "{e}");
        assert!(check_output_file(&d.join("out.json")).is_ok());
        // Tried, and removed again: nothing is left behind.
        assert!(!d.join("out.json").exists());
        assert!(check_output_file(&file).is_ok());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        // A missing directory is named, not created.
        let e = check_output_file(&d.join("new/out.json"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!(
                "directory {} does not exist",
                d.join("new").display()
            )),
            "{e}"
        );
        assert!(!d.join("new").exists());
        // Where nothing can be created, for root too (access(2) would say
        // yes to root).
        let e = check_output_file(Path::new("/proc/x.json"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("/proc/x.json cannot be created: "), "{e}");
        let e = check_output_file(&d).unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
        let e = check_output_file(&file.join("out.json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a directory"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
