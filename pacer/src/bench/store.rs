//! The results of a bench run on disk: `results.jsonl` (one line per
//! finished cell, the source of truth) and `results.csv` (the same data in
//! long form: one row per sample, for spreadsheets and pandas).
//!
//! Each finished cell is appended to both files with one `write` each and
//! flushed to disk before the next cell starts, so an interrupted run
//! loses only the cell it was in. A kill in the middle of a large write can
//! still leave a partial last line; [`Store::open`] with `resume` cuts it
//! off (and rebuilds the CSV from the JSON lines) before anything is
//! appended, so the files never hold a torn record.

use super::host_facts::{HostFacts, TopologyFacts};
use super::metrics::Sample;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use vmm::documents::{Header, Producer, SCHEMA_VERSION};

pub const JSONL: &str = "results.jsonl";
pub const CSV: &str = "results.csv";

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A file of an earlier run (`--resume`) that cannot be read: a FIFO,
    /// a device, too large (bad input).
    #[error("--resume: cannot read {path}: {source}")]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error(
        "{0} already holds results: pass --resume to continue that run, or choose another --out-dir"
    )]
    NotEmpty(PathBuf),
    #[error("{path}: {message}")]
    Csv { path: PathBuf, message: String },
}

/// How a cell ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CellStatus {
    /// Every VM ran its workload to the end.
    #[serde(rename = "ok")]
    Ok,
    /// A VM failed (its error is recorded); the run went on.
    #[serde(rename = "failed")]
    Failed,
    /// The cell's time limit stopped it.
    #[serde(rename = "timeout")]
    Timeout,
    /// The cell cannot run here; `error` says why.
    #[serde(rename = "n/a")]
    NotApplicable,
}

impl CellStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CellStatus::Ok => "ok",
            CellStatus::Failed => "failed",
            CellStatus::Timeout => "timeout",
            CellStatus::NotApplicable => "n/a",
        }
    }
}

/// One finished cell: a line of `results.jsonl`, a `pacer-bench-cell`
/// document (`documents`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellRecord {
    #[serde(flatten)]
    pub header: Header,
    pub id: String,
    pub layout: String,
    pub workload: String,
    /// The policy's label in the matrix (`haiku:power-saving`, `qemu`, ...).
    pub policy: String,
    /// The Haiku mode it ran in; null for `host`, `qemu` and `native`.
    pub mode: Option<String>,
    pub rep: u32,
    pub status: CellStatus,
    /// Why it failed or cannot run; empty (null in the file) when ok.
    #[serde(with = "empty_is_null")]
    pub error: String,
    /// When it started, since the Unix epoch.
    pub started_unix_ns: u64,
    pub wall_ns: u64,
    pub samples: Vec<Sample>,
    /// The host it ran on (absent in records of an older Pacer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostFacts>,
}

/// `""` written as `null` and read back from it.
mod empty_is_null {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &str, s: S) -> Result<S::Ok, S::Error> {
        if v.is_empty() {
            s.serialize_none()
        } else {
            s.serialize_some(v)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
    }
}

impl CellRecord {
    /// The wall time in seconds, for people.
    pub fn wall_s(&self) -> f64 {
        self.wall_ns as f64 / 1e9
    }
}

/// A row of `results.csv`: the cell's fields and one sample (empty sample
/// fields for a cell without samples).
#[derive(Debug, Serialize, Deserialize)]
struct CsvRow {
    schema: String,
    schema_version: u32,
    pacer_version: String,
    pacer_commit: Option<String>,
    id: String,
    layout: String,
    workload: String,
    policy: String,
    mode: Option<String>,
    rep: u32,
    status: CellStatus,
    error: Option<String>,
    started_unix_ns: u64,
    wall_ns: u64,
    vm: Option<String>,
    group: Option<String>,
    vcpu: Option<u32>,
    metric: Option<String>,
    value: Option<f64>,
    host: Option<String>,
    host_cpu_model: Option<String>,
    host_sockets: Option<u32>,
    host_llcs: Option<u32>,
    host_cores: Option<u32>,
    host_cpus: Option<u32>,
    host_threads_per_core: Option<u32>,
    host_kernel: Option<String>,
    host_kvm: Option<String>,
    host_load_1m: Option<f64>,
    host_others_cpu_share: Option<f64>,
    host_cpu_freq_khz: Option<u64>,
}

fn csv_rows(r: &CellRecord) -> Vec<CsvRow> {
    let h = r.host.as_ref();
    let t = h.and_then(|h| h.topology.as_ref());
    let row = |s: Option<&Sample>| CsvRow {
        schema: r.header.schema.clone(),
        schema_version: r.header.schema_version,
        pacer_version: r.header.pacer.version.clone(),
        pacer_commit: r.header.pacer.commit.clone(),
        id: r.id.clone(),
        layout: r.layout.clone(),
        workload: r.workload.clone(),
        policy: r.policy.clone(),
        mode: r.mode.clone(),
        rep: r.rep,
        status: r.status,
        error: (!r.error.is_empty()).then(|| r.error.clone()),
        started_unix_ns: r.started_unix_ns,
        wall_ns: r.wall_ns,
        vm: s.map(|s| s.vm.clone()),
        group: s.map(|s| s.group.clone()),
        vcpu: s.and_then(|s| s.vcpu),
        metric: s.map(|s| s.metric.clone()),
        value: s.map(|s| s.value),
        host: h.map(|h| h.name.clone()),
        host_cpu_model: h.map(|h| h.cpu_model.clone()),
        host_sockets: t.map(|t| t.sockets),
        host_llcs: t.map(|t| t.llcs),
        host_cores: t.map(|t| t.cores),
        host_cpus: t.map(|t| t.cpus),
        host_threads_per_core: t.map(|t| t.threads_per_core),
        host_kernel: h.map(|h| h.kernel.clone()),
        host_kvm: h.map(|h| h.kvm.clone()),
        host_load_1m: h.and_then(|h| h.load_1m),
        host_others_cpu_share: h.and_then(|h| h.others_cpu_share),
        host_cpu_freq_khz: h.and_then(|h| h.cpu_freq_khz),
    };
    if r.samples.is_empty() {
        vec![row(None)]
    } else {
        r.samples.iter().map(|s| row(Some(s))).collect()
    }
}

/// The CSV columns (the fields of [`CsvRow`], in order).
pub const CSV_COLUMNS: [&str; 31] = [
    "schema",
    "schema_version",
    "pacer_version",
    "pacer_commit",
    "id",
    "layout",
    "workload",
    "policy",
    "mode",
    "rep",
    "status",
    "error",
    "started_unix_ns",
    "wall_ns",
    "vm",
    "group",
    "vcpu",
    "metric",
    "value",
    "host",
    "host_cpu_model",
    "host_sockets",
    "host_llcs",
    "host_cores",
    "host_cpus",
    "host_threads_per_core",
    "host_kernel",
    "host_kvm",
    "host_load_1m",
    "host_others_cpu_share",
    "host_cpu_freq_khz",
];

/// `records` as CSV text, with the header line when `header`.
fn csv_text(records: &[CellRecord], header: bool) -> Result<Vec<u8>, String> {
    let mut w = csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(Vec::new());
    if header {
        w.write_record(CSV_COLUMNS).map_err(|e| e.to_string())?;
    }
    for r in records {
        for row in csv_rows(r) {
            w.serialize(row).map_err(|e| e.to_string())?;
        }
    }
    w.into_inner().map_err(|e| e.to_string())
}

/// The host facts of a CSV row (None when it names no host).
fn csv_host(row: &CsvRow) -> Option<HostFacts> {
    let topology = match (
        row.host_sockets,
        row.host_llcs,
        row.host_cores,
        row.host_cpus,
        row.host_threads_per_core,
    ) {
        (Some(sockets), Some(llcs), Some(cores), Some(cpus), Some(threads_per_core)) => {
            Some(TopologyFacts {
                sockets,
                llcs,
                cores,
                cpus,
                threads_per_core,
            })
        }
        _ => None,
    };
    Some(HostFacts {
        name: row.host.clone()?,
        cpu_model: row.host_cpu_model.clone().unwrap_or_default(),
        topology,
        kernel: row.host_kernel.clone().unwrap_or_default(),
        kvm: row.host_kvm.clone().unwrap_or_default(),
        load_1m: row.host_load_1m,
        others_cpu_share: row.host_others_cpu_share,
        cpu_freq_khz: row.host_cpu_freq_khz,
    })
}

/// Read `results.csv` back into cell records (rows of one cell are
/// consecutive).
pub fn read_csv(path: &Path) -> Result<Vec<CellRecord>, StoreError> {
    let err = |message: String| StoreError::Csv {
        path: path.to_path_buf(),
        message,
    };
    let mut reader = csv::Reader::from_path(path).map_err(|e| err(e.to_string()))?;
    let mut out: Vec<CellRecord> = Vec::new();
    for row in reader.deserialize::<CsvRow>() {
        let row = row.map_err(|e| err(e.to_string()))?;
        let host = csv_host(&row);
        if out.last().map(|r| &r.id) != Some(&row.id) {
            out.push(CellRecord {
                header: Header {
                    schema: row.schema,
                    schema_version: row.schema_version,
                    pacer: Producer {
                        version: row.pacer_version,
                        commit: row.pacer_commit,
                    },
                },
                id: row.id.clone(),
                layout: row.layout,
                workload: row.workload,
                policy: row.policy,
                mode: row.mode,
                rep: row.rep,
                status: row.status,
                error: row.error.unwrap_or_default(),
                started_unix_ns: row.started_unix_ns,
                wall_ns: row.wall_ns,
                samples: Vec::new(),
                host,
            });
        }
        if let (Some(vm), Some(metric), Some(value)) = (row.vm, row.metric, row.value) {
            let cell = out.last_mut().expect("pushed above");
            cell.samples.push(Sample {
                vm,
                group: row.group.unwrap_or_default(),
                vcpu: row.vcpu,
                metric,
                value,
            });
        }
    }
    Ok(out)
}

/// Read `results.jsonl`: the complete lines, and the length of the file up
/// to the end of the last complete line (a torn tail is ignored).
pub fn read_jsonl(path: &Path) -> Result<(Vec<CellRecord>, u64), StoreError> {
    let text = match vmm::input::read_regular_file(
        path,
        vmm::input::MAX_RESULTS_BYTES,
        "a bench results.jsonl",
    ) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(source) => {
            return Err(StoreError::Unreadable {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let complete = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut out = Vec::new();
    for (i, line) in text[..complete].split(|&b| b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let parse = |message: String| StoreError::Parse {
            path: path.to_path_buf(),
            line: i + 1,
            message,
        };
        let v: serde_json::Value =
            serde_json::from_slice(line).map_err(|e| parse(not_a_record(&e)))?;
        if v["schema_version"] != SCHEMA_VERSION {
            return Err(parse(format!(
                "written with schema version {} (this Pacer writes {SCHEMA_VERSION}); continue it with the Pacer that wrote it, or choose another --out-dir",
                v["schema_version"]
            )));
        }
        let r: CellRecord = serde_json::from_value(v).map_err(|e| parse(not_a_record(&e)))?;
        out.push(r);
    }
    Ok((out, complete as u64))
}

/// Why a line of `results.jsonl` is not a cell record, in words (the
/// line is named by the caller; serde's own position is within the line).
fn not_a_record(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let what = match e.classify() {
        Category::Syntax | Category::Eof => {
            format!("not a line of JSON (column {})", e.column())
        }
        // Data: whole JSON, but not the shape of a cell record.
        Category::Data | Category::Io => {
            let text = e.to_string();
            let text = text
                .split(" at line ")
                .next()
                .unwrap_or(&text)
                .replace('`', "\"");
            format!("not a cell record ({text})")
        }
    };
    format!("{what}; the file was changed after pacer bench wrote it: restore it, or run into another --out-dir")
}

/// The result files of one run, open for appending.
pub struct Store {
    dir: PathBuf,
    jsonl: File,
    csv: File,
    /// Ids of the cells already recorded.
    done: HashSet<String>,
    records: Vec<CellRecord>,
}

impl Store {
    /// Open `dir` for a run. Without `resume` it must not hold results yet;
    /// with it, the finished cells are read back, a torn last line is cut
    /// off and the CSV is rebuilt from the JSON lines.
    pub fn open(dir: &Path, resume: bool) -> Result<Store, StoreError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| StoreError::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let jpath = dir.join(JSONL);
        let cpath = dir.join(CSV);
        let (records, complete) = read_jsonl(&jpath)?;
        let existing = std::fs::metadata(&jpath).map(|m| m.len()).unwrap_or(0);
        if !resume && existing > 0 {
            return Err(StoreError::NotEmpty(dir.to_path_buf()));
        }
        let jsonl = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&jpath)
            .map_err(io(&jpath))?;
        if existing > complete {
            jsonl.set_len(complete).map_err(io(&jpath))?;
        }
        // The CSV is derived: rewrite it whole, then append to it.
        let text = csv_text(&records, true).map_err(|message| StoreError::Csv {
            path: cpath.clone(),
            message,
        })?;
        vmm::whole_file::write(&cpath, &text).map_err(io(&cpath))?;
        let csv = OpenOptions::new()
            .append(true)
            .open(&cpath)
            .map_err(io(&cpath))?;
        Ok(Store {
            dir: dir.to_path_buf(),
            jsonl,
            csv,
            done: records.iter().map(|r| r.id.clone()).collect(),
            records,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the cell with this id is already recorded.
    pub fn is_done(&self, id: &str) -> bool {
        self.done.contains(id)
    }

    /// Every record so far, in the order they finished.
    pub fn records(&self) -> &[CellRecord] {
        &self.records
    }

    /// Append a finished cell to both files and flush them to disk.
    pub fn append(&mut self, r: CellRecord) -> Result<(), StoreError> {
        let jpath = self.dir.join(JSONL);
        let cpath = self.dir.join(CSV);
        let mut line = serde_json::to_vec(&r).map_err(|e| StoreError::Parse {
            path: jpath.clone(),
            line: 0,
            message: e.to_string(),
        })?;
        line.push(b'\n');
        let rows =
            csv_text(std::slice::from_ref(&r), false).map_err(|message| StoreError::Csv {
                path: cpath.clone(),
                message,
            })?;
        let io = |path: PathBuf| move |source| StoreError::Io { path, source };
        // A write that fails (full disk) leaves both files as they were:
        // a torn record is cut off again, so --resume finds whole lines.
        let (jlen, clen) = (
            self.jsonl.metadata().map_err(io(jpath.clone()))?.len(),
            self.csv.metadata().map_err(io(cpath.clone()))?.len(),
        );
        let written = self
            .jsonl
            .write_all(&line)
            .and_then(|()| self.jsonl.sync_data())
            .map_err(io(jpath))
            .and_then(|()| {
                self.csv
                    .write_all(&rows)
                    .and_then(|()| self.csv.sync_data())
                    .map_err(io(cpath))
            });
        if let Err(e) = written {
            let _ = self.jsonl.set_len(jlen);
            let _ = self.csv.set_len(clen);
            return Err(e);
        }
        self.done.insert(r.id.clone());
        self.records.push(r);
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn record(id: &str, policy: &str, status: CellStatus, units: &[f64]) -> CellRecord {
        CellRecord {
            header: Header::new(vmm::documents::BENCH_CELL),
            id: id.into(),
            layout: "l".into(),
            workload: "w, \"quoted\"".into(),
            policy: policy.into(),
            mode: None,
            rep: 1,
            status,
            error: if status == CellStatus::Ok {
                String::new()
            } else {
                "vm a: timeout\nsecond line".into()
            },
            started_unix_ns: 1_700_000_000_123_456_789,
            wall_ns: 333_333_333,
            samples: units
                .iter()
                .enumerate()
                .map(|(i, &u)| Sample {
                    vm: "a".into(),
                    group: "a".into(),
                    vcpu: Some(i as u32),
                    metric: "cpu.units_per_s".into(),
                    value: u,
                })
                .chain([Sample {
                    vm: "*".into(),
                    group: "*".into(),
                    vcpu: None,
                    metric: "jain.cpu.units_per_s".into(),
                    value: 0.987_654_321_012_345_6,
                }])
                .collect(),
            host: Some(HostFacts {
                name: "lab-node-1".into(),
                cpu_model: "Some CPU, \"quoted\"".into(),
                topology: Some(TopologyFacts {
                    sockets: 2,
                    llcs: 4,
                    cores: 16,
                    cpus: 32,
                    threads_per_core: 2,
                }),
                kernel: "6.1.0".into(),
                kvm: "kvm_intel".into(),
                load_1m: Some(0.25),
                others_cpu_share: Some(0.25),
                cpu_freq_khz: None,
            }),
        }
    }

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pacer-store-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn csv_and_json_round_trip() {
        let dir = tmp("roundtrip");
        let mut s = Store::open(&dir, false).unwrap();
        let mut na = record("l/w/qemu/r1", "qemu", CellStatus::NotApplicable, &[]);
        na.samples.clear();
        // A record of a Pacer older than host facts.
        na.host = None;
        let records = vec![
            record("l/w/host/r1", "host", CellStatus::Ok, &[1.5e9, 123.456_789]),
            na,
            record(
                "l/w/haiku/r1",
                "haiku:power-saving",
                CellStatus::Timeout,
                &[1e-300, 7.0],
            ),
        ];
        for r in &records {
            s.append(r.clone()).unwrap();
        }
        let (json, _) = read_jsonl(&dir.join(JSONL)).unwrap();
        assert_eq!(json, records);
        let csv = read_csv(&dir.join(CSV)).unwrap();
        assert_eq!(csv, records);
        let text = std::fs::read_to_string(dir.join(CSV)).unwrap();
        assert!(
            text.starts_with("schema,schema_version,pacer_version,pacer_commit,id,layout,workload,policy,mode,rep,status,error,"),
            "{text}"
        );
        assert_eq!(text.matches("\"w, \"\"quoted\"\"\"").count(), 7, "{text}");
        // Without --resume an existing run is refused.
        assert!(matches!(
            Store::open(&dir, false),
            Err(StoreError::NotEmpty(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_append_leaves_both_files_as_they_were() {
        let dir = tmp("full");
        let mut s = Store::open(&dir, false).unwrap();
        let first = record("l/w/host/r1", "host", CellStatus::Ok, &[1.0]);
        s.append(first.clone()).unwrap();
        let before = std::fs::read(dir.join(JSONL)).unwrap();
        // The CSV's disk is full: the JSON line written first is cut off.
        s.csv = OpenOptions::new().write(true).open("/dev/full").unwrap();
        let e = s
            .append(record("l/w/haiku/r1", "haiku", CellStatus::Ok, &[2.0]))
            .unwrap_err();
        assert!(e.to_string().contains("No space left on device"), "{e}");
        assert_eq!(std::fs::read(dir.join(JSONL)).unwrap(), before);
        assert_eq!(s.records(), &[first]);
        assert!(!s.is_done("l/w/haiku/r1"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn resume_cuts_a_torn_line_and_rebuilds_the_csv() {
        let dir = tmp("torn");
        let mut s = Store::open(&dir, false).unwrap();
        let first = record("l/w/host/r1", "host", CellStatus::Ok, &[1.0]);
        s.append(first.clone()).unwrap();
        drop(s);
        // A kill in the middle of the second cell's write.
        let second =
            serde_json::to_string(&record("l/w/haiku/r1", "haiku", CellStatus::Ok, &[2.0]))
                .unwrap();
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.join(JSONL))
            .unwrap();
        f.write_all(&second.as_bytes()[..second.len() / 2]).unwrap();
        std::fs::write(dir.join(CSV), "garbage").unwrap();
        let mut s = Store::open(&dir, true).unwrap();
        assert!(s.is_done("l/w/host/r1") && !s.is_done("l/w/haiku/r1"));
        let again = record("l/w/haiku/r1", "haiku", CellStatus::Ok, &[3.0]);
        s.append(again.clone()).unwrap();
        let text = std::fs::read_to_string(dir.join(JSONL)).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert!(text.ends_with('\n'));
        assert_eq!(
            read_jsonl(&dir.join(JSONL)).unwrap().0,
            [first.clone(), again.clone()]
        );
        assert_eq!(read_csv(&dir.join(CSV)).unwrap(), [first, again]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
