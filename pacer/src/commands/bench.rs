//! `pacer bench MATRIX --out DIR [--resume] [--dry-run] [--shard I/N]`:
//! the command around [`run_matrix`](crate::bench::run_matrix); `pacer
//! bench merge` and `--slurm` are in [`super::bench_lab`]. Exit codes as `pacer run`:
//! 0 every cell ok or n/a, 1 a cell failed or timed out (or the run was
//! stopped), 2 bad input (matrix, or results already in DIR without
//! `--resume`).

use crate::bench::progress::Progress;
use crate::bench::run::{run_matrix, BenchOptions, RunMatrixError};
use crate::bench::shard::ShardSpec;
use crate::bench::store::StoreError;
use crate::bench::{cells, Matrix};
use crate::output::{out, EXIT_BAD_INPUT, EXIT_OK, EXIT_VM_FAILED};
use std::path::PathBuf;

/// The closing text of `pacer bench --help`.
pub const HELP: &str = "Examples:
  pacer bench benches/smoke.toml --out target/bench/smoke              every policy, ~15 s
  pacer bench benches/seeds.toml --out target/bench/seeds              the design's scenarios
  pacer bench benches/seeds.toml --out target/bench/seeds --resume     continue a stopped run
  pacer bench benches/seeds.toml --out /tmp/x --dry-run                list the cells only
  pacer bench benches/seeds.toml --shard 2/4 --out /shared/seeds/s2     a quarter of the cells (any job runner)
  pacer bench merge /shared/seeds/s1 /shared/seeds/s2 --out /shared/seeds/all   shards into one report
  pacer bench benches/seeds.toml --slurm --shards 4 --out /shared/seeds   a Slurm job array and its merge

The matrix format is in benches/README.md and docs/config-reference.md. The
table goes to stdout, the progress bar to stderr (hidden when it is not a
terminal or with -q); DIR gets results.jsonl, results.csv, summary.json
(schemas/), report.html, plots/ and each cell's logs/.

Exit codes:
  0  every cell ok or n/a
  1  a cell failed or timed out, or the run was stopped (continue with --resume)
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
    #[arg(long, value_name = "DIR", required = true)]
    pub out: Option<PathBuf>,
    /// Keep the finished cells already in --out and run the others.
    #[arg(long)]
    pub resume: bool,
    /// Check the matrix and list its cells in run order; run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Run the VMs without the per-thread seccomp filters (for debugging).
    #[arg(long)]
    pub no_seccomp: bool,
    #[command(flatten)]
    pub lab: super::bench_lab::LabArgs,
}

/// Run `pacer bench`; returns the exit code.
pub fn main(args: BenchArgs) -> i32 {
    let (Some(matrix), Some(out_dir)) = (args.matrix, args.out) else {
        // clap requires both unless a subcommand is given.
        return match args.command {
            Some(c) => super::bench_lab::command(c),
            None => EXIT_BAD_INPUT,
        };
    };
    let m = match Matrix::load(&matrix) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("{e}");
            return EXIT_BAD_INPUT;
        }
    };
    if args.lab.slurm {
        return super::bench_lab::slurm(&m, &out_dir, &args.lab, args.dry_run);
    }
    let shard = args.lab.shard.unwrap_or(ShardSpec::WHOLE);
    if args.dry_run {
        let mut s = m.describe();
        for (i, c) in shard.select(&cells::expand(&m)).iter().enumerate() {
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
            if o.failed > 0 {
                out(&format!(
                    "pacer bench: {} cell(s) failed or timed out\n",
                    o.failed
                ));
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
