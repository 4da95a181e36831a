//! The decision of the tests that need /dev/kvm (`common/kvm_gate.rs`):
//! skipped without it unless `PACER_REQUIRE_KVM=1`, then a failure.

#[path = "common/kvm_gate.rs"]
mod kvm_gate;
use kvm_gate::{kvm_gate, KvmGate};

fn absent() -> Result<(), String> {
    Err("No such file or directory (os error 2)".into())
}

#[test]
fn without_the_variable_a_missing_kvm_skips() {
    for require in [None, Some(""), Some("0")] {
        match kvm_gate("t", require, absent()) {
            KvmGate::Skip(line) => {
                assert!(
                    line.starts_with("SKIPPED: /dev/kvm not available ("),
                    "{line}"
                );
                assert!(
                    line.contains("os error 2") && line.ends_with("t not run"),
                    "{line}"
                );
            }
            other => panic!("{require:?}: {other:?}"),
        }
    }
}

#[test]
fn required_kvm_that_cannot_be_opened_fails() {
    match kvm_gate("boots_the_guest", Some("1"), absent()) {
        KvmGate::Fail(m) => {
            assert!(m.contains("PACER_REQUIRE_KVM=1"), "{m}");
            assert!(
                m.contains("os error 2") && m.contains("boots_the_guest"),
                "{m}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_open_kvm_runs_whatever_the_variable() {
    for require in [None, Some("0"), Some("1")] {
        assert_eq!(kvm_gate("t", require, Ok(())), KvmGate::Run, "{require:?}");
    }
}

#[test]
fn a_value_other_than_0_or_1_is_refused() {
    for (v, open) in [("yes", Ok(())), ("true", absent())] {
        match kvm_gate("t", Some(v), open) {
            KvmGate::Fail(m) => assert!(m.contains("must be 1") && m.contains(v), "{m}"),
            other => panic!("{v}: {other:?}"),
        }
    }
}
