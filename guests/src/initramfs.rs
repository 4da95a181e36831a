//! The Linux guest's initramfs: which files go in, and the gzip'd newc
//! archive they are packed into (the kernel unpacks it as its root file
//! system and runs `/init`).
//!
//! Layout (owner 0:0 throughout):
//! ```text
//! /init                    the init script (guests/linux/init), 0755
//! /bin/busybox             busybox-static, 0755
//! /bin/sh, /bin/ls, ...    one symlink to /bin/busybox per applet, at the
//!                          path `busybox --list-full` names
//! /usr/bin/ubench          the UnixBench-style suite, 0755
//! /dev/console /dev/null /dev/ttyS0   device nodes, so init has a console
//!                          before devtmpfs is mounted
//! /proc /sys /tmp /root /etc /mnt /var   empty mount points (tmp 1777)
//! /user/...                the optional user directory, modes kept
//! ```
//! Entries are emitted sorted by path, which puts every directory before
//! its contents (the kernel does not create missing parents).

use crate::cpio::{CpioError, Entry, NewcWriter};
use flate2::write::GzEncoder;
use flate2::Compression;
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum InitramfsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot run `{busybox} --list-full` to list its applets: {detail}")]
    Applets { busybox: PathBuf, detail: String },
    #[error("{path}: {what}")]
    Unsupported { path: PathBuf, what: String },
    #[error("two entries want {0}")]
    Duplicate(String),
    #[error(transparent)]
    Cpio(#[from] CpioError),
}

/// What goes into the image.
#[derive(Debug, Clone)]
pub struct ImageSpec {
    pub init_script: PathBuf,
    pub busybox: PathBuf,
    pub suite: PathBuf,
    /// Copied to /user when given.
    pub user_dir: Option<PathBuf>,
    /// Busybox applet paths (`bin/sh`, `usr/bin/sort`, ...); `None` asks the
    /// busybox binary itself (`--list-full`).
    pub applets: Option<Vec<String>>,
    /// mtime of every entry.
    pub mtime: u32,
}

/// The image's entries, sorted by path.
#[derive(Debug, Default)]
pub struct Image {
    entries: BTreeMap<String, Entry>,
}

fn read(path: &Path) -> Result<Vec<u8>, InitramfsError> {
    std::fs::read(path).map_err(|source| InitramfsError::Read {
        path: path.into(),
        source,
    })
}

impl Image {
    /// Add an entry, creating its missing parent directories (0755).
    pub fn add(&mut self, e: Entry) -> Result<(), InitramfsError> {
        let mut parent = String::new();
        let parts: Vec<&str> = e.path.split('/').collect();
        for part in &parts[..parts.len() - 1] {
            if !parent.is_empty() {
                parent.push('/');
            }
            parent.push_str(part);
            self.entries
                .entry(parent.clone())
                .or_insert_with(|| Entry::dir(&parent, 0o755));
        }
        match self.entries.get(&e.path) {
            // an explicit directory may replace an implied one (to set its mode)
            Some(old) if old.kind == crate::cpio::Kind::Dir && e.kind == old.kind => {}
            Some(_) => return Err(InitramfsError::Duplicate(e.path)),
            None => {}
        }
        self.entries.insert(e.path.clone(), e);
        Ok(())
    }

    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Copy a host directory tree under `prefix`, keeping permission bits;
    /// symlinks are kept as symlinks. Other file types are refused.
    pub fn add_tree(&mut self, src: &Path, prefix: &str) -> Result<(), InitramfsError> {
        let meta = std::fs::symlink_metadata(src).map_err(|source| InitramfsError::Read {
            path: src.into(),
            source,
        })?;
        let perm = meta.permissions().mode() & 0o7777;
        let ft = meta.file_type();
        if ft.is_dir() {
            self.add(Entry::dir(prefix, perm))?;
            let mut children: Vec<_> = std::fs::read_dir(src)
                .map_err(|source| InitramfsError::Read {
                    path: src.into(),
                    source,
                })?
                .collect::<Result<_, _>>()
                .map_err(|source| InitramfsError::Read {
                    path: src.into(),
                    source,
                })?;
            children.sort_by_key(|c| c.file_name());
            for c in children {
                let name = c.file_name();
                let name = name.to_str().ok_or_else(|| InitramfsError::Unsupported {
                    path: c.path(),
                    what: "file name is not UTF-8".into(),
                })?;
                self.add_tree(&c.path(), &format!("{prefix}/{name}"))?;
            }
        } else if ft.is_file() {
            self.add(Entry::file(prefix, perm, read(src)?))?;
        } else if ft.is_symlink() {
            let target = std::fs::read_link(src).map_err(|source| InitramfsError::Read {
                path: src.into(),
                source,
            })?;
            let target = target.to_str().ok_or_else(|| InitramfsError::Unsupported {
                path: src.into(),
                what: "symlink target is not UTF-8".into(),
            })?;
            self.add(Entry::symlink(prefix, target))?;
        } else {
            return Err(InitramfsError::Unsupported {
                path: src.into(),
                what: "only directories, files and symlinks can go into the image".into(),
            });
        }
        Ok(())
    }

    /// The uncompressed newc archive.
    pub fn to_cpio(&self, mtime: u32) -> Result<Vec<u8>, InitramfsError> {
        let mut w = NewcWriter::new(Vec::new(), mtime);
        for e in self.entries() {
            w.add(e)?;
        }
        Ok(w.finish()?)
    }

    /// The gzip'd archive, as the kernel takes it.
    pub fn to_cpio_gz(&self, mtime: u32) -> Result<Vec<u8>, InitramfsError> {
        let mut gz = GzEncoder::new(Vec::new(), Compression::best());
        let mut w = NewcWriter::new(&mut gz, mtime);
        for e in self.entries() {
            w.add(e)?;
        }
        w.finish()?;
        gz.finish().map_err(|e| InitramfsError::Cpio(e.into()))
    }
}

/// Applet paths of a busybox binary, from `busybox --list-full`.
pub fn busybox_applets(busybox: &Path) -> Result<Vec<String>, InitramfsError> {
    let err = |detail: String| InitramfsError::Applets {
        busybox: busybox.into(),
        detail,
    };
    let out = Command::new(busybox)
        .arg("--list-full")
        .output()
        .map_err(|e| err(e.to_string()))?;
    if !out.status.success() {
        return Err(err(format!("exit status {}", out.status)));
    }
    let list: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().trim_start_matches('/').to_string())
        .filter(|l| !l.is_empty())
        .collect();
    if list.is_empty() {
        return Err(err("empty applet list".into()));
    }
    Ok(list)
}

/// Assemble the image of `spec` (see the module comment for the layout).
pub fn build(spec: &ImageSpec) -> Result<Image, InitramfsError> {
    let mut img = Image::default();
    for d in [
        "dev", "proc", "sys", "root", "etc", "mnt", "var", "bin", "sbin",
    ] {
        img.add(Entry::dir(d, 0o755))?;
    }
    img.add(Entry::dir("tmp", 0o1777))?;
    img.add(Entry::char_device("dev/console", 0o600, 5, 1))?;
    img.add(Entry::char_device("dev/null", 0o666, 1, 3))?;
    img.add(Entry::char_device("dev/ttyS0", 0o660, 4, 64))?;
    img.add(Entry::file("init", 0o755, read(&spec.init_script)?))?;
    img.add(Entry::file("bin/busybox", 0o755, read(&spec.busybox)?))?;
    img.add(Entry::file("usr/bin/ubench", 0o755, read(&spec.suite)?))?;
    let applets = match &spec.applets {
        Some(a) => a.clone(),
        None => busybox_applets(&spec.busybox)?,
    };
    for a in applets {
        // never let an applet shadow one of our own files (e.g. `linuxrc`)
        if a.is_empty() || img.entries.contains_key(&a) || a.split('/').any(|p| p == "..") {
            continue;
        }
        img.add(Entry::symlink(&a, "/bin/busybox"))?;
    }
    if let Some(dir) = &spec.user_dir {
        img.add_tree(dir, "user")?;
    }
    Ok(img)
}

/// Build the image and write it gzip'd to `out`; returns its size in bytes.
pub fn write(spec: &ImageSpec, out: &Path) -> Result<(Image, u64), InitramfsError> {
    let img = build(spec)?;
    let bytes = img.to_cpio_gz(spec.mtime)?;
    let werr = |source| InitramfsError::Write {
        path: out.into(),
        source,
    };
    let tmp = out.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(werr)?;
    f.write_all(&bytes).map_err(werr)?;
    drop(f);
    std::fs::rename(&tmp, out).map_err(werr)?;
    Ok((img, bytes.len() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpio::{read_newc, ReadEntry, S_IFCHR, S_IFDIR, S_IFLNK, S_IFREG};
    use flate2::read::GzDecoder;
    use std::io::Read;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pacer-initramfs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn by_name<'a>(entries: &'a [ReadEntry], name: &str) -> &'a ReadEntry {
        entries
            .iter()
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("{name} missing from the image"))
    }

    #[test]
    fn image_layout_reads_back() {
        let d = tmpdir("layout");
        let init = d.join("init");
        std::fs::write(&init, "#!/bin/sh\necho hello\n").unwrap();
        std::fs::write(d.join("busybox"), vec![0x7f; 1000]).unwrap();
        std::fs::write(d.join("ubench"), vec![0x42; 3000]).unwrap();
        let user = d.join("userdir");
        std::fs::create_dir_all(user.join("sub")).unwrap();
        std::fs::write(user.join("Run"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(user.join("Run"), std::fs::Permissions::from_mode(0o750)).unwrap();
        std::fs::write(user.join("sub/data"), "abc").unwrap();
        std::os::unix::fs::symlink("sub/data", user.join("link")).unwrap();

        let spec = ImageSpec {
            init_script: init,
            busybox: d.join("busybox"),
            suite: d.join("ubench"),
            user_dir: Some(user),
            applets: Some(vec![
                "bin/sh".into(),
                "usr/bin/sort".into(),
                "sbin/poweroff".into(),
                "linuxrc".into(),
            ]),
            mtime: 0,
        };
        let out = d.join("initramfs.cpio.gz");
        let (_, size) = write(&spec, &out).unwrap();
        let gz = std::fs::read(&out).unwrap();
        assert_eq!(gz.len() as u64, size);
        assert_eq!(&gz[..2], &[0x1f, 0x8b], "gzip magic");
        let mut cpio = Vec::new();
        GzDecoder::new(&gz[..]).read_to_end(&mut cpio).unwrap();
        let entries = read_newc(&cpio).unwrap();

        let init = by_name(&entries, "init");
        assert_eq!(init.file_type(), S_IFREG);
        assert_eq!(init.perm(), 0o755);
        assert_eq!(init.data, b"#!/bin/sh\necho hello\n");
        assert_eq!(by_name(&entries, "bin/busybox").data.len(), 1000);
        let ub = by_name(&entries, "usr/bin/ubench");
        assert_eq!((ub.data.len(), ub.perm()), (3000, 0o755));
        let console = by_name(&entries, "dev/console");
        assert_eq!(console.file_type(), S_IFCHR);
        assert_eq!((console.rdev_major, console.rdev_minor), (5, 1));
        assert_eq!(by_name(&entries, "tmp").perm(), 0o1777);
        for applet in ["bin/sh", "usr/bin/sort", "sbin/poweroff", "linuxrc"] {
            let a = by_name(&entries, applet);
            assert_eq!(a.file_type(), S_IFLNK);
            assert_eq!(a.data, b"/bin/busybox");
        }
        assert_eq!(by_name(&entries, "user").file_type(), S_IFDIR);
        assert_eq!(by_name(&entries, "user/Run").perm(), 0o750);
        assert_eq!(by_name(&entries, "user/sub/data").data, b"abc");
        assert_eq!(by_name(&entries, "user/link").data, b"sub/data");
        assert_eq!(by_name(&entries, "usr").file_type(), S_IFDIR);

        // every entry's parent directory comes before it
        for (i, e) in entries.iter().enumerate() {
            if let Some((parent, _)) = e.name.rsplit_once('/') {
                let p = entries.iter().position(|x| x.name == parent);
                assert!(
                    matches!(p, Some(p) if p < i),
                    "{} before its parent",
                    e.name
                );
            }
            assert_eq!((e.uid, e.gid), (0, 0));
        }
        // the same inputs give the same bytes
        let (_, size2) = write(&spec, &out).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), gz);
        assert_eq!(size, size2);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// The image guests/linux/build.sh made, if there is one: /init is the
    /// script of this checkout, the suite and busybox are there, /bin/sh
    /// is an applet link, the console node exists.
    #[test]
    fn built_image_if_present_is_complete() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let image = root.join("out/linux/initramfs.cpio.gz");
        let Ok(gz) = std::fs::read(&image) else {
            println!(
                "SKIPPED: no {} (bash guests/linux/build.sh)",
                image.display()
            );
            return;
        };
        let mut cpio = Vec::new();
        GzDecoder::new(&gz[..]).read_to_end(&mut cpio).unwrap();
        let entries = read_newc(&cpio).unwrap();
        let init = by_name(&entries, "init");
        assert_eq!(init.perm(), 0o755);
        assert_eq!(
            init.data,
            std::fs::read(root.join("linux/init")).unwrap(),
            "image older than guests/linux/init: rebuild it"
        );
        assert_eq!(&by_name(&entries, "usr/bin/ubench").data[..4], b"\x7fELF");
        assert_eq!(&by_name(&entries, "bin/busybox").data[..4], b"\x7fELF");
        assert_eq!(by_name(&entries, "bin/sh").data, b"/bin/busybox");
        assert_eq!(by_name(&entries, "dev/console").file_type(), S_IFCHR);
    }

    #[test]
    fn applets_do_not_shadow_our_files() {
        let d = tmpdir("shadow");
        for f in ["init", "busybox", "ubench"] {
            std::fs::write(d.join(f), f).unwrap();
        }
        let spec = ImageSpec {
            init_script: d.join("init"),
            busybox: d.join("busybox"),
            suite: d.join("ubench"),
            user_dir: None,
            applets: Some(vec!["init".into(), "bin/busybox".into(), "../evil".into()]),
            mtime: 0,
        };
        let img = build(&spec).unwrap();
        let cpio = img.to_cpio(0).unwrap();
        let entries = read_newc(&cpio).unwrap();
        assert_eq!(by_name(&entries, "init").data, b"init");
        assert_eq!(by_name(&entries, "bin/busybox").data, b"busybox");
        assert!(!entries.iter().any(|e| e.name.contains("..")));
        let _ = std::fs::remove_dir_all(&d);
    }
}
