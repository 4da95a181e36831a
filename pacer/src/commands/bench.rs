//! `pacer bench MATRIX --out-dir DIR [--resume] [--dry-run] [--shard I/N]
//! [--only-policy P,..] [--only-layout L,..]`: the command around
//! [`run_matrix`](crate::bench::run_matrix); `pacer bench merge` and
//! `--slurm` are in [`super::bench_lab`]. Exit codes as `pacer run`:
//! 0 every cell ok or n/a, 1 a cell failed or timed out (or the run was
//! stopped), 2 bad input (matrix, or results already in DIR without
//! `--resume`).

use crate::bench::progress::Progress;
use crate::bench::run::{run_matrix, BenchOptions, RunMatrixError};
use crate::bench::select::Selection;
use crate::bench::shard::ShardSpec;
use crate::bench::store::StoreError;
use crate::bench::{cells, Matrix};
use crate::output::{out, EXIT_BAD_INPUT, EXIT_OK, EXIT_VM_FAILED};
use std::path::PathBuf;

/// The closing text of `pacer bench --help`.
pub const HELP: &str = "Examples:
  pacer bench benches/smoke.toml --out-dir target/bench/smoke              every policy, ~15 s
  pacer bench benches/seeds.toml --out-dir target/bench/seeds              the design's scenarios
  pacer bench benches/seeds.toml --out-dir target/bench/seeds --resume     continue a stopped run
  pacer bench benches/seeds.toml --out-dir /tmp/x --dry-run                list the cells only
  pacer bench benches/smoke.toml --out-dir target/bench/smoke --only-policy haiku,host --only-layout pair
                                     a subset now; --resume later runs the rest
  pacer bench benches/seeds.toml --shard 2/4 --out-dir /shared/seeds/s2     a quarter of the cells (any job runner)
  pacer bench merge /shared/seeds/s1 /shared/seeds/s2 --out-dir /shared/seeds/all   shards into one report
  pacer bench benches/seeds.toml --slurm --shards 4 --out-dir /shared/seeds   a Slurm job array and its merge

--only-policy and --only-layout pick from the cells this run holds: with
--shard I/N, from shard I's cells (the split is over the whole matrix, so
a filter never moves a cell to another shard). The cells left out stay to
run: --resume with the same --shard (with or without a filter) runs them.

The matrix format is in benches/README.md and docs/config-reference.md. The
table goes to stdout, the progress bar to stderr (hidden when it is not a
terminal or with -q); DIR gets results.jsonl, results.csv, summary.json
(schemas/), report.html, plots/ and each cell's logs/.

A policy is called the best of a layout only when a permutation test over
the repetitions finds it ahead of every other (p < 0.01, the means more
than 5 % apart); otherwise the table says \"not significant (p=...)\" and
about how many repetitions would be needed (at least 5 a policy).

Exit codes:
  0  every cell ok or n/a, and every baseline has an ok cell
  1  a cell failed or timed out, or the run was stopped (continue with --resume),
     or a baseline has no ok cell at all (every cell n/a, e.g. QEMU missing;
     --allow-missing-baseline accepts that)
  2  bad input: the matrix, results already in DIR without --resume, or
     --resume with a matrix that changed what finished cells ran (named),
     with finished cells whose settings are not in DIR/cell-settings.jsonl
     (an older Pacer's folder), or with files in DIR that cannot be read
     (a FIFO, a device, too large, a line that is not a cell record);
     --resume of a folder that holds another shard (DIR/shard.json), or
     of a shard with a matrix of another digest
  1  also: --slurm could not submit (sbatch failed)
  3  a result could not be written (full disk): the cell in flight is not
     recorded (continue with --resume once there is room)";

/// Arguments of `pacer bench`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: Option<super::bench_lab::BenchCommand>,
    /// The matrix file (TOML; see benches/README.md).
    #[arg(value_name = "MATRIX", required = true)]
    pub matrix: Option<PathBuf>,
    /// Where results.jsonl, results.csv, summary.json, report.html, plots/
    /// and logs/ go.
    #[arg(long, value_name = "DIR", required_unless_present = "out")]
    pub out_dir: Option<PathBuf>,
    /// Deprecated: --out-dir DIR (every other --out is a FILE).
    #[arg(long, value_name = "DIR", hide = true, conflicts_with = "out_dir")]
    pub out: Option<PathBuf>,
    /// Keep the finished cells already in --out-dir and run the others.
    #[arg(long)]
    pub resume: bool,
    /// Check the matrix and list its cells in run order; run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Run only the cells of these policies (the matrix's labels,
    /// comma-separated); the others stay to run later (--resume).
    #[arg(long, value_name = "POLICY,..", value_delimiter = ',')]
    pub only_policy: Vec<String>,
    /// Run only the cells of these layouts (comma-separated).
    #[arg(long, value_name = "LAYOUT,..", value_delimiter = ',')]
    pub only_layout: Vec<String>,
    /// Exit 0 even when a baseline policy has no ok cell at all (every
    /// cell n/a, e.g. QEMU missing): the ratios to it are all "-".
    #[arg(long)]
    pub allow_missing_baseline: bool,
    /// Run the VMs without the per-thread seccomp filters (for debugging).
    #[arg(long)]
    pub no_seccomp: bool,
    #[command(flatten)]
    pub lab: super::bench_lab::LabArgs,
}

/// Run `pacer bench`; returns the exit code.
pub fn main(args: BenchArgs) -> i32 {
    let Some(matrix) = args.matrix else {
        // clap requires it unless a subcommand is given.
        return match args.command {
            Some(c) => super::bench_lab::command(c),
            None => EXIT_BAD_INPUT,
        };
    };
    if args.out.is_some() {
        crate::output::deprecated("pacer bench --out DIR", "--out-dir DIR");
    }
    let Some(out_dir) = args.out_dir.clone().or(args.out.clone()) else {
        eprintln!("pacer bench: --out-dir DIR: missing");
        return EXIT_BAD_INPUT;
    };
    let m = match Matrix::load(&matrix) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("{e}");
            return EXIT_BAD_INPUT;
        }
    };
    let only = match Selection::of(&m, &args.only_policy, &args.only_layout) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("pacer bench: {e}");
            return EXIT_BAD_INPUT;
        }
    };
    if args.lab.slurm {
        if !only.is_all() {
            // The job array runs whole shards: a filter would leave cells
            // that no task runs and the merge job would report missing.
            eprintln!("pacer bench: --slurm runs every cell of the matrix; --only-policy/--only-layout cannot be given with it (run a subset on one host with --shard I/N --only-...)");
            return EXIT_BAD_INPUT;
        }
        return super::bench_lab::slurm(&m, &out_dir, &args.lab, args.dry_run);
    }
    let shard = args.lab.shard.unwrap_or(ShardSpec::WHOLE);
    if args.dry_run {
        let mut s = m.describe();
        let selected = shard
            .select(&cells::expand(&m))
            .into_iter()
            .filter(|c| only.contains(c));
        for (i, c) in selected.enumerate() {
            let na = c
                .static_na(&m)
                .map(|w| format!("  n/a ({w})"))
                .unwrap_or_default();
            s += &format!("{:>4} {}{na}\n", i + 1, c.id(&m));
        }
        out(&s);
        return EXIT_OK;
    }
    // Every VM thread confined; the thread that runs cell after cell
    // (and starts QEMU) is not.
    if !args.no_seccomp {
        let kinds = vmm::seccomp::ThreadKind::all_but_runner();
        if let Err(e) = vmm::seccomp::enable(kinds) {
            eprintln!("pacer bench: running without seccomp filters: {e}");
        }
    }
    let opts = BenchOptions {
        out: out_dir,
        resume: args.resume,
        shard,
        only,
    };
    let mut progress = Progress::new();
    let result = run_matrix(&m, &opts, &mut |ev| progress.event(&ev));
    progress.finish();
    let describe = |layout: &str| {
        m.layouts
            .iter()
            .find(|l| l.name == layout)
            .map(|l| l.describe())
    };
    match result {
        Ok(o) => {
            out(&o.summary.to_table(&describe));
            if let Some(why) = &o.plots_skipped {
                eprintln!("pacer bench: plots: {why}");
            }
            out(&format!("\nreport: {}\n", o.report.display()));
            let missing = missing_baselines(&o.summary);
            for (b, why) in &missing {
                eprintln!(
                    "pacer bench: baseline {b} has no ok cell ({why}): nothing to compare against{}",
                    if args.allow_missing_baseline {
                        " (allowed by --allow-missing-baseline)"
                    } else {
                        "; pass --allow-missing-baseline to accept"
                    }
                );
            }
            if o.failed > 0 {
                out(&format!(
                    "pacer bench: {} cell(s) failed or timed out\n",
                    o.failed
                ));
                EXIT_VM_FAILED
            } else if !missing.is_empty() && !args.allow_missing_baseline {
                EXIT_VM_FAILED
            } else {
                EXIT_OK
            }
        }
        Err(e @ RunMatrixError::Changed(_)) => {
            eprintln!("pacer bench: {e}");
            EXIT_BAD_INPUT
        }
        Err(RunMatrixError::Store(
            e
            @ (StoreError::NotEmpty(_) | StoreError::Unreadable { .. } | StoreError::Parse { .. }),
        )) => {
            eprintln!("pacer bench: {e}");
            EXIT_BAD_INPUT
        }
        Err(e @ (RunMatrixError::Store(StoreError::Io { .. }) | RunMatrixError::Report(_))) => {
            eprintln!("pacer bench: results not saved: {e}");
            crate::output::EXIT_WRITE_FAILED
        }
        Err(e) => {
            eprintln!("pacer bench: {e}");
            EXIT_VM_FAILED
        }
    }
}

/// The baselines that ran (their cells are in the summary) without one ok
/// cell in any group, with their cells' reasons: a column of ratios to
/// nothing.
pub fn missing_baselines(s: &crate::bench::summary::Summary) -> Vec<(String, String)> {
    s.baselines
        .iter()
        .filter_map(|b| {
            let rows: Vec<_> = s.groups.iter().filter_map(|g| g.row(b)).collect();
            if rows.is_empty() || rows.iter().any(|r| r.ok > 0) {
                return None;
            }
            let mut why: Vec<String> = Vec::new();
            for r in &rows {
                for w in r.not_applicable.iter().chain(&r.failures) {
                    if !why.contains(w) {
                        why.push(w.clone());
                    }
                }
            }
            let why = if why.is_empty() {
                "no cell ok".to_string()
            } else {
                format!("n/a or failed: {}", why.join("; "))
            };
            Some((b.clone(), why))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::store::tests::record;
    use crate::bench::store::CellStatus;
    use crate::bench::summary::Summary;

    #[test]
    fn a_baseline_without_one_ok_cell_is_named() {
        let mut recs = vec![
            record("l/w/haiku/r1", "haiku", CellStatus::Ok, &[1.0]),
            record("l/w/qemu/r1", "qemu", CellStatus::NotApplicable, &[]),
        ];
        recs[1].error = "qemu-system-x86_64 not found".into();
        let s = Summary::build(&recs, &[], &["qemu".into(), "host".into()], &|_, _| None);
        // host did not run at all (filtered out): not named.
        assert_eq!(
            missing_baselines(&s),
            [(
                "qemu".to_string(),
                "n/a or failed: qemu-system-x86_64 not found".to_string()
            )]
        );
        recs.push(record("l/w/qemu/r2", "qemu", CellStatus::Ok, &[1.0]));
        let s = Summary::build(&recs, &[], &["qemu".into()], &|_, _| None);
        assert!(missing_baselines(&s).is_empty());
    }
}
