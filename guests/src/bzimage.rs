//! Extract the uncompressed kernel (vmlinux, an ELF file) from a bzImage,
//! as the kernel's own `scripts/extract-vmlinux` does, but guided by the
//! boot protocol's header instead of a search for compression magic.
//!
//! A bzImage is the real-mode setup (`setup_sects + 1` sectors of 512
//! bytes) followed by the protected-mode part, which holds the compressed
//! kernel. Since boot protocol 2.08 the setup header says where:
//! `payload_offset` (0x248) from the start of the protected-mode part and
//! `payload_length` (0x24c). The payload is the compressed `vmlinux.bin`
//! (the ELF file, stripped, plus relocation data) followed by its
//! uncompressed size as a 4-byte little-endian number, which is checked
//! here. gzip is decompressed in-process (flate2); xz, zstd, lz4, bzip2,
//! lzma and lzo through their command-line tools (xz-utils ships with
//! every Debian system; Debian's kernels are xz).
//!
//! The result is checked to be an ELF64 x86-64 file, and its PVH entry (the
//! Xen note `XEN_ELFNOTE_PHYS32_ENTRY`, which a VMM uses to boot the ELF
//! directly in 32-bit protected mode) is reported when present.

use std::io::{Read, Write};
use std::process::{Command, Stdio};

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum BzImageError {
    #[error("not a bzImage: {0}")]
    NotBzImage(String),
    #[error("boot protocol {0:#x} has no payload fields (needs 2.08 or later)")]
    OldProtocol(u16),
    #[error("payload compressed with an unknown format (first bytes {0:02x?})")]
    UnknownFormat(Vec<u8>),
    #[error("decompressing the {format} payload: {detail}")]
    Decompress {
        format: &'static str,
        detail: String,
    },
    #[error("decompressed {got} bytes, the payload trailer says {want}")]
    SizeMismatch { got: usize, want: usize },
    #[error("the decompressed kernel is not an ELF64 x86-64 file")]
    NotElf,
}

/// Compression formats the kernel supports for its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Gzip,
    Xz,
    Zstd,
    Lz4,
    Bzip2,
    Lzma,
    Lzo,
}

impl Format {
    fn detect(b: &[u8]) -> Option<Self> {
        let starts = |m: &[u8]| b.starts_with(m);
        Some(if starts(&[0x1f, 0x8b]) {
            Format::Gzip
        } else if starts(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
            Format::Xz
        } else if starts(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Format::Zstd
        } else if starts(&[0x02, 0x21, 0x4c, 0x18]) {
            Format::Lz4
        } else if starts(b"BZh") {
            Format::Bzip2
        } else if starts(&[0x5d, 0, 0]) {
            Format::Lzma
        } else if starts(&[0x89, b'L', b'Z', b'O']) {
            Format::Lzo
        } else {
            return None;
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Gzip => "gzip",
            Format::Xz => "xz",
            Format::Zstd => "zstd",
            Format::Lz4 => "lz4",
            Format::Bzip2 => "bzip2",
            Format::Lzma => "lzma",
            Format::Lzo => "lzo",
        }
    }

    /// The decompressing command (reads stdin, writes stdout).
    fn command(self) -> (&'static str, &'static [&'static str]) {
        match self {
            Format::Gzip => ("gzip", &["-dc"]),
            Format::Xz => ("xz", &["-dc"]),
            Format::Zstd => ("zstd", &["-dc"]),
            Format::Lz4 => ("lz4", &["-dc"]),
            Format::Bzip2 => ("bzip2", &["-dc"]),
            Format::Lzma => ("xz", &["--format=lzma", "-dc"]),
            Format::Lzo => ("lzop", &["-dc"]),
        }
    }
}

/// Where the compressed kernel sits inside a bzImage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload {
    pub protocol: u16,
    pub offset: usize,
    pub len: usize,
    pub format: Format,
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Locate and identify the payload using the setup header.
pub fn payload(img: &[u8]) -> Result<Payload, BzImageError> {
    if img.len() < 0x260 {
        return Err(BzImageError::NotBzImage(
            "shorter than a setup header".into(),
        ));
    }
    if &img[0x202..0x206] != b"HdrS" {
        return Err(BzImageError::NotBzImage(
            "no HdrS signature at 0x202".into(),
        ));
    }
    let protocol = le16(img, 0x206);
    if protocol < 0x208 {
        return Err(BzImageError::OldProtocol(protocol));
    }
    let setup_sects = match img[0x1f1] {
        0 => 4,
        n => n as usize,
    };
    let offset = (setup_sects + 1) * 512 + le32(img, 0x248) as usize;
    let len = le32(img, 0x24c) as usize;
    if len < 8 || offset.checked_add(len).is_none_or(|end| end > img.len()) {
        return Err(BzImageError::NotBzImage(format!(
            "payload {offset:#x}+{len:#x} outside the file"
        )));
    }
    let format = Format::detect(&img[offset..])
        .ok_or_else(|| BzImageError::UnknownFormat(img[offset..offset + 8].to_vec()))?;
    Ok(Payload {
        protocol,
        offset,
        len,
        format,
    })
}

fn run_decompressor(format: Format, input: &[u8]) -> Result<Vec<u8>, BzImageError> {
    let err = |detail: String| BzImageError::Decompress {
        format: format.name(),
        detail,
    };
    let (cmd, args) = format.command();
    let mut child = Command::new(cmd)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            err(format!(
                "cannot run `{cmd}` ({e}); install it (Debian: apt-get install {cmd})"
            ))
        })?;
    let mut stdin = child.stdin.take().ok_or_else(|| err("no stdin".into()))?;
    let input = input.to_vec();
    // feed stdin from a thread so a full stdout pipe cannot deadlock us
    let feeder = std::thread::spawn(move || stdin.write_all(&input));
    let mut out = Vec::new();
    if let Some(mut so) = child.stdout.take() {
        so.read_to_end(&mut out).map_err(|e| err(e.to_string()))?;
    }
    let status = child.wait().map_err(|e| err(e.to_string()))?;
    let fed = feeder.join();
    if !status.success() {
        let mut msg = String::new();
        if let Some(mut se) = child.stderr.take() {
            let _ = se.read_to_string(&mut msg);
        }
        return Err(err(format!("`{cmd}` failed ({status}): {}", msg.trim())));
    }
    match fed {
        Ok(Ok(())) => Ok(out),
        Ok(Err(e)) => Err(err(format!("writing to `{cmd}`: {e}"))),
        Err(_) => Err(err("feeder thread panicked".into())),
    }
}

/// Decompress the kernel out of a bzImage; returns the vmlinux bytes.
pub fn extract_vmlinux(img: &[u8]) -> Result<(Payload, Vec<u8>), BzImageError> {
    let p = payload(img)?;
    let body = &img[p.offset..p.offset + p.len - 4];
    let want = le32(img, p.offset + p.len - 4) as usize;
    let out = if p.format == Format::Gzip {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(body)
            .read_to_end(&mut out)
            .map_err(|e| BzImageError::Decompress {
                format: "gzip",
                detail: e.to_string(),
            })?;
        out
    } else {
        run_decompressor(p.format, body)?
    };
    if out.len() != want {
        return Err(BzImageError::SizeMismatch {
            got: out.len(),
            want,
        });
    }
    if out.len() < 64 || &out[..4] != b"\x7fELF" || out[4] != 2 || le16(&out, 18) != 62 {
        return Err(BzImageError::NotElf);
    }
    Ok((p, out))
}

/// The PVH entry point of an ELF64 kernel: the `Xen` note of type 18
/// (XEN_ELFNOTE_PHYS32_ENTRY) in a PT_NOTE segment. `None` if absent or if
/// the file is malformed.
pub fn pvh_entry(elf: &[u8]) -> Option<u64> {
    let u64_at = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(elf.get(at..at + 8)?.try_into().ok()?))
    };
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(elf.get(at..at + 4)?.try_into().ok()?))
    };
    let u16_at = |at: usize| -> Option<u16> {
        Some(u16::from_le_bytes(elf.get(at..at + 2)?.try_into().ok()?))
    };
    let phoff = usize::try_from(u64_at(0x20)?).ok()?;
    let phentsize = u16_at(0x36)? as usize;
    let phnum = u16_at(0x38)? as usize;
    for i in 0..phnum {
        let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
        if u32_at(ph)? != 4 {
            continue; // not PT_NOTE
        }
        let mut at = usize::try_from(u64_at(ph + 8)?).ok()?;
        let end = at.checked_add(usize::try_from(u64_at(ph + 32)?).ok()?)?;
        while at + 12 <= end {
            let namesz = u32_at(at)? as usize;
            let descsz = u32_at(at + 4)? as usize;
            let ty = u32_at(at + 8)?;
            let name_at = at + 12;
            let desc_at = name_at.checked_add(namesz.checked_add(3)? & !3)?;
            let name = elf.get(name_at..name_at + namesz)?;
            if ty == 18 && name.starts_with(b"Xen") {
                return match descsz {
                    4 => u32_at(desc_at).map(u64::from),
                    8 => u64_at(desc_at),
                    _ => None,
                };
            }
            at = desc_at.checked_add(descsz.checked_add(3)? & !3)?;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::write::GzEncoder;

    /// A minimal ELF64 x86-64 file with one PT_NOTE holding a PVH note.
    fn tiny_elf(pvh: u32) -> Vec<u8> {
        let mut e = vec![0u8; 0x40 + 0x38];
        e[..4].copy_from_slice(b"\x7fELF");
        e[4] = 2;
        e[5] = 1;
        e[18..20].copy_from_slice(&62u16.to_le_bytes());
        e[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes()); // phoff
        e[0x36..0x38].copy_from_slice(&0x38u16.to_le_bytes()); // phentsize
        e[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes()); // phnum
        let note_at = e.len() as u64;
        let mut note = Vec::new();
        note.extend_from_slice(&4u32.to_le_bytes()); // namesz "Xen\0"
        note.extend_from_slice(&4u32.to_le_bytes()); // descsz
        note.extend_from_slice(&18u32.to_le_bytes()); // type
        note.extend_from_slice(b"Xen\0");
        note.extend_from_slice(&pvh.to_le_bytes());
        let ph = 0x40;
        e[ph..ph + 4].copy_from_slice(&4u32.to_le_bytes()); // PT_NOTE
        e[ph + 8..ph + 16].copy_from_slice(&note_at.to_le_bytes());
        e[ph + 32..ph + 40].copy_from_slice(&(note.len() as u64).to_le_bytes());
        e.extend_from_slice(&note);
        e
    }

    /// A fake bzImage: 2 setup sectors + 1 boot sector, header fields set,
    /// gzip payload + size trailer.
    fn tiny_bzimage(elf: &[u8]) -> Vec<u8> {
        let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(elf).unwrap();
        let mut payload = gz.finish().unwrap();
        payload.extend_from_slice(&(elf.len() as u32).to_le_bytes());
        let mut img = vec![0u8; 3 * 512 + 100];
        img[0x1f1] = 2;
        img[0x202..0x206].copy_from_slice(b"HdrS");
        img[0x206..0x208].copy_from_slice(&0x20fu16.to_le_bytes());
        img[0x248..0x24c].copy_from_slice(&100u32.to_le_bytes());
        img[0x24c..0x250].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        img.extend_from_slice(&payload);
        img.extend_from_slice(&[0u8; 16]);
        img
    }

    #[test]
    fn extracts_gzip_payload_and_finds_pvh_note() {
        let elf = tiny_elf(0x0100_0abc);
        let img = tiny_bzimage(&elf);
        let (p, out) = extract_vmlinux(&img).unwrap();
        assert_eq!(p.format, Format::Gzip);
        assert_eq!(p.offset, 3 * 512 + 100);
        assert_eq!(p.protocol, 0x20f);
        assert_eq!(out, elf);
        assert_eq!(pvh_entry(&out), Some(0x0100_0abc));
    }

    #[test]
    fn rejects_what_is_not_a_bzimage() {
        assert!(matches!(
            payload(&[0u8; 100]),
            Err(BzImageError::NotBzImage(_))
        ));
        let mut img = tiny_bzimage(&tiny_elf(1));
        img[0x206..0x208].copy_from_slice(&0x207u16.to_le_bytes());
        assert!(matches!(
            payload(&img),
            Err(BzImageError::OldProtocol(0x207))
        ));
        let mut img = tiny_bzimage(&tiny_elf(1));
        img[0x24c..0x250].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(payload(&img), Err(BzImageError::NotBzImage(_))));
        // a wrong size trailer is caught
        let elf = tiny_elf(1);
        let mut img = tiny_bzimage(&elf);
        let p = payload(&img).unwrap();
        let at = p.offset + p.len - 4;
        img[at..at + 4].copy_from_slice(&1u32.to_le_bytes());
        assert!(matches!(
            extract_vmlinux(&img),
            Err(BzImageError::SizeMismatch { want: 1, .. })
        ));
        // garbage never panics the note walker
        assert_eq!(pvh_entry(&[0u8; 10]), None);
        let mut elf = tiny_elf(1);
        elf[0x20] = 0xff;
        assert_eq!(pvh_entry(&elf), None);
    }
}
