//! The result-port record parser: any 64 bytes as a record, and records
//! read from a guest memory whose TEXT payloads point anywhere.
//! Invariants: a record that parses encodes back to the same 64 bytes; a
//! TEXT record read from memory carries at most 4096 bytes of text.

use crate::driver::Target;
use crate::targets::pio::FakeRam;
use arbitrary::Unstructured;
use devices::result_port::{
    encode_record, parse_record, read_record, RecordKind, MAX_TEXT_LEN, RECORD_SIZE,
};
use std::sync::Mutex;

pub struct RecordTarget;

impl RecordTarget {
    pub fn new() -> RecordTarget {
        RecordTarget
    }
}

impl Default for RecordTarget {
    fn default() -> Self {
        Self::new()
    }
}

impl Target for RecordTarget {
    fn name(&self) -> &'static str {
        "record"
    }

    fn max_len(&self) -> usize {
        8192
    }

    fn seeds(&self) -> Vec<Vec<u8>> {
        let mut text = encode_record(4, 0, 1, 2, [64, 11, 0, 0, 0]).to_vec();
        text.extend_from_slice(b"hello=world");
        vec![
            encode_record(1, 0, 0, 1, [1, 2, 3, 4, 5]).to_vec(),
            encode_record(5, 3, 9, 0, [1, 0x006f_7266, 0, 0, 7]).to_vec(),
            text,
        ]
    }

    fn run(&mut self, data: &[u8]) -> Result<(), String> {
        let mut b = [0u8; RECORD_SIZE];
        let n = data.len().min(RECORD_SIZE);
        b[..n].copy_from_slice(&data[..n]);
        if let Ok(r) = parse_record(&b) {
            let again = encode_record(r.kind as u16, r.vcpu, r.seq, r.tsc, r.values);
            if again != b {
                return Err(format!("{r:?} encodes to other bytes"));
            }
        }
        // The whole input as guest memory; a record at an address taken
        // from its tail.
        let mut u = Unstructured::new(&data[n..]);
        let gpa: u64 = match u.int_in_range(0..=3u8).unwrap_or(0) {
            0 => 0,
            1 => u.int_in_range(0..=data.len() as u64).unwrap_or(0),
            _ => u.arbitrary().unwrap_or(0),
        };
        let ram = FakeRam(Mutex::new(data.to_vec()));
        if let Ok(r) = read_record(&ram, gpa) {
            if r.kind == RecordKind::Text {
                let len = r.text.as_ref().map_or(0, |t| t.len() as u64);
                // Lossy UTF-8 may grow 1 byte into 3 (U+FFFD).
                if len > 3 * MAX_TEXT_LEN {
                    return Err(format!("TEXT of {len} bytes"));
                }
            }
        }
        Ok(())
    }
}
