//! What the simulator's integration tests share.

use std::path::PathBuf;

/// The scenario files of `vcpu_sched/scenarios/`, sorted.
pub fn scenario_files() -> Vec<PathBuf> {
    let dir = format!("{}/scenarios", env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    files
}
