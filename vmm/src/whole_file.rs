//! Documents written whole or not at all.
//!
//! Every file Pacer writes as one document (a run's `--json`, a bench's
//! `summary.json`, `report.html` and plots, the matrix and config copies,
//! snapshots, `pacer sim`/`trace` outputs) goes through [`write`] or
//! [`write_with`]: the content goes to a temporary file in the target's
//! own directory (so the rename stays on one file system), is flushed to
//! disk (`fsync`), and is renamed over the target. A reader sees the old
//! document or the new one, never a torn one: a full disk, a file-size
//! limit or a kill in the middle leaves the previous file as it was, and
//! the temporary file is removed (`tempfile::NamedTempFile` deletes it
//! when dropped unless persisted).
//!
//! Append-only logs (`<vm>.results.jsonl`, `results.jsonl`, consoles,
//! traces) are not documents: they keep whole lines by cutting a failed
//! append back (`results::ResultsLog`, `bench::store`).

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The directory `path` is in (`.` for a bare file name).
fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// A temporary file beside `path`, named after it (`.NAME.tmp-XXXXXX.EXT`:
/// a writer that picks its format by the extension, as plotters' PNG
/// backend does, sees the target's), readable as a file `std::fs::write`
/// makes would be (0666 less umask).
fn temp_beside(path: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    tempfile::Builder::new()
        .prefix(&format!(".{name}.tmp-"))
        .suffix(&ext)
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir_of(path))
}

/// Flush `tmp` to disk and rename it over `path`, then flush the
/// directory entry (best effort: some file systems refuse a directory
/// fsync, and the document is whole either way).
fn persist(tmp: tempfile::NamedTempFile, path: &Path) -> std::io::Result<()> {
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    if let Ok(d) = std::fs::File::open(dir_of(path)) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Write `bytes` as the whole content of `path`: the old file stays until
/// the new one is complete on disk.
pub fn write(path: &Path, bytes: impl AsRef<[u8]>) -> std::io::Result<()> {
    let mut tmp = temp_beside(path)?;
    tmp.as_file_mut().write_all(bytes.as_ref())?;
    persist(tmp, path)
}

/// Let `fill` write the document to the path it is given (a temporary
/// file beside `path`, for writers that open a path themselves, such as
/// plotters' backends), then put it in place as [`write`] does. An error
/// of `fill` leaves `path` as it was and removes the temporary file.
pub fn write_with<E>(
    path: &Path,
    fill: impl FnOnce(&Path) -> Result<(), E>,
    io_error: impl Fn(std::io::Error) -> E,
) -> Result<(), E> {
    let tmp = temp_beside(path).map_err(&io_error)?;
    fill(tmp.path())?;
    // `fill` may have replaced the file rather than written into it:
    // flush what is at the temporary path now.
    std::fs::File::open(tmp.path())
        .and_then(|f| f.sync_all())
        .map_err(&io_error)?;
    tmp.persist(path).map_err(|e| io_error(e.error))?;
    if let Ok(d) = std::fs::File::open(dir_of(path)) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn tmp_dir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("pacer-whole-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn writes_replace_the_file_and_leave_no_temporary_file() {
        let d = tmp_dir("replace");
        let p = d.join("doc.json");
        write(&p, "{\"a\": 1}\n").unwrap();
        write(&p, "{\"a\": 2}\n").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "{\"a\": 2}\n");
        assert_eq!(names(&d), ["doc.json"]);
        // As readable as std::fs::write would make it.
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        // SAFETY: umask reads and sets the mask; set back at once.
        let mask = unsafe {
            let m = libc::umask(0o022);
            libc::umask(m);
            m
        };
        assert_eq!(mode, 0o666 & !mask);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_failed_fill_leaves_the_old_file() {
        let d = tmp_dir("fill");
        let p = d.join("plot.svg");
        write(&p, "old").unwrap();
        let r: Result<(), String> = write_with(
            &p,
            |tmp| {
                std::fs::write(tmp, "half").unwrap();
                Err("the backend failed".to_string())
            },
            |e| e.to_string(),
        );
        assert_eq!(r.unwrap_err(), "the backend failed");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "old");
        assert_eq!(names(&d), ["plot.svg"]);
        let r: Result<(), String> = write_with(
            &p,
            |tmp| std::fs::write(tmp, "new").map_err(|e| e.to_string()),
            |e| e.to_string(),
        );
        r.unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// On a full file system (a tmpfs of 64 KiB) a document that does not
    /// fit fails, and the old one is still there, whole.
    #[test]
    fn a_full_disk_leaves_the_old_file_whole() {
        let d = tmp_dir("full");
        let mnt = d.join("mnt");
        std::fs::create_dir_all(&mnt).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(&mnt)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if !mounted {
            println!("SKIPPED: cannot mount a tmpfs (not root?); a_full_disk_leaves_the_old_file_whole not run");
            let _ = std::fs::remove_dir_all(&d);
            return;
        }
        let p = mnt.join("summary.json");
        let old = format!("{{\"old\": \"{}\"}}\n", "x".repeat(20_000));
        write(&p, &old).unwrap();
        let e = write(&p, vec![b'y'; 200_000]).unwrap_err();
        let still = std::fs::read_to_string(&p);
        let left = names(&mnt);
        let _ = Command::new("umount").arg(&mnt).status();
        let _ = std::fs::remove_dir_all(&d);
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
        assert_eq!(still.unwrap(), old);
        assert_eq!(left, ["summary.json"]);
    }
}
