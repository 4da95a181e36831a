//! `pacer-fuzz [N] [--target NAME]... [--seed S] [--findings DIR]`: fuzz
//! every target (or the named ones) for N inputs each (default 100000) and
//! print inputs per second, findings and peak memory per target.
//! `pacer-fuzz --replay FILE --target NAME` runs one saved input.
//! Exit status 1 if anything was found.

use pacer_fuzz::driver::{fuzz, run_one, Options};
use pacer_fuzz::targets;
use std::path::PathBuf;

fn usage() -> ! {
    eprintln!(
        "usage: pacer-fuzz [N] [--target NAME]... [--seed S] [--findings DIR] [--replay FILE]"
    );
    eprintln!(
        "targets: {}",
        targets::all()
            .iter()
            .map(|t| t.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    std::process::exit(2);
}

fn main() {
    let mut opts = Options {
        inputs: 100_000,
        findings_dir: Some(PathBuf::from("target/fuzz-findings")),
        ..Options::default()
    };
    let mut names: Vec<String> = Vec::new();
    let mut replay: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--target" => names.push(args.next().unwrap_or_else(|| usage())),
            "--seed" => {
                opts.seed = args
                    .next()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_else(|| usage())
            }
            "--findings" => opts.findings_dir = Some(args.next().unwrap_or_else(|| usage()).into()),
            "--replay" => replay = Some(args.next().unwrap_or_else(|| usage()).into()),
            n if n.parse::<u64>().is_ok() => opts.inputs = n.parse().unwrap_or(0),
            _ => usage(),
        }
    }
    let mut chosen = Vec::new();
    if names.is_empty() {
        chosen = targets::all();
    } else {
        for n in &names {
            chosen.push(targets::by_name(n).unwrap_or_else(|| usage()));
        }
    }
    if let Some(file) = replay {
        let input = std::fs::read(&file).unwrap_or_else(|e| {
            eprintln!("pacer-fuzz: {}: {e}", file.display());
            std::process::exit(2)
        });
        let mut failed = false;
        for t in chosen.iter_mut() {
            match run_one(t.as_mut(), &input) {
                Ok(()) => println!("{}: ok", t.name()),
                Err(e) => {
                    failed = true;
                    println!("{}: {e}", t.name());
                }
            }
        }
        // Targets remove their scratch files when dropped; exit() would not.
        drop(chosen);
        std::process::exit(failed as i32);
    }
    println!(
        "{:<10} {:>10} {:>9} {:>8} {:>12} {:>8} {:>10} {:>10}",
        "target", "inputs", "wall s", "CPU s", "inputs/CPU-s", "findings", "peak MiB", "slowest ms"
    );
    let mut found = 0;
    for t in chosen.iter_mut() {
        let r = fuzz(t.as_mut(), &opts);
        println!(
            "{:<10} {:>10} {:>9.1} {:>8.1} {:>12.0} {:>8} {:>10.1} {:>10.2}",
            r.target,
            r.inputs,
            r.elapsed.as_secs_f64(),
            r.cpu.as_secs_f64(),
            r.per_cpu_second(),
            r.findings.len(),
            r.max_rss_kib as f64 / 1024.0,
            r.slowest.as_secs_f64() * 1e3
        );
        for f in r.findings.iter().take(5) {
            println!("    finding: {} (input {:?})", f.what, f.saved_to);
        }
        found += r.findings.len();
    }
    drop(chosen);
    std::process::exit((found > 0) as i32);
}
