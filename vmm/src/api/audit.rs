//! The record of every change made through the control API: what changed
//! (target, key, the value before and after), when (ns into the run and
//! wall-clock time) and by whom (the uid of the socket's peer, from
//! SO_PEERCRED). Each change is a line of `<run dir>/control.jsonl` as it
//! is made (one `write` per line; a `pacer-control-change` document, its
//! schema in `schemas/`) and an entry of the run's results
//! (`control_changes` in `--json`). A line the disk does not take whole is
//! cut off again, so the file holds whole lines only.

use crate::documents::{Header, API_SCHEMA_VERSION, CONTROL_CHANGE};
use crate::results::events::ControlChangeDoc;
use crate::results::ControlChange;
use serde::Serialize;
use std::io::Write;
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// One line of `control.jsonl`.
#[derive(Serialize)]
struct ControlLine {
    #[serde(flatten)]
    header: Header,
    #[serde(flatten)]
    change: ControlChangeDoc,
}

/// Nanoseconds of a duration, saturated.
fn ns(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The run's change record.
pub struct Audit {
    run_start: Instant,
    /// The record file (opened for appending) and its length in whole lines.
    file: Option<Mutex<(std::fs::File, u64)>>,
    changes: Mutex<Vec<ControlChange>>,
}

impl Audit {
    /// Record into `file` (opened for appending before the API thread is
    /// confined) and memory.
    pub fn new(run_start: Instant, file: Option<std::fs::File>) -> Audit {
        Audit {
            run_start,
            file: file.map(|f| {
                let len = f.metadata().map_or(0, |m| m.len());
                Mutex::new((f, len))
            }),
            changes: Mutex::new(Vec::new()),
        }
    }

    /// Record one change.
    pub fn record(&self, uid: u32, target: &str, key: &str, previous: Option<String>, value: &str) {
        let change = ControlChange {
            t_run_ns: ns(self.run_start.elapsed()),
            unix_time_ns: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, ns),
            uid,
            target: target.to_string(),
            key: key.to_string(),
            previous,
            value: value.to_string(),
        };
        log::info!(
            "control: uid {uid} set {target} {key}={value} (was {})",
            change.previous.as_deref().unwrap_or("-")
        );
        if let Some(f) = &self.file {
            let line = ControlLine {
                header: Header::versioned(CONTROL_CHANGE, API_SCHEMA_VERSION),
                change: ControlChangeDoc::of(&change),
            };
            let mut line = serde_json::to_string(&line).unwrap_or_default();
            line.push('\n');
            let mut f = f.lock().unwrap_or_else(|p| p.into_inner());
            let (file, len) = &mut *f;
            match file.write_all(line.as_bytes()) {
                Ok(()) => *len += line.len() as u64,
                Err(e) => {
                    // Part of the line may be on disk: cut it off.
                    let _ = file.set_len(*len);
                    log::error!("cannot record a control change: {e}");
                }
            }
        }
        self.changes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(change);
    }

    /// Every change so far, in order.
    pub fn changes(&self) -> Vec<ControlChange> {
        self.changes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_go_to_the_file_and_to_memory() {
        let path = std::env::temp_dir().join(format!("pacer-audit-{}.jsonl", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let audit = Audit::new(Instant::now(), Some(append_new(&path)));
        audit.record(1000, "a/0", "affinity", Some("0-1".into()), "1");
        audit.record(0, "host", "mode", None, "power-saving");
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["uid"], 1000);
        assert_eq!(lines[0]["previous"], "0-1");
        assert_eq!(lines[1]["previous"], serde_json::Value::Null);
        assert_eq!(lines[1]["schema_version"], API_SCHEMA_VERSION);
        assert_eq!(lines[1]["schema"], CONTROL_CHANGE);
        assert!(lines[1]["t_run_ns"].is_u64(), "{}", lines[1]);
        assert_eq!(audit.changes()[0].value, "1");
    }

    fn append_new(path: &std::path::Path) -> std::fs::File {
        std::fs::OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(path)
            .unwrap()
    }

    /// On a full tmpfs the line that does not fit whole is cut off: the
    /// file ends with a whole line.
    #[test]
    fn a_line_the_disk_does_not_take_whole_is_cut_off() {
        let dir = std::env::temp_dir().join(format!("pacer-audit-full-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=8k", "tmpfs"])
            .arg(&dir)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if !mounted {
            println!("SKIPPED: cannot mount a tmpfs (not root?); a_line_the_disk_does_not_take_whole_is_cut_off not run");
            let _ = std::fs::remove_dir_all(&dir);
            return;
        }
        let path = dir.join("control.jsonl");
        let audit = Audit::new(Instant::now(), Some(append_new(&path)));
        // Lines of ~1.1 KB until the 8 KiB are full, and more.
        let value = "x".repeat(1000);
        for _ in 0..12 {
            audit.record(0, "a/0", "priority", None, &value);
        }
        let changes = audit.changes().len();
        drop(audit);
        let text = std::fs::read_to_string(&path);
        let _ = std::process::Command::new("umount").arg(&dir).status();
        let _ = std::fs::remove_dir_all(&dir);
        let text = text.unwrap();
        assert!(text.ends_with('\n'), "a torn last line");
        let n = text.lines().count();
        assert!((1..12).contains(&n), "{n} lines");
        for l in text.lines() {
            serde_json::from_str::<serde_json::Value>(l).unwrap();
        }
        assert_eq!(changes, 12, "memory keeps every change");
    }
}
