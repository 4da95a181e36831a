//! Every file Pacer reads from a user goes through here, under the host
//! config's rules: a regular file only (a FIFO, a device, a directory or a
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
//! | scheduling trace | `trace::read::MAX_TRACE_BYTES` | `pacer trace`, `pacer sim --replay` |
//!
//! Kernel images and initrds are checked as regular files by config
//! validation and read by the boot loaders, whose formats bound the reads.

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

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
pub(crate) fn kind_of(ft: std::fs::FileType) -> &'static str {
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

/// Read a regular file of at most `max` bytes (`what` names it in the
/// error): checked by path, then again on the descriptor opened
/// non-blocking, and read no further than `max` + 1 bytes whatever the
/// file claims.
pub fn read_regular_file(path: &Path, max: u64, what: &str) -> std::io::Result<Vec<u8>> {
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
}
