#!/usr/bin/env bash
# Build Pacer's Linux guest image into guests/out/linux/:
#
#   vmlinuz            Debian's generic 6.1 kernel (bzImage), as packaged
#   vmlinux            the same kernel decompressed (ELF with a PVH entry)
#   initramfs.cpio.gz  /init + busybox-static + the UnixBench-style suite
#                      (+ /user, the optional user directory)
#   ubench, busybox    the suite and busybox for the host reference run
#                      (`pacer unixbench --host`)
#   kernel-config, kernel-version
#
# usage: bash guests/linux/build.sh [USER_DIR]     (or PACER_USER_DIR=DIR)
#
# Packages are fetched with `apt-get download` (no root needed) into
# guests/out/linux/cache/ and unpacked with dpkg-deb; nothing is installed
# on the host except missing build tools, through apt-get (root only).
# PACER_KERNEL_PKG overrides the kernel package (default: the one
# linux-image-amd64 depends on).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${PACER_LINUX_OUT:-$root/guests/out/linux}
cache=$out/cache
user_dir=${1:-${PACER_USER_DIR:-}}
export PATH="$HOME/.cargo/bin:$PATH"
t0=$(date +%s.%N)

say() { printf '== %s\n' "$*"; }
die() { printf 'build.sh: %s\n' "$*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"
    elif command -v sudo >/dev/null; then sudo "$@"
    else die "needs root for: $*"
    fi
}

# -- build tools ---------------------------------------------------------------
missing=()
command -v gcc >/dev/null || missing+=(gcc)
command -v make >/dev/null || missing+=(make)
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || missing+=(libc6-dev)
command -v xz >/dev/null || missing+=(xz-utils)
command -v dpkg-deb >/dev/null || missing+=(dpkg)
if [ ${#missing[@]} -gt 0 ]; then
    say "installing build tools: ${missing[*]}"
    as_root apt-get install -y --no-install-recommends "${missing[@]}"
fi
command -v cargo >/dev/null || die "cargo not found (install Rust: ci/install.sh)"
[ -z "$user_dir" ] || [ -d "$user_dir" ] || die "user directory $user_dir does not exist"

# -- Debian packages -----------------------------------------------------------
kernel_pkg=${PACER_KERNEL_PKG:-}
if [ -z "$kernel_pkg" ]; then
    kernel_pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
        awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
    if [ -z "$kernel_pkg" ]; then
        say "no package lists yet: apt-get update"
        as_root apt-get update -qq
        kernel_pkg=$(apt-cache depends linux-image-amd64 |
            awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
    fi
fi
[ -n "$kernel_pkg" ] || die "cannot resolve the kernel package behind linux-image-amd64"

mkdir -p "$cache"
fetch() { # package -> path of its .deb in the cache
    local deb
    deb=$(ls "$cache/$1"_*.deb 2>/dev/null | head -1 || true)
    if [ -z "$deb" ]; then
        (cd "$cache" && apt-get download -q "$1" >&2) ||
            die "apt-get download $1 failed (run apt-get update first?)"
        deb=$(ls "$cache/$1"_*.deb | head -1)
    fi
    printf '%s\n' "$deb"
}
say "kernel package $kernel_pkg, busybox-static (cache: $cache)"
kernel_deb=$(fetch "$kernel_pkg")
busybox_deb=$(fetch busybox-static)

# only /boot of the kernel package: the image carries no modules
kroot=$cache/kernel-root
if [ ! -d "$kroot/boot" ] || [ "$kernel_deb" -nt "$kroot/boot" ]; then
    rm -rf "$kroot" && mkdir -p "$kroot"
    dpkg-deb --fsys-tarfile "$kernel_deb" | tar -x -C "$kroot" ./boot
    touch "$kroot/boot"
fi
broot=$cache/busybox-root
if [ ! -x "$broot/bin/busybox" ] || [ "$busybox_deb" -nt "$broot/bin/busybox" ]; then
    rm -rf "$broot" && dpkg-deb -x "$busybox_deb" "$broot"
    touch "$broot/bin/busybox"
fi
vmlinuz=$(ls "$kroot"/boot/vmlinuz-* | head -1)
kver=${vmlinuz##*/vmlinuz-}

# -- the suite and the packing tools ---------------------------------------------
say "building the UnixBench-style suite (static)"
make -s -C "$here/suite" O="$out"
say "building mkinitramfs and extract-vmlinux"
cargo build -q --release --locked -p guests --bin mkinitramfs --bin extract-vmlinux
bin=$root/target/release

# -- the image -----------------------------------------------------------------
cp "$broot/bin/busybox" "$out/busybox"
set -- --init "$here/init" --busybox "$out/busybox" --suite "$out/ubench" -o "$out/initramfs.cpio.gz"
[ -n "$user_dir" ] && set -- "$@" --user-dir "$user_dir"
"$bin/mkinitramfs" "$@"
cp "$vmlinuz" "$out/vmlinuz"
cp "$kroot/boot/config-$kver" "$out/kernel-config"
echo "$kver" >"$out/kernel-version"
"$bin/extract-vmlinux" "$out/vmlinuz" -o "$out/vmlinux"

t1=$(date +%s.%N)
say "done: Linux guest image in $out (kernel $kver)"
for f in vmlinuz vmlinux initramfs.cpio.gz ubench busybox; do
    awk -v f="$f" -v s="$(stat -c %s "$out/$f")" 'BEGIN { printf "   %-18s %7.1f MiB\n", f, s / 1048576 }'
done
awk -v a="$t0" -v b="$t1" 'BEGIN { printf "   build time %.1f s\n", b - a }'
