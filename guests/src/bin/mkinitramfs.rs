//! `mkinitramfs`: pack the Linux guest's initramfs (gzip'd newc cpio), or
//! list an existing one. Used by guests/linux/build.sh; the layout is
//! documented in `guests::initramfs`.
//!
//! ```text
//! mkinitramfs --init FILE --busybox FILE --suite FILE [--user-dir DIR] -o OUT
//! mkinitramfs --list IMAGE
//! ```

use clap::Parser;
use flate2::read::GzDecoder;
use guests::cpio::{read_newc, S_IFCHR, S_IFDIR, S_IFLNK};
use guests::initramfs::{self, ImageSpec};
use std::io::Read;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(name = "mkinitramfs", about = "Pack Pacer's Linux guest initramfs")]
struct Args {
    /// The init script (becomes /init).
    #[arg(long, required_unless_present = "list")]
    init: Option<PathBuf>,
    /// busybox-static (becomes /bin/busybox, plus one link per applet).
    #[arg(long, required_unless_present = "list")]
    busybox: Option<PathBuf>,
    /// The suite binary (becomes /usr/bin/ubench).
    #[arg(long, required_unless_present = "list")]
    suite: Option<PathBuf>,
    /// A directory copied to /user (e.g. a benchmark checkout).
    #[arg(long)]
    user_dir: Option<PathBuf>,
    /// Output file (.cpio.gz).
    #[arg(short, long, required_unless_present = "list")]
    output: Option<PathBuf>,
    /// List the entries of an existing image instead.
    #[arg(long, conflicts_with_all = ["init", "busybox", "suite", "user_dir", "output"])]
    list: Option<PathBuf>,
}

fn list(path: &PathBuf) -> Result<(), String> {
    let gz = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut cpio = Vec::new();
    GzDecoder::new(&gz[..])
        .read_to_end(&mut cpio)
        .map_err(|e| format!("{}: not gzip: {e}", path.display()))?;
    let entries = read_newc(&cpio).map_err(|e| format!("{}: {e}", path.display()))?;
    for e in &entries {
        let ty = match e.file_type() {
            S_IFDIR => 'd',
            S_IFLNK => 'l',
            S_IFCHR => 'c',
            _ => '-',
        };
        let extra = match e.file_type() {
            S_IFLNK => format!(" -> {}", String::from_utf8_lossy(&e.data)),
            S_IFCHR => format!(" ({}, {})", e.rdev_major, e.rdev_minor),
            _ => String::new(),
        };
        println!(
            "{ty} {:04o} {:>9} /{}{extra}",
            e.perm(),
            e.data.len(),
            e.name
        );
    }
    println!("{} entries", entries.len());
    Ok(())
}

fn main() {
    let a = Args::parse();
    let result = if let Some(p) = &a.list {
        list(p)
    } else {
        // clap's required_unless_present guarantees these
        let (Some(init), Some(busybox), Some(suite), Some(out)) =
            (a.init, a.busybox, a.suite, a.output)
        else {
            eprintln!("mkinitramfs: --init, --busybox, --suite and -o are required");
            std::process::exit(2);
        };
        let spec = ImageSpec {
            init_script: init,
            busybox,
            suite,
            user_dir: a.user_dir,
            applets: None,
            mtime: 0,
        };
        initramfs::write(&spec, &out)
            .map(|(img, size)| {
                println!(
                    "mkinitramfs: {} ({} entries, {:.1} MiB gzip'd)",
                    out.display(),
                    img.len(),
                    size as f64 / (1024.0 * 1024.0)
                )
            })
            .map_err(|e| e.to_string())
    };
    if let Err(e) = result {
        eprintln!("mkinitramfs: {e}");
        std::process::exit(1);
    }
}
