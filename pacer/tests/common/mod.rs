//! Helpers shared by the integration tests: the VMM's (one file for both
//! crates' tests) and running the `pacer` binary.
#![allow(dead_code)]

#[path = "../../../vmm/tests/common/mod.rs"]
mod vmm_common;
pub use vmm_common::*;

/// Run the `pacer` binary of this build: exit code (-1 when killed by a
/// signal), stdout, stderr.
pub fn pacer(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pacer"))
        .args(args)
        .output()
        .expect("run pacer");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A matrix of one 1-vCPU VM on host CPU 0 running `cpu` for
/// `duration_ms`, host against haiku, `repetitions` times: the smallest
/// matrix that still has cells to interleave, resume, shard and merge.
pub fn one_vm_matrix(name: &str, repetitions: u32, duration_ms: u32) -> String {
    format!(
        r#"
[matrix]
name = "{name}"
kernel = "@KERNEL@"
host_cpus = "0"
repetitions = {repetitions}
cell_timeout_s = 60
policies = ["host", "haiku"]
memory_mib = 16

[[workload]]
name = "cpu"
kind = "cpu"
duration_ms = {duration_ms}

[[layout]]
name = "one"
vm = [ {{ name = "a", vcpus = 1, cpus = "0" }} ]
"#
    )
}

/// Write `m.toml` in `dir` with `@KERNEL@` replaced by the bench guest.
pub fn write_matrix(dir: &std::path::Path, text: &str) -> std::path::PathBuf {
    let p = dir.join("m.toml");
    let kernel = guests::bench_guest_elf().display().to_string();
    std::fs::write(&p, text.replace("@KERNEL@", &kernel)).unwrap();
    p
}
