//! Records the git commit Pacer is built from, for `--version` and the
//! `pacer` object of every JSON document (`documents::Producer`).
//!
//! `PACER_COMMIT` in the environment wins (a build from a source tarball
//! can set it); else `git rev-parse HEAD` of the checkout; else nothing,
//! and the documents say `"commit": null`. A build never fails for want
//! of git. The script re-runs when HEAD moves (a commit, a checkout).

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PACER_COMMIT");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    // Only this project's own checkout counts: a source tarball unpacked
    // inside some other git work tree must not take that tree's commit.
    let root = dir.parent().and_then(|p| p.canonicalize().ok());
    let ours = git(&dir, &["rev-parse", "--show-toplevel"])
        .and_then(|t| PathBuf::from(t).canonicalize().ok())
        .is_some_and(|t| Some(t) == root);
    let commit = std::env::var("PACER_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| {
            if !ours {
                return None;
            }
            // Re-run when HEAD or the branch it names moves.
            let mut watch = vec!["HEAD".to_string(), "packed-refs".to_string()];
            watch.extend(git(&dir, &["symbolic-ref", "-q", "HEAD"]));
            for name in watch {
                if let Some(p) = git(&dir, &["rev-parse", "--git-path", &name]) {
                    let p = dir.join(p);
                    if p.exists() {
                        println!("cargo:rerun-if-changed={}", p.display());
                    }
                }
            }
            git(&dir, &["rev-parse", "HEAD"])
        });
    if let Some(c) = commit {
        println!("cargo:rustc-env=PACER_COMMIT={}", c.trim());
    }
}
