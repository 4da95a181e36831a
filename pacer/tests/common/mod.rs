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
