//! Damaged and foreign trace files through every command that reads a
//! trace (`pacer trace export|summary|plot|dump`, `pacer sim --replay`):
//! a flipped bit anywhere is refused with the offset of the frame it is
//! in (exit 2), a file that is not a trace is refused by its header
//! however large it is, and each refusal names the file once.

mod common;

use common::{kvm_or_skip, pacer, vm_table, TempDir};

/// Every command that reads a trace, as arguments before and after the
/// file (outputs into `dir`).
fn readers(dir: &std::path::Path) -> Vec<(Vec<String>, Vec<String>)> {
    let out = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    vec![
        (s(&["trace", "export"]), vec!["--out".into(), out("t.json")]),
        (s(&["trace", "summary"]), vec![]),
        (s(&["trace", "plot"]), vec!["--out".into(), out("t.svg")]),
        (s(&["trace", "dump"]), vec![]),
        (s(&["sim", "--replay"]), vec![]),
    ]
}

fn read_with(reader: &(Vec<String>, Vec<String>), file: &std::path::Path) -> (i32, String, String) {
    let mut args: Vec<&str> = reader.0.iter().map(String::as_str).collect();
    args.push(file.to_str().unwrap());
    args.extend(reader.1.iter().map(String::as_str));
    pacer(&args)
}

#[test]
fn a_file_that_is_not_a_trace_is_refused_by_its_header_whatever_its_size() {
    let dir = TempDir::new("trace-header");
    // 2 GiB, sparse, with a bad magic: over the size cap, so the header
    // message shows that the header was checked first.
    let huge = dir.0.join("huge.trace");
    let f = std::fs::File::create(&huge).unwrap();
    f.set_len(2 << 30).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, b"NOTATRACE", 0).unwrap();
    drop(f);
    let missing = dir.0.join("missing.trace");
    for r in readers(&dir.0) {
        let (code, out, err) = read_with(&r, &huge);
        assert_eq!(code, 2, "{:?}: {out}{err}", r.0);
        assert_eq!(
            err.trim_end(),
            format!(
                "{}: byte 0: not a Pacer trace (no PACERTRC header)",
                huge.display()
            ),
            "{:?}",
            r.0
        );
        // A file that is not there: named once.
        let (code, _, err) = read_with(&r, &missing);
        assert_eq!(code, 2, "{:?}: {err}", r.0);
        assert_eq!(
            err.matches(missing.to_str().unwrap()).count(),
            1,
            "{:?}: {err}",
            r.0
        );
    }
}

#[test]
fn bit_flips_in_a_recorded_trace_are_refused_by_every_reader() {
    if !kvm_or_skip("bit_flips_in_a_recorded_trace_are_refused_by_every_reader") {
        return;
    }
    let dir = TempDir::new("trace-flips");
    let vm = vm_table("pp", "pingpong duration_ms=200").replace("vcpus = 1", "vcpus = 2");
    let cfg = dir.config(&format!(
        "[host]\ncpus = \"0-1\"\npolicy = \"haiku\"\ndispatch = \"threads\"\nlog_dir = \"logs\"\n\n{vm}"
    ));
    let trace = dir.0.join("pp.trace");
    let (code, out, err) = pacer(&[
        "run",
        cfg.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let readers = readers(&dir.0);
    for r in &readers {
        let (code, out, err) = read_with(r, &trace);
        assert_eq!(code, 0, "{:?} on the whole trace: {out}{err}", r.0);
    }
    let whole = std::fs::read(&trace).unwrap();
    // Frame starts: a fault is reported at the start of its frame (or at
    // the header field it is in).
    let mut starts = vec![0usize, 8, 12];
    let mut at = 16;
    while at < whole.len() {
        starts.push(at);
        let len = u32::from_le_bytes(whole[at + 4..at + 8].try_into().unwrap()) as usize;
        at += 16 + len;
    }
    assert_eq!(at, whole.len());
    let flipped = dir.0.join("flipped.trace");
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in 0..40 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let pos = (x % whole.len() as u64) as usize;
        let bit = (x >> 40) % 8;
        let mut b = whole.clone();
        b[pos] ^= 1 << bit;
        std::fs::write(&flipped, &b).unwrap();
        let offset = *starts.iter().rev().find(|&&s| s <= pos).unwrap();
        let r = &readers[i % readers.len()];
        let (code, out, err) = read_with(r, &flipped);
        assert_eq!(code, 2, "{:?}, bit {bit} of byte {pos}: {out}{err}", r.0);
        assert!(
            err.starts_with(&format!("{}: byte {offset}: ", flipped.display())),
            "{:?}, bit {bit} of byte {pos}: {err}",
            r.0
        );
    }
}
