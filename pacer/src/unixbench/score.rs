//! Scoring as UnixBench's System Benchmarks Index does it.
//!
//! - A test's score: its pass scores sorted best first, the worst third
//!   (`n / 3` passes, integer division) dropped, the geometric mean of the
//!   rest. 10 passes keep 7, 3 keep 2, 1 or 2 keep all.
//! - A test's index: score / baseline x 10.
//! - The index: the geometric mean of the test indexes, over the tests
//!   that produced a score (all twelve for a full index; fewer makes a
//!   partial index, which the table says).

use serde::Serialize;
use vmm::unixbench::catalog::{self, TestInfo};
use vmm::unixbench::parse::Run;

/// Geometric mean of positive finite values; `None` for an empty slice or
/// any value that is not positive and finite.
pub fn geometric_mean(values: &[f64]) -> Option<f64> {
    if values.is_empty() || values.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
        return None;
    }
    let log_sum: f64 = values.iter().map(|v| v.ln()).sum();
    Some((log_sum / values.len() as f64).exp())
}

/// A test's score from its passes (see the module comment).
pub fn test_score(passes: &[f64]) -> Option<f64> {
    let mut sorted: Vec<f64> = passes.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let keep = sorted.len() - sorted.len() / 3;
    geometric_mean(&sorted[..keep])
}

/// A test's index.
pub fn test_index(score: f64, baseline: f64) -> f64 {
    score / baseline * 10.0
}

/// One row of the table, and one test of a run in the `pacer-unixbench`
/// document (`documents::unixbench`): the same fields in the same order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub test: &'static str,
    pub title: &'static str,
    pub unit: &'static str,
    pub baseline: f64,
    pub passes: usize,
    pub failed_passes: usize,
    /// `None` (null) if no pass produced a score.
    pub score: Option<f64>,
    pub index: Option<f64>,
}

/// A scored run (one copy count).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub copies: u32,
    pub cpus: u32,
    /// Rows of the tests that appear in the run, in catalog order.
    pub rows: Vec<Row>,
    /// Geometric mean of the rows' indexes.
    pub index: Option<f64>,
    pub tests_scored: usize,
    /// All twelve tests scored.
    pub full: bool,
    pub complete: bool,
}

fn row(t: &'static TestInfo, run: &Run) -> Option<Row> {
    let passes = run.passes.get(t.name).map(Vec::as_slice).unwrap_or(&[]);
    let failed = run.errors.iter().filter(|e| e.0 == t.name).count();
    if passes.is_empty() && failed == 0 {
        return None;
    }
    let score = test_score(passes);
    Some(Row {
        test: t.name,
        title: t.title,
        unit: t.unit,
        baseline: t.baseline,
        passes: passes.len(),
        failed_passes: failed,
        score,
        index: score.map(|s| test_index(s, t.baseline)),
    })
}

/// Score one run.
pub fn summarize(run: &Run) -> Summary {
    let rows: Vec<Row> = catalog::TESTS.iter().filter_map(|t| row(t, run)).collect();
    let indexes: Vec<f64> = rows.iter().filter_map(|r| r.index).collect();
    Summary {
        copies: run.copies,
        cpus: run.cpus,
        index: geometric_mean(&indexes),
        tests_scored: indexes.len(),
        full: indexes.len() == catalog::TESTS.len(),
        complete: run.complete,
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmm::unixbench::parse::parse_log;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn worst_third_dropped_then_geometric_mean() {
        // 3 passes: 400, 100, 25 -> drop 1 (25) -> sqrt(400 * 100) = 200
        assert!(close(test_score(&[100.0, 400.0, 25.0]).unwrap(), 200.0));
        // 10 passes 2^1..2^10 (shuffled): drop 3 (2, 4, 8), keep 2^4..2^10:
        // 2^((4+5+...+10)/7) = 2^(49/7) = 2^7 = 128
        let p: Vec<f64> = [7, 1, 10, 3, 5, 9, 2, 8, 4, 6]
            .iter()
            .map(|&k| 2f64.powi(k))
            .collect();
        assert!(close(test_score(&p).unwrap(), 128.0));
        // 1 pass keeps it; 2 passes keep both: sqrt(9 * 4) = 6
        assert!(close(test_score(&[42.0]).unwrap(), 42.0));
        assert!(close(test_score(&[9.0, 4.0]).unwrap(), 6.0));
        // 6 passes drop 2: sorted best first [16, 16, 2, 2, 1, 1] -> keep
        // [16, 16, 2, 2] -> (16 * 16 * 2 * 2)^(1/4) = 1024^(1/4) = 4 * sqrt(2)
        assert!(close(
            test_score(&[1.0, 16.0, 2.0, 1.0, 2.0, 16.0]).unwrap(),
            4.0 * 2f64.sqrt()
        ));
        assert_eq!(test_score(&[]), None);
        assert_eq!(geometric_mean(&[1.0, 0.0]), None);
        assert_eq!(geometric_mean(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn index_formula_on_a_recorded_log() {
        // A recorded guest console log (kernel lines, a repeated marker)
        // with two tests of one copy:
        // dhry2reg, 3 passes given (as a short run): 466800, 466800, 100
        //   -> drop 100 -> score 466800 = 4 x baseline 116700 -> index 40
        // whetstone-double: 3 passes 495, 495, 1 -> score 495 = 9 x 55 -> index 90
        // index = sqrt(40 * 90) = sqrt(3600) = 60
        let log = parse_log(
            "[    0.512345] Run /init as init process\n\
             UB init kernel=6.1.0-56-amd64 cpus=2 mem_kib=1000000 suite=pacer-ubench-style-1\n\
             UB begin suite=pacer-ubench-style version=1 cpus=2 copies=1 passes=3,3 seconds=default tests=dhry2reg,whetstone-double\n\
             UB test=dhry2reg copies=1 pass=1 score=466800.000 unit=lps seconds=10.000 count=4668000\n\
             [    3.100000] clocksource: Switched to clocksource tsc\n\
             UB test=dhry2reg copies=1 pass=2 score=100.000 unit=lps seconds=10.000 count=1000\n\
             UB test=dhry2reg copies=1 pass=3 score=466800.000 unit=lps seconds=10.000 count=4668000\n\
             UB test=whetstone-double copies=1 pass=1 score=495.000 unit=MWIPS seconds=10.000 count=4950\n\
             UB test=whetstone-double copies=1 pass=2 score=1.000 unit=MWIPS seconds=10.000 count=10\n\
             UB test=whetstone-double copies=1 pass=3 score=495.000 unit=MWIPS seconds=10.000 count=4950\n\
             UB end copies=1 status=ok errors=0 seconds=60.0\n",
        );
        let s = summarize(log.run_for(1).unwrap());
        assert_eq!(s.rows.len(), 2);
        assert!(close(s.rows[0].score.unwrap(), 466800.0));
        assert!(close(s.rows[0].index.unwrap(), 40.0));
        assert!(close(s.rows[1].index.unwrap(), 90.0));
        assert!(close(s.index.unwrap(), 60.0));
        assert_eq!(s.tests_scored, 2);
        assert!(!s.full && s.complete);
    }

    #[test]
    fn failed_tests_are_listed_but_not_indexed() {
        // syscall: 1 pass 150000 -> index 150000 / 15000 x 10 = 100
        // spawn: every pass failed -> no score, not in the index
        let log = parse_log(
            "UB test=syscall copies=2 pass=1 score=150000 unit=lps\n\
             UB error test=spawn copies=2 pass=1 msg=timeout\n",
        );
        let s = summarize(log.run_for(2).unwrap());
        assert_eq!(s.rows.len(), 2);
        let spawn = s.rows.iter().find(|r| r.test == "spawn").unwrap();
        assert_eq!((spawn.score, spawn.failed_passes), (None, 1));
        assert!(close(s.index.unwrap(), 100.0));
        assert_eq!(s.tests_scored, 1);
    }
}
