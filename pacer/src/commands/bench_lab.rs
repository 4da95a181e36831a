//! `pacer bench` beyond one host: the `--shard`, `--slurm` flags and the
//! `pacer bench merge` subcommand (the work is in `bench::shard`,
//! `bench::merge`, `bench::slurm`).

use crate::bench::merge::{self, MergeError};
use crate::bench::shard::ShardSpec;
use crate::bench::slurm::{self, SlurmPlan};
use crate::bench::Matrix;
use crate::output::{out, EXIT_BAD_INPUT, EXIT_OK, EXIT_VM_FAILED, EXIT_WRITE_FAILED};
use std::path::{Path, PathBuf};

/// The closing text of `pacer bench merge --help`.
pub const MERGE_HELP: &str = "Examples:
  pacer bench merge out/s1 out/s2 --out-dir out/all           two shards of one matrix
  pacer bench merge lab/intel lab/amd --out-dir lab/both       one matrix run whole on two hosts

Each DIR is an output folder of pacer bench (a shard, or a whole run). The
folders must hold cells of one matrix (the digest in their shard.json); a
cell may appear once per kind of machine (CPU model, topology, kernel,
KVM): identical hosts pool their cells, different ones are shown side by
side. --out-dir gets results.jsonl, results.csv, cell-settings.jsonl,
summary.json, plots/ and report.html as a run would; cells no folder holds
are named on stderr.

Exit codes:
  0  merged; every cell ok or n/a
  1  merged; a cell failed or timed out
  2  bad input, nothing written: folders of different matrices, a cell
     twice on one kind of machine, a folder without shard.json or
     cell-settings.jsonl, a matrix file that changed since, results
     already in --out-dir
  3  the merged folder could not be written";

/// `pacer bench`'s subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Merge output folders of one matrix (shards, or runs on other hosts) into one report.
    #[command(after_help = MERGE_HELP)]
    Merge(MergeArgs),
}

/// Arguments of `pacer bench merge`.
#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// The folders to merge (outputs of pacer bench).
    #[arg(value_name = "DIR", required = true, num_args = 1..)]
    pub dirs: Vec<PathBuf>,
    /// Where the merged results, summary and report go (a new folder).
    #[arg(long, value_name = "DIR", required_unless_present = "out")]
    pub out_dir: Option<PathBuf>,
    /// Deprecated: --out-dir DIR (every other --out is a FILE).
    #[arg(long, value_name = "DIR", hide = true, conflicts_with = "out_dir")]
    pub out: Option<PathBuf>,
    /// The matrix file the folders ran (default: the path their
    /// shard.json names); its digest must be theirs.
    #[arg(long, value_name = "FILE")]
    pub matrix: Option<PathBuf>,
}

/// `pacer bench`'s flags for matrices over several hosts.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LabArgs {
    /// Run shard I of N: every N-th cell of the interleaved order, from the
    /// I-th (every cell is in exactly one shard). Merge the shards' folders
    /// with `pacer bench merge`.
    #[arg(long, value_name = "I/N", conflicts_with = "slurm", value_parser = parse_shard)]
    pub shard: Option<ShardSpec>,
    /// Submit the matrix to Slurm: a job array of --shards tasks, each
    /// running its shard into DIR/shard-I-of-N, and a merge job into
    /// DIR/merged once they are done. DIR must be on shared storage. With
    /// --dry-run: print the scripts, submit nothing.
    #[arg(long, requires = "shards")]
    pub slurm: bool,
    /// With --slurm: how many shards (array tasks).
    #[arg(long, value_name = "N", requires = "slurm",
          value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub shards: Option<u32>,
    /// With --slurm: the partition to submit to.
    #[arg(long, value_name = "P", requires = "slurm")]
    pub partition: Option<String>,
}

fn parse_shard(s: &str) -> Result<ShardSpec, String> {
    s.parse()
}

/// Run a `pacer bench` subcommand.
pub fn command(c: BenchCommand) -> i32 {
    match c {
        BenchCommand::Merge(args) => merge_main(&args),
    }
}

fn merge_main(args: &MergeArgs) -> i32 {
    if args.out.is_some() {
        crate::output::deprecated("pacer bench merge --out DIR", "--out-dir DIR");
    }
    let Some(out_dir) = args.out_dir.as_ref().or(args.out.as_ref()) else {
        eprintln!("pacer bench merge: --out-dir DIR: missing");
        return EXIT_BAD_INPUT;
    };
    match merge::merge(&args.dirs, out_dir, args.matrix.as_deref()) {
        Ok(o) => {
            let describe = |layout: &str| {
                let base = crate::bench::hosts::base_layout(layout);
                o.matrix
                    .layouts
                    .iter()
                    .find(|l| l.name == base)
                    .map(|l| l.describe())
            };
            out(&o.outcome.summary.to_table(&describe));
            if o.hosts.several() {
                out(&o.hosts.side_by_side_text(&o.outcome.summary));
            }
            for note in &o.notes {
                eprintln!("pacer bench merge: {note}");
            }
            if let Some(why) = &o.outcome.plots_skipped {
                eprintln!("pacer bench merge: plots: {why}");
            }
            out(&format!("\nreport: {}\n", o.outcome.report.display()));
            if o.outcome.failed > 0 {
                out(&format!(
                    "pacer bench merge: {} cell(s) failed or timed out\n",
                    o.outcome.failed
                ));
                EXIT_VM_FAILED
            } else {
                EXIT_OK
            }
        }
        Err(e @ MergeError::Refused(_)) => {
            eprintln!("pacer bench merge: {e}");
            EXIT_BAD_INPUT
        }
        Err(e @ MergeError::Write(_)) => {
            eprintln!("pacer bench merge: {e}");
            EXIT_WRITE_FAILED
        }
    }
}

/// An absolute form of `p` (for scripts run elsewhere).
fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// `pacer bench MATRIX --slurm --shards N --out-dir DIR`.
pub fn slurm(m: &Matrix, out_dir: &Path, lab: &LabArgs, dry_run: bool) -> i32 {
    let out_dir = absolute(out_dir);
    if let Err(e) = slurm::check(&out_dir, lab.partition.as_deref()) {
        eprintln!("pacer bench: {e}");
        return EXIT_BAD_INPUT;
    }
    let pacer = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("pacer bench: --slurm: cannot find this pacer binary: {e}");
            return EXIT_VM_FAILED;
        }
    };
    let plan = SlurmPlan {
        pacer,
        matrix: absolute(&m.path),
        out: out_dir,
        name: m.name.clone(),
        shards: lab.shards.unwrap_or(1),
        partition: lab.partition.clone(),
    };
    if dry_run {
        out(&plan.dry_run_text());
        return EXIT_OK;
    }
    match plan.submit(&["sbatch".to_string()]) {
        Ok((array, merge)) => {
            let (a, mscript) = plan.script_paths();
            out(&format!(
                "submitted: job array {array} ({} shards, {}), merge job {merge} after it ({}); results in {}\n",
                plan.shards,
                a.display(),
                mscript.display(),
                plan.out.join("merged").display()
            ));
            EXIT_OK
        }
        Err(e) => {
            eprintln!("pacer bench: --slurm: {e}");
            EXIT_VM_FAILED
        }
    }
}
