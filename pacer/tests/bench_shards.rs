//! `pacer bench --shard I/N` and `pacer bench merge` end to end, through
//! the binary: two shards of a tiny matrix merge to exactly the cells (and
//! settings) of a whole run on this host; `--resume` keeps to its shard;
//! a merge refuses a cell twice, another matrix and a used --out-dir; cells
//! of two kinds of machine are shown side by side; --only-policy picks
//! within a shard and a resume of that shard runs the rest.

mod common;

use common::{kvm_or_skip, pacer, TempDir};
use pacer::bench::settings;
use pacer::bench::shard::{self, ShardSpec};
use pacer::bench::store::read_jsonl;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn matrix(dir: &Path) -> PathBuf {
    common::write_matrix(dir, &common::one_vm_matrix("tiny", 2, 150))
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A folder's cells: id -> settings digest, and each record has host facts.
fn cells(dir: &Path) -> BTreeMap<String, String> {
    let (records, _) = read_jsonl(&dir.join("results.jsonl")).unwrap();
    let ran = settings::read(dir).unwrap().unwrap();
    let mut out = BTreeMap::new();
    for r in records {
        let h = r.host.as_ref().expect("host facts recorded");
        assert!(!h.name.is_empty() && !h.kernel.is_empty(), "{h:?}");
        assert!(h.topology.is_some(), "{h:?}");
        let digest = ran[&r.id].digest.clone();
        assert!(out.insert(r.id, digest).is_none(), "a cell twice");
    }
    out
}

fn bench(args: &[&str]) -> (i32, String) {
    let (code, out, err) = pacer(args);
    (code, format!("{out}{err}"))
}

#[test]
fn two_shards_merge_to_the_cells_of_a_whole_run() {
    if !kvm_or_skip("two_shards_merge_to_the_cells_of_a_whole_run") {
        return;
    }
    let dir = TempDir::new("bench-shards");
    let m = matrix(&dir.0);
    let whole = dir.0.join("whole");
    let (s1, s2) = (dir.0.join("s1"), dir.0.join("s2"));
    let (code, text) = bench(&["bench", s(&m), "--out-dir", s(&whole), "-q"]);
    assert_eq!(code, 0, "{text}");
    for (d, i) in [(&s1, "1/2"), (&s2, "2/2")] {
        let (code, text) = bench(&["bench", s(&m), "--shard", i, "--out-dir", s(d), "-q"]);
        assert_eq!(code, 0, "{text}");
        let doc = shard::read(d).unwrap().unwrap();
        assert_eq!(doc.shard.to_string(), i);
        assert_eq!(doc.cells, 2);
    }
    let (a, b) = (cells(&s1), cells(&s2));
    assert_eq!(a.len(), 2);
    assert_eq!(b.len(), 2);
    assert!(a.keys().all(|k| !b.contains_key(k)), "{a:?} {b:?}");
    // Every shard and the whole run name the same matrix digest.
    let digest = |d: &Path| shard::read(d).unwrap().unwrap().matrix_digest;
    assert_eq!(digest(&s1), digest(&whole));
    assert_eq!(digest(&s2), digest(&whole));
    assert_eq!(
        shard::read(&whole).unwrap().unwrap().shard,
        ShardSpec::WHOLE
    );

    // --resume keeps to its shard: the other one is refused, its own has
    // nothing left to do.
    let (code, text) = bench(&[
        "bench",
        s(&m),
        "--shard",
        "2/2",
        "--out-dir",
        s(&s1),
        "--resume",
    ]);
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("holds shard 1/2") && text.contains("--shard 1/2"),
        "{text}"
    );
    let (code, text) = bench(&["bench", s(&m), "--out-dir", s(&s1), "--resume"]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("no --shard (the whole matrix)"), "{text}");
    let (code, text) = bench(&[
        "bench",
        s(&m),
        "--shard",
        "1/2",
        "--out-dir",
        s(&s1),
        "--resume",
    ]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("2 already done (resumed)"), "{text}");
    assert_eq!(cells(&s1), a, "nothing ran again");

    // The merge: exactly the whole run's cells, with its settings.
    let merged = dir.0.join("merged");
    let (code, text) = bench(&["bench", "merge", s(&s1), s(&s2), "--out-dir", s(&merged)]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(cells(&merged), cells(&whole));
    for f in ["summary.json", "report.html", "results.csv", "matrix.toml"] {
        assert!(merged.join(f).is_file(), "{f}");
    }
    let doc = shard::read(&merged).unwrap().unwrap();
    assert_eq!(doc.merged_from.len(), 2);
    assert_eq!(doc.matrix_digest, digest(&whole));
    assert!(
        text.contains("== one / cpu") && !text.contains("side by side"),
        "{text}"
    );
    // Its summary groups are the whole run's (one host: no host labels).
    let groups = |d: &Path| {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(d.join("summary.json")).unwrap())
                .unwrap();
        v["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| (g["layout"].clone(), g["workload"].clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(groups(&merged), groups(&whole));

    // Refused, nothing written: a cell twice, another matrix, a used --out-dir.
    let again = dir.0.join("again");
    let (code, text) = bench(&["bench", "merge", s(&s1), s(&s1), "--out-dir", s(&again)]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("is in both"), "{text}");
    assert!(!again.exists());
    let other = dir.0.join("other");
    copy_dir(&s2, &other);
    let mut doc = shard::read(&other).unwrap().unwrap();
    doc.matrix_digest = "0123456789abcdef".into();
    shard::write(&other, &doc).unwrap();
    let (code, text) = bench(&["bench", "merge", s(&s1), s(&other), "--out-dir", s(&again)]);
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("ran another matrix") && text.contains("0123456789abcdef"),
        "{text}"
    );
    assert!(!again.exists());
    let (code, text) = bench(&["bench", "merge", s(&s1), "--out-dir", s(&merged)]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("already holds results"), "{text}");
    // A shard alone: merged, and the missing cells named.
    let (code, text) = bench(&["bench", "merge", s(&s1), "--out-dir", s(&again)]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("2 of the matrix's 4 cells are in none of the folders"),
        "{text}"
    );

    // The whole run again "on another kind of machine": side by side.
    let elsewhere = dir.0.join("elsewhere");
    copy_dir(&whole, &elsewhere);
    let jsonl = elsewhere.join("results.jsonl");
    let text = std::fs::read_to_string(&jsonl).unwrap();
    let moved: String = text
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["host"]["name"] = "bignode".into();
            v["host"]["topology"]["sockets"] = 2.into();
            v["host"]["topology"]["threads_per_core"] = 2.into();
            v.to_string() + "\n"
        })
        .collect();
    std::fs::write(&jsonl, moved).unwrap();
    let both = dir.0.join("both");
    let (code, text) = bench(&[
        "bench",
        "merge",
        s(&whole),
        s(&elsewhere),
        "--out-dir",
        s(&both),
    ]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("== one @ bignode / cpu"), "{text}");
    assert!(text.contains("== one / cpu: hosts side by side"), "{text}");
    assert!(
        text.contains("2 sockets") && text.contains("SMT2"),
        "{text}"
    );
    let report = std::fs::read_to_string(both.join("report.html")).unwrap();
    assert!(report.contains("Hosts side by side") && report.contains("bignode"));
    assert_eq!(read_jsonl(&both.join("results.jsonl")).unwrap().0.len(), 8);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[test]
fn bad_shard_and_slurm_flags_are_bad_input() {
    let dir = TempDir::new("bench-shard-flags");
    let m = matrix(&dir.0);
    let out = dir.0.join("out");
    for (args, needle) in [
        (vec!["--shard", "3/2"], "expected I/N"),
        (
            vec!["--shard", "1/2", "--slurm", "--shards", "2"],
            "cannot be used with",
        ),
        (vec!["--slurm"], "--shards"),
        (vec!["--shards", "2"], "--slurm"),
        (vec!["--slurm", "--shards", "0"], "0"),
        (
            vec!["--slurm", "--shards", "2", "--partition", "a b"],
            "--partition",
        ),
    ] {
        let mut all = vec!["bench", s(&m), "--out-dir", s(&out)];
        all.extend(args.iter().copied());
        let (code, text) = bench(&all);
        assert_eq!(code, 2, "{all:?}: {text}");
        assert!(text.contains(needle), "{all:?}: {text}");
    }
    assert!(!out.exists(), "nothing written");
    // --dry-run prints both scripts and submits nothing.
    let (code, text) = bench(&[
        "bench",
        s(&m),
        "--out-dir",
        s(&out),
        "--slurm",
        "--shards",
        "2",
        "--partition",
        "lab",
        "--dry-run",
    ]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("#SBATCH --array=0-1") && text.contains("#SBATCH --partition=lab"),
        "{text}"
    );
    assert!(
        text.contains("--dependency=afterok:") && text.contains("bench merge"),
        "{text}"
    );
    assert!(!out.exists(), "nothing written");
    // A shard's dry run lists its cells only.
    let (code, text) = bench(&[
        "bench",
        s(&m),
        "--out-dir",
        s(&out),
        "--shard",
        "2/2",
        "--dry-run",
    ]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(
        text.lines().filter(|l| l.contains("one/cpu/")).count(),
        2,
        "{text}"
    );
}

/// The cell ids `pacer bench --dry-run` lists for `extra` (in run order).
fn listed(m: &Path, out: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = vec!["bench", s(m), "--out-dir", s(out), "--dry-run"];
    args.extend_from_slice(extra);
    let (code, text) = bench(&args);
    assert_eq!(code, 0, "{text}");
    text.lines()
        .filter_map(|l| {
            let (n, id) = l.trim_start().split_once(' ')?;
            n.parse::<usize>().ok().map(|_| id.trim().to_string())
        })
        .collect()
}

#[test]
fn only_filters_pick_within_a_shard_and_resume_runs_the_rest() {
    let dir = TempDir::new("bench-shard-only");
    let m = matrix(&dir.0);
    let out = dir.0.join("s1");
    // The filter picks from the shard's cells; it never moves the split.
    let shard1 = listed(&m, &out, &["--shard", "1/2"]);
    assert_eq!(shard1.len(), 2, "{shard1:?}");
    let policy = shard1[0].split('/').nth(2).unwrap().to_string();
    let picked = listed(&m, &out, &["--shard", "1/2", "--only-policy", &policy]);
    let want: Vec<String> = shard1
        .iter()
        .filter(|id| id.split('/').nth(2) == Some(policy.as_str()))
        .cloned()
        .collect();
    assert_eq!(picked, want);
    // --slurm runs whole shards: a filter is refused before anything.
    let (code, text) = bench(&[
        "bench",
        s(&m),
        "--slurm",
        "--shards",
        "2",
        "--only-layout",
        "one",
        "--out-dir",
        s(&out),
        "--dry-run",
    ]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("--slurm runs every cell"), "{text}");
    assert!(!out.exists());

    if !kvm_or_skip("only_filters_pick_within_a_shard_and_resume_runs_the_rest") {
        return;
    }
    let (code, text) = bench(&[
        "bench",
        s(&m),
        "--shard",
        "1/2",
        "--only-policy",
        &policy,
        "--out-dir",
        s(&out),
        "-q",
    ]);
    assert_eq!(code, 0, "{text}");
    let ran: Vec<String> = cells(&out).into_keys().collect();
    let mut want_sorted = want.clone();
    want_sorted.sort();
    assert_eq!(ran, want_sorted);
    // shard.json names the shard (all of its cells), not the filter.
    let doc = shard::read(&out).unwrap().unwrap();
    assert_eq!((doc.shard.to_string(), doc.cells), ("1/2".to_string(), 2));
    // Another shard is still refused, filter or not.
    let (code, text) = bench(&[
        "bench",
        s(&m),
        "--shard",
        "2/2",
        "--only-policy",
        &policy,
        "--out-dir",
        s(&out),
        "--resume",
    ]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("holds shard 1/2"), "{text}");
    // The same shard without the filter runs exactly the rest of it.
    let (code, text) = bench(&[
        "bench",
        s(&m),
        "--shard",
        "1/2",
        "--out-dir",
        s(&out),
        "--resume",
        "-q",
    ]);
    assert_eq!(code, 0, "{text}");
    let mut all1 = shard1.clone();
    all1.sort();
    assert_eq!(cells(&out).into_keys().collect::<Vec<_>>(), all1);
}
