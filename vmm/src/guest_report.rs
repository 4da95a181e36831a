//! The guest's own reason for a failure, in the VM's error message.
//!
//! A VM that fails says why from the VMM's side ("guest exited with status
//! 2"); the guest usually said more before it stopped: ERROR records on the
//! result port (decoded by `guest_metrics`: a code, the name it concerns,
//! a detail) and a line on its console. This module quotes the last of
//! each, escaped and shortened, so the reason reaches stderr and the
//! results instead of being buried in the console log.

use crate::guest_metrics::GuestErrorEntry;
use crate::text::quoted;
use devices::result_payload::{GuestError, GuestErrorCode};

/// An ERROR code as guests/PROTOCOL.md spells it.
pub fn error_code_name(code: GuestErrorCode) -> String {
    match code {
        GuestErrorCode::UnknownWorkload => "UNKNOWN_WORKLOAD".into(),
        GuestErrorCode::BadParam => "BAD_PARAM".into(),
        GuestErrorCode::TooManyVcpus => "TOO_MANY_VCPUS".into(),
        GuestErrorCode::ApTimeout => "AP_TIMEOUT".into(),
        GuestErrorCode::NoLapic => "NO_LAPIC".into(),
        GuestErrorCode::LockBroken => "LOCK_BROKEN".into(),
        GuestErrorCode::NoTscDeadline => "NO_TSC_DEADLINE".into(),
        GuestErrorCode::Other(c) => format!("code {c}"),
    }
}

/// `ERROR BAD_PARAM (name "interval_us", detail 3)`.
pub fn describe_error(e: &GuestError) -> String {
    let mut extra = Vec::new();
    if !e.name.is_empty() {
        extra.push(format!("name {}", quoted(&e.name)));
    }
    if e.detail != 0 {
        extra.push(format!("detail {}", e.detail));
    }
    let code = error_code_name(e.code);
    if extra.is_empty() {
        format!("ERROR {code}")
    } else {
        format!("ERROR {code} ({})", extra.join(", "))
    }
}

/// What the guest said about its failure: its last ERROR record and its
/// last console line. None if it said nothing.
pub fn guest_reason(errors: &[GuestErrorEntry], last_console_line: Option<&str>) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(e) = errors.last() {
        parts.push(format!(
            "vcpu{} reported {}",
            e.vcpu,
            describe_error(&e.error)
        ));
    }
    if let Some(line) = last_console_line.filter(|l| !l.trim().is_empty()) {
        parts.push(format!("its console's last line: {}", quoted(line.trim())));
    }
    (!parts.is_empty()).then(|| format!("the guest says: {}", parts.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(code: GuestErrorCode, name: &str, detail: u64) -> GuestErrorEntry {
        GuestErrorEntry {
            vcpu: 0,
            error: GuestError {
                code,
                name: name.into(),
                detail,
            },
        }
    }

    #[test]
    fn quotes_record_and_console() {
        let r = guest_reason(
            &[entry(GuestErrorCode::UnknownWorkload, "frob", 0)],
            Some("pacer-bench: unknown workload frob\u{7}"),
        )
        .unwrap();
        assert_eq!(
            r,
            "the guest says: vcpu0 reported ERROR UNKNOWN_WORKLOAD (name \"frob\"); \
             its console's last line: \"pacer-bench: unknown workload frob\\u{7}\""
        );
        assert_eq!(
            describe_error(&entry(GuestErrorCode::Other(99), "", 7).error),
            "ERROR code 99 (detail 7)"
        );
        assert_eq!(guest_reason(&[], None), None);
        assert_eq!(guest_reason(&[], Some("  ")), None);
    }
}
