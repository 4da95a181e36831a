//! The guest's own reason for a failure, in the VM's error message.
//!
//! A VM that fails says why from the VMM's side ("guest exited with status
//! 2"); the guest usually said more before it stopped: an ERROR record on
//! the result port (guests/PROTOCOL.md: v0 an error code, v1..v3 a name of
//! up to 24 ASCII bytes, v4 a detail) and a line on its console. This
//! module quotes both, escaped and shortened, so the reason reaches stderr
//! and the results instead of being buried in the console log.

use crate::config_errors::quoted;
use crate::results::RecordEntry;
use devices::RecordKind;

/// The name of an ERROR record's code (guests/PROTOCOL.md).
pub fn error_code_name(code: u64) -> Option<&'static str> {
    Some(match code {
        1 => "UNKNOWN_WORKLOAD",
        2 => "BAD_PARAM",
        3 => "TOO_MANY_VCPUS",
        4 => "AP_TIMEOUT",
        5 => "NO_LAPIC",
        6 => "LOCK_BROKEN",
        7 => "NO_TSC_DEADLINE",
        _ => return None,
    })
}

/// The NUL-padded ASCII name in v1..v3 (empty if none or not printable).
fn record_name(values: &[u64; 5]) -> String {
    let bytes: Vec<u8> = values[1..4]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .take_while(|&b| b != 0)
        .collect();
    if bytes.iter().all(|b| (0x21..0x7f).contains(b)) {
        String::from_utf8_lossy(&bytes).into_owned()
    } else {
        String::new()
    }
}

/// "ERROR UNKNOWN_WORKLOAD (name "frob", detail 3)" for an ERROR record.
pub fn describe_error_record(values: &[u64; 5]) -> String {
    let code = match error_code_name(values[0]) {
        Some(n) => n.to_string(),
        None => format!("code {}", values[0]),
    };
    let mut extra = Vec::new();
    let name = record_name(values);
    if !name.is_empty() {
        extra.push(format!("name {}", quoted(&name)));
    }
    if values[4] != 0 {
        extra.push(format!("detail {}", values[4]));
    }
    if extra.is_empty() {
        format!("ERROR {code}")
    } else {
        format!("ERROR {code} ({})", extra.join(", "))
    }
}

/// What the guest said about its failure: its last ERROR record and its
/// last console line. None if it said nothing.
pub fn guest_reason(records: &[RecordEntry], last_console_line: Option<&str>) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(r) = records
        .iter()
        .rev()
        .find(|r| r.record.kind == RecordKind::Error)
    {
        parts.push(format!(
            "vcpu{} reported {}",
            r.vcpu,
            describe_error_record(&r.record.values)
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
    use devices::ResultRecord;

    fn error(values: [u64; 5]) -> RecordEntry {
        RecordEntry {
            vcpu: 0,
            t_ms: 0.0,
            t_run_ms: 0.0,
            record: ResultRecord {
                kind: RecordKind::Error,
                vcpu: 0,
                seq: 1,
                tsc: 0,
                values,
                text: None,
            },
            units_per_s: None,
        }
    }

    #[test]
    fn quotes_record_and_console() {
        let mut name = [0u8; 24];
        name[..4].copy_from_slice(b"frob");
        let v1 = u64::from_le_bytes(name[..8].try_into().unwrap());
        let r = guest_reason(
            &[error([1, v1, 0, 0, 0])],
            Some("pacer-bench: unknown workload frob\u{7}"),
        )
        .unwrap();
        assert_eq!(
            r,
            "the guest says: vcpu0 reported ERROR UNKNOWN_WORKLOAD (name \"frob\"); \
             its console's last line: \"pacer-bench: unknown workload frob\\u{7}\""
        );
        // The single-byte-name protocol of older guests: code only.
        assert_eq!(
            describe_error_record(&[1, 0, 0, 0, 0]),
            "ERROR UNKNOWN_WORKLOAD"
        );
        assert_eq!(
            describe_error_record(&[99, 0, 0, 0, 7]),
            "ERROR code 99 (detail 7)"
        );
        assert_eq!(guest_reason(&[], None), None);
        assert_eq!(guest_reason(&[], Some("  ")), None);
    }
}
