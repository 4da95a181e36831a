//! `extract-vmlinux BZIMAGE -o VMLINUX`: decompress the ELF kernel out of a
//! bzImage (see `guests::bzimage`), report its format and PVH entry.

use clap::Parser;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "extract-vmlinux",
    about = "Extract the ELF vmlinux from a bzImage"
)]
struct Args {
    /// The bzImage (e.g. Debian's /boot/vmlinuz-*).
    bzimage: PathBuf,
    /// Where to write the ELF kernel.
    #[arg(short, long)]
    output: PathBuf,
}

fn main() {
    let a = Args::parse();
    let run = || -> Result<String, String> {
        let img = std::fs::read(&a.bzimage).map_err(|e| format!("{}: {e}", a.bzimage.display()))?;
        let (p, elf) = guests::bzimage::extract_vmlinux(&img).map_err(|e| e.to_string())?;
        std::fs::write(&a.output, &elf).map_err(|e| format!("{}: {e}", a.output.display()))?;
        let pvh = match guests::bzimage::pvh_entry(&elf) {
            Some(e) => format!("PVH entry {e:#x}"),
            None => "no PVH note".into(),
        };
        Ok(format!(
            "extract-vmlinux: {} ({} payload, boot protocol {}.{:02}) -> {} ({:.1} MiB ELF, {pvh})",
            a.bzimage.display(),
            p.format.name(),
            p.protocol >> 8,
            p.protocol & 0xff,
            a.output.display(),
            elf.len() as f64 / (1024.0 * 1024.0)
        ))
    };
    match run() {
        Ok(msg) => println!("{msg}"),
        Err(e) => {
            eprintln!("extract-vmlinux: {e}");
            std::process::exit(1);
        }
    }
}
