//! Shards: a matrix split over hosts (`pacer bench MATRIX --shard I/N`).
//!
//! Shard I of N runs the cells whose position in the interleaved order
//! (`cells::expand`) is I-1 modulo N: every cell is in exactly one shard
//! for any N, shard sizes differ by at most one cell, and each shard keeps
//! the interleaving (policies rotate within it as in a whole run). The
//! split depends only on the matrix, so every host computes the same one.
//!
//! Every output folder records which part of which matrix it holds in
//! `shard.json` (a whole run is shard 1/1): the matrix's path and digest
//! (FNV-1a over every cell's id and settings digest, `settings.rs`: what
//! the cells run, not the file's comments) and I/N. `pacer bench merge`
//! refuses folders of different digests. `--resume` of a shard must name
//! the same I/N and run the same matrix (by digest): with another matrix
//! the split itself moves and cells would land in two shards or none. A
//! whole run (1/1) may resume with a matrix that adds cells, as before
//! shards existed (`run.rs` checks the finished cells' settings).

use super::cells::{self, Cell};
use super::matrix::Matrix;
use super::settings;
use crate::documents::matrix::MatrixView;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The file in every output folder.
pub const FILE: &str = "shard.json";

/// Shard `index` (1-based) of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardSpec {
    pub index: u32,
    pub count: u32,
}

impl ShardSpec {
    /// The whole matrix.
    pub const WHOLE: ShardSpec = ShardSpec { index: 1, count: 1 };

    /// Whether the cell at `position` of the interleaved order is in this
    /// shard.
    pub fn holds(&self, position: usize) -> bool {
        position % self.count as usize == (self.index - 1) as usize
    }

    /// The cells of `all` (in the interleaved order) this shard runs.
    pub fn select(&self, all: &[Cell]) -> Vec<Cell> {
        all.iter()
            .enumerate()
            .filter(|(k, _)| self.holds(*k))
            .map(|(_, c)| *c)
            .collect()
    }
}

impl std::fmt::Display for ShardSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl std::str::FromStr for ShardSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<ShardSpec, String> {
        let bad = || format!("expected I/N with 1 <= I <= N (shard I of N, e.g. 2/4), found {s:?}");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let index: u32 = i.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if index == 0 || count == 0 || index > count {
            return Err(bad());
        }
        Ok(ShardSpec { index, count })
    }
}

/// The digest of what the matrix's cells run: FNV-1a over `id = digest`
/// of every cell's settings.
pub fn matrix_digest(m: &Matrix) -> String {
    let view = MatrixView::of(m);
    let cells: BTreeMap<String, String> = cells::expand(m)
        .iter()
        .map(|c| {
            let s = settings::of(m, &view, c);
            (s.id, s.digest)
        })
        .collect();
    settings::digest(&cells)
}

/// Where a folder's cells came from: one line of [`ShardDoc::merged_from`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MergedShard {
    pub dir: String,
    pub shard: ShardSpec,
    pub cells: usize,
}

/// `shard.json`, a `pacer-bench-shard` document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardDoc {
    #[serde(flatten)]
    pub header: vmm::documents::Header,
    /// The matrix file as given (absolute).
    pub matrix: String,
    pub matrix_digest: String,
    pub shard: ShardSpec,
    /// How many cells of the matrix the shard holds.
    pub cells: usize,
    /// For a merged folder: the folders merged into it (else empty).
    #[serde(default)]
    pub merged_from: Vec<MergedShard>,
}

impl ShardDoc {
    pub fn new(m: &Matrix, digest: String, shard: ShardSpec, cells: usize) -> ShardDoc {
        ShardDoc {
            header: vmm::documents::Header::new(vmm::documents::BENCH_SHARD),
            matrix: std::path::absolute(&m.path)
                .unwrap_or_else(|_| m.path.clone())
                .display()
                .to_string(),
            matrix_digest: digest,
            shard,
            cells,
            merged_from: Vec::new(),
        }
    }
}

/// Read `dir`'s [`FILE`]; None if there is none.
pub fn read(dir: &Path) -> Result<Option<ShardDoc>, String> {
    let path = dir.join(FILE);
    let bytes = match vmm::input::read_regular_file(&path, 1 << 20, "a shard.json") {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        format!(
            "{}:{}:{}: not a shard.json of pacer bench ({}); restore it, or run into another --out-dir",
            path.display(),
            e.line(),
            e.column(),
            if e.is_data() {
                "not its shape"
            } else {
                "not JSON"
            }
        )
    })
}

/// Write `doc` as `dir`'s [`FILE`].
pub fn write(dir: &Path, doc: &ShardDoc) -> Result<(), String> {
    let path = dir.join(FILE);
    let text = serde_json::to_string_pretty(doc).map_err(|e| e.to_string())? + "\n";
    vmm::whole_file::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// On `--resume`: whether `dir` (with `finished` cells) may continue as
/// `now`. Refused (with what to do) when the shard or, for a shard of
/// more than one, the matrix differs.
pub fn check_resume(
    dir: &Path,
    recorded: Option<&ShardDoc>,
    finished: usize,
    now: &ShardDoc,
) -> Result<(), String> {
    let file = dir.join(FILE);
    let Some(old) = recorded else {
        if finished > 0 && now.shard != ShardSpec::WHOLE {
            return Err(format!(
                "--resume --shard {}: {} has {finished} finished cell(s) but no {FILE}, so nothing shows which shard they belong to; run the shard into another --out-dir",
                now.shard,
                dir.display()
            ));
        }
        return Ok(());
    };
    if !old.merged_from.is_empty() {
        return Err(format!(
            "--resume: {} is the output of pacer bench merge ({}), not of a run; resume the shards, then merge again",
            dir.display(),
            file.display()
        ));
    }
    if old.shard != now.shard {
        let flag = |s: ShardSpec| {
            if s == ShardSpec::WHOLE {
                "no --shard (the whole matrix)".to_string()
            } else {
                format!("--shard {s}")
            }
        };
        return Err(format!(
            "--resume: {} holds shard {} of the matrix ({}), this run asks for {}; resume it with {}, or run into another --out-dir",
            dir.display(),
            old.shard,
            file.display(),
            flag(now.shard),
            flag(old.shard)
        ));
    }
    if old.shard != ShardSpec::WHOLE && old.matrix_digest != now.matrix_digest {
        return Err(format!(
            "--resume --shard {}: {} was run with a matrix of digest {} ({}), this one has digest {} ({}): the split into shards would move cells between shards; restore the matrix, or run into another --out-dir",
            now.shard,
            dir.display(),
            old.matrix_digest,
            old.matrix,
            now.matrix_digest,
            now.matrix
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cell(k: usize) -> Cell {
        Cell {
            layout: k / 7,
            workload: k % 7,
            policy: k % 3,
            rep: 1,
        }
    }

    #[test]
    fn shard_spec_parses_and_refuses() {
        assert_eq!(
            "2/4".parse::<ShardSpec>(),
            Ok(ShardSpec { index: 2, count: 4 })
        );
        for bad in ["0/4", "5/4", "1/0", "x/2", "2", "1/2/3", ""] {
            let e = bad.parse::<ShardSpec>().unwrap_err();
            assert!(e.contains("expected I/N") && e.contains(bad), "{e}");
        }
        assert_eq!(ShardSpec { index: 3, count: 8 }.to_string(), "3/8");
    }

    proptest! {
        /// For any matrix size and N: every cell in exactly one shard, in
        /// the whole run's order, and sizes within one cell of each other.
        #[test]
        fn every_cell_in_exactly_one_balanced_shard(cells in 0usize..400, n in 1u32..40) {
            let all: Vec<Cell> = (0..cells).map(cell).collect();
            let mut seen = vec![0u32; cells];
            let mut sizes = Vec::new();
            for index in 1..=n {
                let spec = ShardSpec { index, count: n };
                let mine = spec.select(&all);
                // In the interleaved order: a subsequence of `all`.
                let positions: Vec<usize> = (0..cells).filter(|&k| spec.holds(k)).collect();
                prop_assert_eq!(mine.len(), positions.len());
                for (c, &k) in mine.iter().zip(&positions) {
                    prop_assert_eq!(*c, all[k]);
                    seen[k] += 1;
                }
                prop_assert!(positions.windows(2).all(|w| w[0] < w[1]));
                sizes.push(mine.len());
            }
            prop_assert!(seen.iter().all(|&s| s == 1), "{:?}", seen);
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            prop_assert!(hi - lo <= 1, "sizes {:?}", sizes);
        }
    }

    fn doc(shard: ShardSpec, digest: &str) -> ShardDoc {
        ShardDoc {
            header: vmm::documents::Header::new(vmm::documents::BENCH_SHARD),
            matrix: "/m.toml".into(),
            matrix_digest: digest.into(),
            shard,
            cells: 3,
            merged_from: Vec::new(),
        }
    }

    #[test]
    fn resume_needs_the_same_shard_and_for_a_shard_the_same_matrix() {
        let dir = Path::new("/out");
        let two = ShardSpec { index: 2, count: 3 };
        let one = ShardSpec { index: 1, count: 3 };
        // Same shard, same matrix: fine.
        assert!(check_resume(dir, Some(&doc(two, "a")), 2, &doc(two, "a")).is_ok());
        // Another shard of the same split: refused, naming both.
        let e = check_resume(dir, Some(&doc(two, "a")), 2, &doc(one, "a")).unwrap_err();
        assert!(
            e.contains("holds shard 2/3") && e.contains("--shard 1/3") && e.contains("--shard 2/3"),
            "{e}"
        );
        // A shard folder resumed as a whole run, and the other way round.
        let e =
            check_resume(dir, Some(&doc(two, "a")), 2, &doc(ShardSpec::WHOLE, "a")).unwrap_err();
        assert!(e.contains("no --shard (the whole matrix)"), "{e}");
        let e =
            check_resume(dir, Some(&doc(ShardSpec::WHOLE, "a")), 2, &doc(two, "a")).unwrap_err();
        assert!(e.contains("holds shard 1/1"), "{e}");
        // A shard with another matrix: refused; a whole run may grow.
        let e = check_resume(dir, Some(&doc(two, "a")), 2, &doc(two, "b")).unwrap_err();
        assert!(e.contains("digest a") && e.contains("digest b"), "{e}");
        let whole = ShardSpec::WHOLE;
        assert!(check_resume(dir, Some(&doc(whole, "a")), 2, &doc(whole, "b")).is_ok());
        // No shard.json: an older folder continues whole, never as a shard.
        assert!(check_resume(dir, None, 2, &doc(whole, "a")).is_ok());
        assert!(check_resume(dir, None, 0, &doc(two, "a")).is_ok());
        let e = check_resume(dir, None, 2, &doc(two, "a")).unwrap_err();
        assert!(e.contains("no shard.json"), "{e}");
        // A merged folder is not resumed.
        let mut merged = doc(whole, "a");
        merged.merged_from.push(MergedShard {
            dir: "/s1".into(),
            shard: one,
            cells: 1,
        });
        let e = check_resume(dir, Some(&merged), 2, &doc(whole, "a")).unwrap_err();
        assert!(e.contains("pacer bench merge"), "{e}");
    }
}
