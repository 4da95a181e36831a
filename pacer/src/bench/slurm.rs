//! `pacer bench MATRIX --slurm --shards N --out-dir DIR [--partition P]`:
//! the matrix as a Slurm job array.
//!
//! Two batch scripts, kept in `DIR/slurm/`: a job array of N tasks, task
//! K running shard K+1/N into `DIR/shard-<K+1>-of-<N>` (each on a node of
//! its own, `--exclusive`: two shards on one node would measure each
//! other), and a merge job submitted with `--dependency=afterok:<array>`
//! that runs `pacer bench merge` into `DIR/merged`. DIR must be on storage
//! every node sees, and the pacer binary and the matrix at the same paths
//! there. A task passes `--resume`, so a task Slurm requeues continues its
//! shard; it counts exit 1 (cells failed or timed out, recorded) as done,
//! so the merged report shows those cells, and the merge names any cells
//! a stopped task did not record. `--dry-run` prints both scripts and the
//! sbatch commands, and submits nothing.

use super::shard::ShardSpec;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What the scripts run.
#[derive(Debug, Clone)]
pub struct SlurmPlan {
    /// The pacer binary (absolute).
    pub pacer: PathBuf,
    /// The matrix file (absolute).
    pub matrix: PathBuf,
    /// The output folder on shared storage (absolute).
    pub out: PathBuf,
    /// The matrix's name (job names).
    pub name: String,
    pub shards: u32,
    pub partition: Option<String>,
}

/// Shard `spec`'s folder under `out`.
pub fn shard_dir(out: &Path, spec: ShardSpec) -> PathBuf {
    out.join(format!("shard-{}-of-{}", spec.index, spec.count))
}

/// `s` quoted for bash.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn quote_path(p: &Path) -> String {
    quote(&p.display().to_string())
}

/// Why `--partition` or `--out-dir` cannot go into an `#SBATCH` line, if so.
pub fn check(out: &Path, partition: Option<&str>) -> Result<(), String> {
    if let Some(p) = partition {
        if p.is_empty()
            || !p
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.,-".contains(c))
        {
            return Err(format!(
                "--partition: expected a Slurm partition name (or a comma-separated list) of [A-Za-z0-9_.-], found {p:?}"
            ));
        }
    }
    let text = out.to_str().ok_or_else(|| {
        format!(
            "--out-dir {}: not UTF-8; Slurm's #SBATCH lines need a plain path",
            out.display()
        )
    })?;
    if text
        .chars()
        .any(|c| c.is_whitespace() || c == '%' || c.is_control())
    {
        return Err(format!(
            "--out-dir {text:?}: Slurm's #SBATCH --output cannot take whitespace or % (a file-name pattern); choose a plain path"
        ));
    }
    Ok(())
}

impl SlurmPlan {
    fn header(&self, job: &str, output: &str) -> String {
        let mut s = format!(
            "#!/bin/bash\n# Written by pacer bench --slurm for {}.\n#SBATCH --job-name={job}\n#SBATCH --output={}/slurm/{output}\n",
            self.matrix.display(),
            self.out.display()
        );
        if let Some(p) = &self.partition {
            s += &format!("#SBATCH --partition={p}\n");
        }
        s
    }

    /// The job array: one task per shard.
    pub fn array_script(&self) -> String {
        let n = self.shards;
        let mut s = self.header(&format!("pacer-{}", self.name), "shard-%a.out");
        s += &format!(
            "#SBATCH --array=0-{}\n#SBATCH --nodes=1\n#SBATCH --ntasks=1\n#SBATCH --exclusive\n",
            n - 1
        );
        s += &format!(
            "set -u\n\
             i=$((SLURM_ARRAY_TASK_ID + 1))\n\
             # --resume: a requeued task continues its shard.\n\
             {} bench {} --shard \"$i/{n}\" --out-dir {}/\"shard-$i-of-{n}\" --resume\n\
             rc=$?\n\
             # 1: cells failed or timed out; they are recorded and the merged\n\
             # report lists them (and names cells a stopped shard left out).\n\
             if [ \"$rc\" -eq 1 ]; then exit 0; fi\n\
             exit \"$rc\"\n",
            quote_path(&self.pacer),
            quote_path(&self.matrix),
            quote_path(&self.out),
        );
        s
    }

    /// The merge, run once every task ended well.
    pub fn merge_script(&self) -> String {
        let mut s = self.header(&format!("pacer-{}-merge", self.name), "merge.out");
        s += "#SBATCH --nodes=1\n#SBATCH --ntasks=1\n";
        let dirs: Vec<String> = (1..=self.shards)
            .map(|index| {
                quote_path(&shard_dir(
                    &self.out,
                    ShardSpec {
                        index,
                        count: self.shards,
                    },
                ))
            })
            .collect();
        s += &format!(
            "set -u\nexec {} bench merge {} --matrix {} --out-dir {}\n",
            quote_path(&self.pacer),
            dirs.join(" "),
            quote_path(&self.matrix),
            quote_path(&self.out.join("merged"))
        );
        s
    }

    /// Where the scripts go.
    pub fn script_paths(&self) -> (PathBuf, PathBuf) {
        let dir = self.out.join("slurm");
        (dir.join("shards.sbatch"), dir.join("merge.sbatch"))
    }

    /// `--dry-run`: both scripts and the commands that would submit them.
    pub fn dry_run_text(&self) -> String {
        let (array, merge) = self.script_paths();
        format!(
            "# {array}\n{}\n# {merge}\n{}\n# submitted with:\n#   sbatch --parsable {array}\n#   sbatch --parsable --dependency=afterok:<array job id> {merge}\n",
            self.array_script(),
            self.merge_script(),
            array = array.display(),
            merge = merge.display(),
        )
    }

    /// Write the scripts and submit them with `sbatch` (the program and
    /// any leading arguments); returns the array job's id and the merge
    /// job's.
    pub fn submit(&self, sbatch: &[String]) -> Result<(String, String), String> {
        let (array, merge) = self.script_paths();
        let dir = self.out.join("slurm");
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for (path, text) in [(&array, self.array_script()), (&merge, self.merge_script())] {
            vmm::whole_file::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        let array_id = sbatch_parsable(sbatch, &[], &array)?;
        let dependency = format!("--dependency=afterok:{array_id}");
        let merge_id = sbatch_parsable(sbatch, &[&dependency], &merge)?;
        Ok((array_id, merge_id))
    }
}

/// Run `sbatch --parsable ARGS SCRIPT`; the job id it prints (`id` or
/// `id;cluster`).
fn sbatch_parsable(sbatch: &[String], args: &[&str], script: &Path) -> Result<String, String> {
    let (program, leading) = sbatch
        .split_first()
        .ok_or_else(|| "no sbatch command".to_string())?;
    let sbatch = Path::new(program);
    let out = Command::new(sbatch)
        .args(leading)
        .arg("--parsable")
        .args(args)
        .arg(script)
        .output()
        .map_err(|e| format!("cannot run {}: {e} (is Slurm installed?)", sbatch.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!(
            "{} {} failed ({}): {}",
            sbatch.display(),
            script.display(),
            out.status,
            stderr.trim()
        ));
    }
    job_id(&stdout).ok_or_else(|| {
        format!(
            "{} {}: expected a job id, found {:?}",
            sbatch.display(),
            script.display(),
            stdout.trim()
        )
    })
}

/// The job id of `sbatch --parsable`'s output.
fn job_id(stdout: &str) -> Option<String> {
    let id = stdout.trim().split(';').next()?.trim();
    (!id.is_empty() && id.chars().all(|c| c.is_ascii_digit())).then(|| id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> SlurmPlan {
        SlurmPlan {
            pacer: "/opt/pacer it's/pacer".into(),
            matrix: "/lab/m.toml".into(),
            out: "/shared/run".into(),
            name: "seeds".into(),
            shards: 3,
            partition: Some("bench".into()),
        }
    }

    #[test]
    fn the_array_runs_one_shard_per_task_and_the_merge_takes_them_all() {
        let p = plan();
        let a = p.array_script();
        assert!(a.starts_with("#!/bin/bash\n"), "{a}");
        for line in [
            "#SBATCH --array=0-2",
            "#SBATCH --exclusive",
            "#SBATCH --partition=bench",
            "#SBATCH --output=/shared/run/slurm/shard-%a.out",
            "'/opt/pacer it'\\''s/pacer' bench '/lab/m.toml' --shard \"$i/3\" --out-dir '/shared/run'/\"shard-$i-of-3\" --resume",
        ] {
            assert!(a.contains(line), "{line}\n{a}");
        }
        let m = p.merge_script();
        assert!(
            m.contains("bench merge '/shared/run/shard-1-of-3' '/shared/run/shard-2-of-3' '/shared/run/shard-3-of-3' --matrix '/lab/m.toml' --out-dir '/shared/run/merged'"),
            "{m}"
        );
        assert!(!m.contains("--array"), "{m}");
        let d = p.dry_run_text();
        assert!(d.contains("--dependency=afterok:<array job id>"), "{d}");
        // The task's shard folder is the one the merge reads.
        assert_eq!(
            shard_dir(&p.out, ShardSpec { index: 2, count: 3 }),
            Path::new("/shared/run/shard-2-of-3")
        );
    }

    #[test]
    fn partition_and_out_must_fit_an_sbatch_line() {
        assert!(check(Path::new("/shared/run"), Some("a,b-c.d_e")).is_ok());
        let e = check(Path::new("/x"), Some("bad name")).unwrap_err();
        assert!(
            e.starts_with("--partition:") && e.contains("\"bad name\""),
            "{e}"
        );
        let e = check(Path::new("/my runs/x"), None).unwrap_err();
        assert!(
            e.starts_with("--out-dir") && e.contains("whitespace"),
            "{e}"
        );
        assert!(check(Path::new("/r/%j"), None).is_err());
    }

    #[test]
    fn job_ids_from_parsable_output() {
        assert_eq!(job_id("42\n").as_deref(), Some("42"));
        assert_eq!(job_id("42;cluster\n").as_deref(), Some("42"));
        assert_eq!(job_id("Submitted batch job 42"), None);
        assert_eq!(job_id(""), None);
    }

    #[test]
    fn submit_runs_sbatch_twice_with_the_dependency() {
        // A stand-in sbatch that logs its arguments and answers job ids.
        let dir = std::env::temp_dir().join(format!("pacer-sbatch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("sbatch");
        let log = dir.join("log");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\necho \"$@\" >>{}\nn=$(wc -l <{})\necho \"$((100 + n));c\"\n",
                log.display(),
                log.display()
            ),
        )
        .unwrap();
        let mut p = plan();
        p.out = dir.join("out");
        // Through sh: executing a file just written races other tests' forks
        // (ETXTBSY).
        let sbatch = ["sh".to_string(), fake.display().to_string()];
        let (a, m) = p.submit(&sbatch).unwrap();
        assert_eq!((a.as_str(), m.as_str()), ("101", "102"));
        let calls = std::fs::read_to_string(&log).unwrap();
        let (array, merge) = p.script_paths();
        assert_eq!(
            calls,
            format!(
                "--parsable {}\n--parsable --dependency=afterok:101 {}\n",
                array.display(),
                merge.display()
            )
        );
        assert_eq!(std::fs::read_to_string(&array).unwrap(), p.array_script());
        // A failing sbatch is an error naming it.
        std::fs::write(&fake, "#!/bin/sh\necho 'invalid partition' >&2\nexit 1\n").unwrap();
        let e = p.submit(&sbatch).unwrap_err();
        assert!(e.contains("invalid partition"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
