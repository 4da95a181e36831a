//! A short fuzzing pass over every target (part of `cargo test`): 0
//! findings, and every saved finding of the past replays clean
//! (`regressions/<target>/*`). `ci/fuzz.sh N` runs the long passes.

use pacer_fuzz::driver::{fuzz, run_one, Options};
use pacer_fuzz::targets;
use std::time::Duration;

/// Inputs per target in the test suite (seconds in a debug build).
const SHORT: u64 = 1500;

#[test]
fn every_target_survives_a_short_run() {
    let opts = Options {
        inputs: SHORT,
        seed: 11,
        findings_dir: None,
        hang_limit: Duration::from_secs(60),
        rss_cap_kib: 1 << 20,
    };
    let mut names = Vec::new();
    for mut t in targets::all() {
        let r = fuzz(t.as_mut(), &opts);
        assert_eq!(r.inputs, SHORT);
        assert!(
            r.findings.is_empty(),
            "{}: {:?}",
            r.target,
            r.findings
                .iter()
                .map(|f| (&f.what, f.input.len()))
                .collect::<Vec<_>>()
        );
        println!(
            "{}: {} inputs, {:.0}/CPU-s, peak RSS {} KiB",
            r.target,
            r.inputs,
            r.per_cpu_second(),
            r.max_rss_kib
        );
        names.push(r.target);
    }
    assert_eq!(
        names,
        ["config", "pio", "irqchip", "record", "elf", "api", "trace", "matrix"]
    );
}

#[test]
fn the_loader_cross_check_is_exercised() {
    let mut t = targets::elf::ElfTarget::new();
    let opts = Options {
        inputs: 600,
        ..Options::default()
    };
    let r = fuzz(&mut t, &opts);
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    // Mutants of the seeds that validate accepts are loaded and compared.
    println!("{} of 600 inputs cross-checked", t.cross_checked);
    assert!(
        t.cross_checked > 10,
        "only {} cross-checked",
        t.cross_checked
    );
}

#[test]
fn saved_findings_replay_clean() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions");
    let mut replayed = 0;
    for mut t in targets::all() {
        let dir = root.join(t.name());
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let input = std::fs::read(e.path()).unwrap();
            if let Err(what) = run_one(t.as_mut(), &input) {
                panic!("{}: {what}", e.path().display());
            }
            replayed += 1;
        }
    }
    println!("{replayed} saved inputs replayed");
}
