//! Whether a test that needs /dev/kvm runs, is skipped, or fails.
//!
//! Without /dev/kvm such a test prints a `SKIPPED:` line and returns, and
//! cargo counts it as passed. Where KVM is meant to be there (CI on a KVM
//! host sets `PACER_REQUIRE_KVM=1`), a /dev/kvm that cannot be opened is a
//! failure instead, so a broken KVM cannot pass as a green run. Shared by
//! the test helpers of every crate (included with `#[path]`), and tested
//! by `vmm/tests/kvm_gate.rs`.
#![allow(dead_code)]

/// The environment variable that turns a skip into a failure.
pub const REQUIRE_KVM: &str = "PACER_REQUIRE_KVM";

/// What a test that needs /dev/kvm does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvmGate {
    /// /dev/kvm opened: run.
    Run,
    /// Not required and not available: print this line and return.
    Skip(String),
    /// Required but not available (or the variable is not 0 or 1): panic
    /// with this message.
    Fail(String),
}

/// The decision for `test`, from the value of [`REQUIRE_KVM`] (None:
/// unset) and the result of opening /dev/kvm (the error as text).
pub fn kvm_gate(test: &str, require: Option<&str>, open: Result<(), String>) -> KvmGate {
    let required = match require.map(str::trim) {
        None | Some("") | Some("0") => false,
        Some("1") => true,
        Some(other) => {
            return KvmGate::Fail(format!(
                "{REQUIRE_KVM} must be 1 (tests that need /dev/kvm fail without it) or 0 \
                 (they are skipped), found {other:?}"
            ))
        }
    };
    match open {
        Ok(()) => KvmGate::Run,
        Err(e) if required => KvmGate::Fail(format!(
            "{REQUIRE_KVM}=1 but /dev/kvm cannot be opened ({e}); {test} cannot run"
        )),
        Err(e) => KvmGate::Skip(format!(
            "SKIPPED: /dev/kvm not available ({e}); {test} not run"
        )),
    }
}

/// Carry out [`kvm_gate`] with this process's environment: true to run,
/// false after printing the SKIPPED line; panics when KVM is required.
pub fn kvm_gate_here(test: &str, open: Result<(), String>) -> bool {
    let require = std::env::var(REQUIRE_KVM).ok();
    match kvm_gate(test, require.as_deref(), open) {
        KvmGate::Run => true,
        KvmGate::Skip(line) => {
            println!("{line}");
            false
        }
        KvmGate::Fail(message) => panic!("{message}"),
    }
}
