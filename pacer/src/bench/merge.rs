//! `pacer bench merge DIR... --out-dir DIR`: the cells of several output
//! folders (shards, or whole runs on other hosts) in one folder, with the
//! summary, plots and report a run writes (`run::write_outputs`).
//!
//! Refused (bad input, nothing written): a folder without `shard.json`
//! or `cell-settings.jsonl` (nothing shows what it ran); folders of
//! different matrices (by digest, `shard.rs`); a matrix file that no
//! longer has the folders' digest; a cell whose recorded settings are not
//! the matrix's; and a cell present twice on one kind of machine (the same
//! cell on two machine kinds is the comparison a lab merges for: it is
//! shown side by side, `hosts.rs`). Missing cells (a shard not given, or
//! one that was stopped) are reported, not refused.
//!
//! The merged folder is laid out as a run's: results.jsonl and .csv (the
//! cells in the matrix's order, then by host), cell-settings.jsonl,
//! matrix.toml, shard.json (1/1 with `merged_from`), summary.json,
//! plots/ and report.html. Logs and traces stay in the shard folders.

use super::cells;
use super::hosts::{self, Hosts};
use super::matrix::Matrix;
use super::run::{write_outputs, BenchOutcome, RunMatrixError};
use super::settings;
use super::shard::{self, MergedShard, ShardDoc, ShardSpec};
use super::store::{self, CellRecord, Store, StoreError};
use crate::documents::matrix::MatrixView;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

/// Errors of a merge.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// Bad input: nothing was written.
    #[error("{0}")]
    Refused(String),
    /// The merged folder could not be written.
    #[error("results not saved: {0}")]
    Write(String),
}

/// The outcome of a merge.
#[derive(Debug)]
pub struct MergeOutcome {
    pub outcome: BenchOutcome,
    pub matrix: Matrix,
    pub hosts: Hosts,
    /// What the user should know (missing cells).
    pub notes: Vec<String>,
}

/// One input folder, read.
struct Input {
    dir: PathBuf,
    doc: ShardDoc,
    records: Vec<CellRecord>,
    settings: BTreeMap<String, settings::CellSettings>,
}

fn read_input(dir: &Path) -> Result<Input, MergeError> {
    let refused = MergeError::Refused;
    if !dir.is_dir() {
        return Err(refused(format!(
            "{}: not a directory (an output folder of pacer bench)",
            dir.display()
        )));
    }
    let doc = shard::read(dir).map_err(refused)?.ok_or_else(|| {
        refused(format!(
            "{}: no {} (not an output folder of pacer bench, or of a Pacer older than shards), so nothing shows which matrix it ran",
            dir.display(),
            shard::FILE
        ))
    })?;
    let jsonl = dir.join(store::JSONL);
    let (records, _) = store::read_jsonl(&jsonl).map_err(|e| match e {
        StoreError::Unreadable { path, source } => {
            refused(format!("cannot read {}: {source}", path.display()))
        }
        other => refused(other.to_string()),
    })?;
    let settings = settings::read(dir)
        .map_err(|e| refused(e.replacen("--resume: ", "", 1)))?
        .ok_or_else(|| {
            refused(format!(
                "{}: no {}, so nothing shows what its cells ran",
                dir.display(),
                settings::FILE
            ))
        })?;
    Ok(Input {
        dir: dir.to_path_buf(),
        doc,
        records,
        settings,
    })
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Merge `inputs` into `out`. `matrix`: the matrix file (default: the
/// one the first folder's `shard.json` names).
pub fn merge(
    inputs: &[PathBuf],
    out: &Path,
    matrix: Option<&Path>,
) -> Result<MergeOutcome, MergeError> {
    let refused = MergeError::Refused;
    let inputs: Vec<Input> = inputs
        .iter()
        .map(|d| read_input(d))
        .collect::<Result<_, _>>()?;
    let Some(first) = inputs.first() else {
        return Err(refused("no folder to merge".into()));
    };
    for i in &inputs {
        if same_dir(&i.dir, out) {
            return Err(refused(format!(
                "--out-dir {} is one of the folders to merge; choose another --out-dir",
                out.display()
            )));
        }
        if i.doc.matrix_digest != first.doc.matrix_digest {
            return Err(refused(format!(
                "{} ran another matrix than {}: digest {} ({}) against {} ({}); merge only folders of one matrix",
                i.dir.display(),
                first.dir.display(),
                i.doc.matrix_digest,
                i.doc.matrix,
                first.doc.matrix_digest,
                first.doc.matrix
            )));
        }
    }
    let digest = first.doc.matrix_digest.clone();
    let matrix_path = matrix.map_or_else(|| PathBuf::from(&first.doc.matrix), Path::to_path_buf);
    let m = Matrix::load(&matrix_path).map_err(|e| {
        refused(format!(
            "{e}{}",
            if matrix.is_none() {
                format!(
                    " (the matrix {} names; pass --matrix FILE if it is elsewhere here)",
                    first.dir.join(shard::FILE).display()
                )
            } else {
                String::new()
            }
        ))
    })?;
    let now = shard::matrix_digest(&m);
    if now != digest {
        return Err(refused(format!(
            "{} now has digest {now}, but the folders ran digest {digest}: the matrix changed since; pass --matrix with the file they ran",
            matrix_path.display()
        )));
    }
    let all = cells::expand(&m);
    let view = MatrixView::of(&m);
    let position: HashMap<String, usize> =
        all.iter().enumerate().map(|(k, c)| (c.id(&m), k)).collect();
    let expected: HashMap<String, settings::CellSettings> = all
        .iter()
        .map(|c| (c.id(&m), settings::of(&m, &view, c)))
        .collect();

    // Every cell once per machine kind, with the matrix's settings.
    let mut seen: HashMap<(String, String), &Path> = HashMap::new();
    let mut merged: Vec<(usize, usize, CellRecord)> = Vec::new();
    let mut kinds: Vec<String> = Vec::new();
    let mut notes = Vec::new();
    for (n, input) in inputs.iter().enumerate() {
        for r in &input.records {
            let Some(&pos) = position.get(&r.id) else {
                return Err(refused(format!(
                    "{}: cell {} is not a cell of {}",
                    input.dir.join(store::JSONL).display(),
                    r.id,
                    matrix_path.display()
                )));
            };
            let ran = input.settings.get(&r.id).ok_or_else(|| {
                refused(format!(
                    "{}: no settings for cell {}, so nothing shows it ran this matrix",
                    input.dir.join(settings::FILE).display(),
                    r.id
                ))
            })?;
            let want = &expected[&r.id];
            if ran.digest != want.digest {
                return Err(refused(format!(
                    "{}: cell {} ran other settings than {} gives it ({})",
                    input.dir.display(),
                    r.id,
                    matrix_path.display(),
                    settings::differences(&ran.settings, &want.settings, 4)
                )));
            }
            let kind = hosts::kind_of(r);
            if let Some(other) = seen.insert((r.id.clone(), kind.clone()), &input.dir) {
                return Err(refused(format!(
                    "cell {} is in both {} and {} on the same kind of machine ({kind}): a cell is merged once per machine kind; leave one of the folders out",
                    r.id,
                    other.display(),
                    input.dir.display()
                )));
            }
            if !kinds.contains(&kind) {
                kinds.push(kind.clone());
            }
            let k = kinds.iter().position(|x| *x == kind).unwrap_or(0);
            merged.push((pos, k, r.clone()));
        }
        let spec = input.doc.shard;
        let have: HashSet<&str> = input.records.iter().map(|r| r.id.as_str()).collect();
        let missing = all
            .iter()
            .enumerate()
            .filter(|(k, c)| spec.holds(*k) && !have.contains(c.id(&m).as_str()))
            .count();
        if missing > 0 {
            notes.push(format!(
                "{} (shard {spec}, input {}): {missing} of its {} cells are not recorded (it was stopped?); continue it with --resume, then merge again",
                input.dir.display(),
                n + 1,
                input.doc.cells
            ));
        }
    }
    let covered = merged
        .iter()
        .map(|(pos, _, _)| *pos)
        .collect::<HashSet<usize>>()
        .len();
    if covered < all.len() {
        notes.push(format!(
            "{} of the matrix's {} cells are in none of the folders (a shard not given?)",
            all.len() - covered,
            all.len()
        ));
    }
    merged.sort_by_key(|(pos, kind, _)| (*pos, *kind));
    let mut records: Vec<CellRecord> = merged.into_iter().map(|(_, _, r)| r).collect();

    // Write the folder as a run would.
    let mut store = Store::open(out, false).map_err(|e| match e {
        e @ StoreError::NotEmpty(_) => refused(e.to_string().replace(
            "pass --resume to continue that run, or choose another --out-dir",
            "choose another --out-dir (a merge writes a folder of its own)",
        )),
        other => MergeError::Write(other.to_string()),
    })?;
    let write_err = |e: String| MergeError::Write(e);
    for r in &records {
        settings::append(out, &expected[&r.id])
            .map_err(|e| write_err(format!("{}: {e}", out.join(settings::FILE).display())))?;
        store
            .append(r.clone())
            .map_err(|e| write_err(e.to_string()))?;
    }
    let mut doc = ShardDoc::new(&m, digest, ShardSpec::WHOLE, covered);
    doc.merged_from = inputs
        .iter()
        .map(|i| MergedShard {
            dir: std::path::absolute(&i.dir)
                .unwrap_or_else(|_| i.dir.clone())
                .display()
                .to_string(),
            shard: i.doc.shard,
            cells: i.records.len(),
        })
        .collect();
    shard::write(out, &doc).map_err(write_err)?;
    let text = vmm::input::read_config_text(&m.path, "a matrix").unwrap_or_default();
    let copy = out.join("matrix.toml");
    vmm::whole_file::write(&copy, text)
        .map_err(|e| write_err(format!("{}: {e}", copy.display())))?;
    let hosts = Hosts::of(&records);
    hosts.relabel(&mut records);
    let outcome = write_outputs(&m, &records, out, None, Some(&hosts)).map_err(|e| match e {
        RunMatrixError::Store(e) => write_err(e.to_string()),
        other => write_err(other.to_string()),
    })?;
    Ok(MergeOutcome {
        outcome,
        matrix: m,
        hosts,
        notes,
    })
}
