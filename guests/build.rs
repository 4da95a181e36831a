//! Builds the bench guest (guests/bench, C + GNU as via its Makefile) and
//! the Linux guest's UnixBench-style suite (guests/linux/suite, a static C
//! binary) into OUT_DIR and hands the paths to src/lib.rs.
use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let bench = manifest.join("bench");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("bench");
    for p in ["src", "include", "linker.ld", "Makefile"] {
        println!("cargo:rerun-if-changed={}", bench.join(p).display());
    }
    let suite = manifest.join("linux").join("suite");
    println!("cargo:rerun-if-changed={}", suite.display());
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CC");

    for (tool, arg) in [
        ("make", "--version"),
        ("gcc", "--version"),
        ("ld", "--version"),
    ] {
        if Command::new(tool).arg(arg).output().is_err() {
            panic!(
                "guests: `{tool}` not found; building the bench guest needs GNU make, gcc and \
                 binutils (Debian: apt-get install build-essential)"
            );
        }
    }
    let status = Command::new("make")
        .arg("-C")
        .arg(&bench)
        .arg(format!("O={}", out.display()))
        .env_remove("MAKEFLAGS")
        .env_remove("MFLAGS")
        .status()
        .unwrap_or_else(|e| panic!("guests: cannot run make: {e}"));
    if !status.success() {
        panic!("guests: building the bench guest failed ({status}); see the make output above");
    }
    let suite_out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("linux");
    let status = Command::new("make")
        .arg("-C")
        .arg(&suite)
        .arg(format!("O={}", suite_out.display()))
        .env_remove("MAKEFLAGS")
        .env_remove("MFLAGS")
        .status()
        .unwrap_or_else(|e| panic!("guests: cannot run make: {e}"));
    if !status.success() {
        panic!(
            "guests: building the UnixBench-style suite failed ({status}); it links statically, \
             which needs the C library's static archive (Debian: apt-get install libc6-dev)"
        );
    }
    println!(
        "cargo:rustc-env=PACER_UBENCH={}",
        suite_out.join("ubench").display()
    );
    println!(
        "cargo:rustc-env=PACER_BENCH_GUEST_ELF={}",
        out.join("bench-guest.elf").display()
    );
    println!(
        "cargo:rustc-env=PACER_HOST_WORK={}",
        out.join("host_work").display()
    );
}
