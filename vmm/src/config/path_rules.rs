//! What `pacer validate` checks of a path a config names, so that it
//! refuses what `pacer run` would fail on:
//!
//! - a path with a NUL byte (no system call takes it), a component longer
//!   than NAME_MAX (255 bytes) or a whole path longer than PATH_MAX;
//! - a directory to create whose nearest ancestor cannot be looked up for
//!   another reason than "does not exist" (a symbolic link loop, a
//!   component that is a file, no search permission): `create_dir_all`
//!   would fail there, often with a misleading "File exists";
//! - an input file on a pseudo file system (`/proc`, `/sys`, debugfs,
//!   tracefs, configfs, cgroup, securityfs): such files claim a size (4096)
//!   that is not their content, so loading one fails half-way ("only used 4
//!   bytes in 4096 long buffer").
//!
//! Every message names the path shortened to a readable length.

use crate::text::quoted;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Longest file name component (Linux NAME_MAX).
pub const NAME_MAX: usize = 255;
/// Longest path (Linux PATH_MAX, the terminating NUL included).
pub const PATH_MAX: usize = 4096;

fn shown(p: &Path) -> String {
    quoted(&p.display().to_string())
}

/// Why a path is refused.
#[derive(Debug, thiserror::Error)]
pub enum PathRuleError {
    #[error("expected a path without NUL bytes, found one at byte {at} of {}", shown(.path))]
    Nul { at: usize, path: PathBuf },
    #[error("expected a path of less than {PATH_MAX} bytes, found {len} bytes: {}", shown(.path))]
    TooLong { len: usize, path: PathBuf },
    #[error("expected file names of at most {NAME_MAX} bytes, found one of {len} bytes: {}", shown(.name))]
    NameTooLong { len: usize, name: PathBuf },
    #[error("cannot look up {}: {}", shown(.path), lookup_failure(.source))]
    Lookup {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("expected a file on a disk, found {} on {fs} (its size is not its content)", shown(.path))]
    PseudoFs { path: PathBuf, fs: &'static str },
}

impl PathRuleError {
    /// An error about the path's shape or kind ("expected ..."), not a
    /// failed look-up.
    pub fn is_expectation(&self) -> bool {
        !matches!(self, PathRuleError::Lookup { .. })
    }
}

/// A failed look-up in words.
fn lookup_failure(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ELOOP) => "a loop of symbolic links".to_string(),
        Some(libc::ENOTDIR) => "a part of it is not a directory".to_string(),
        _ => e.to_string(),
    }
}

/// A path's shape: no NUL, no component over NAME_MAX, not over PATH_MAX.
pub fn shape(p: &Path) -> Result<(), PathRuleError> {
    let bytes = p.as_os_str().as_bytes();
    if let Some(i) = bytes.iter().position(|&b| b == 0) {
        return Err(PathRuleError::Nul {
            at: i + 1,
            path: p.to_path_buf(),
        });
    }
    if bytes.len() >= PATH_MAX {
        return Err(PathRuleError::TooLong {
            len: bytes.len(),
            path: p.to_path_buf(),
        });
    }
    if let Some(c) = p
        .components()
        .map(|c| c.as_os_str())
        .find(|c| c.len() > NAME_MAX)
    {
        return Err(PathRuleError::NameTooLong {
            len: c.len(),
            name: PathBuf::from(c),
        });
    }
    Ok(())
}

/// A directory that will be created if missing: its shape, and the walk up
/// to its nearest existing ancestor meets only "does not exist".
pub fn dir_to_create(p: &Path) -> Result<(), PathRuleError> {
    shape(p)?;
    let mut cur = Some(p);
    while let Some(c) = cur {
        let probe = if c.as_os_str().is_empty() {
            Path::new(".")
        } else {
            c
        };
        match std::fs::metadata(probe) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => cur = c.parent(),
            Err(source) => {
                return Err(PathRuleError::Lookup {
                    path: probe.to_path_buf(),
                    source,
                });
            }
        }
    }
    Ok(())
}

/// Pseudo file systems whose files' sizes are not their contents.
const PSEUDO: &[(i64, &str)] = &[
    (0x9fa0, "procfs"),
    (0x6265_6572, "sysfs"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x6265_6570, "configfs"),
    (0x2717_8e64, "cgroup"),
    (0x6367_7270, "cgroup2"),
    (0x7363_6673, "securityfs"),
    (0x6e73_6673, "nsfs"),
];

/// The pseudo file system `p` lives on, if it does.
pub fn pseudo_fs(p: &Path) -> Option<&'static str> {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).ok()?;
    // SAFETY: statfs reads a NUL-terminated path that outlives the call and
    // writes one `statfs` struct into `st`, which is zero-initialised and
    // owned by this frame.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: see above.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let kind = st.f_type as i64;
    PSEUDO.iter().find(|(m, _)| *m == kind).map(|(_, n)| *n)
}

/// A file Pacer will load (kernel, initrd, module): its shape, and not on
/// a pseudo file system.
pub fn input_file(p: &Path) -> Result<(), PathRuleError> {
    shape(p)?;
    if let Some(fs) = pseudo_fs(p) {
        return Err(PathRuleError::PseudoFs {
            path: p.to_path_buf(),
            fs,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("pacer-paths-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn shapes() {
        assert!(shape(Path::new("logs/a")).is_ok());
        let nul = std::ffi::OsStr::from_bytes(b"lo\0gs");
        let e = shape(Path::new(nul)).unwrap_err().to_string();
        assert!(e.contains("NUL") && e.contains("byte 3"), "{e}");
        let long = "x".repeat(100_000);
        let e = shape(Path::new(&long)).unwrap_err().to_string();
        assert!(e.contains("100000 bytes") && e.len() < 200, "{e}");
        let e = shape(&Path::new("a").join("y".repeat(300)))
            .unwrap_err()
            .to_string();
        assert!(e.contains("300 bytes") && e.len() < 200, "{e}");
    }

    #[test]
    fn dirs_behind_loops_and_files() {
        let d = tmp("dirs");
        std::os::unix::fs::symlink("loop", d.join("loop")).unwrap();
        let e = dir_to_create(&d.join("loop")).unwrap_err().to_string();
        assert!(e.contains("loop of symbolic links"), "{e}");
        let e = dir_to_create(&d.join("loop/sub")).unwrap_err().to_string();
        assert!(e.contains("loop of symbolic links"), "{e}");
        std::fs::write(d.join("file"), "x").unwrap();
        let e = dir_to_create(&d.join("file/sub")).unwrap_err().to_string();
        assert!(e.contains("not a directory"), "{e}");
        assert!(dir_to_create(&d.join("new/deeper")).is_ok());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn pseudo_files() {
        let sys = Path::new("/sys/devices/system/cpu/online");
        if sys.exists() {
            let e = input_file(sys).unwrap_err().to_string();
            assert!(e.contains("sysfs"), "{e}");
        }
        let proc = Path::new("/proc/self/status");
        assert!(input_file(proc).unwrap_err().to_string().contains("procfs"));
        let d = tmp("pseudo");
        std::fs::write(d.join("k"), "x").unwrap();
        assert!(input_file(&d.join("k")).is_ok());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
