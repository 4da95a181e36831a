#!/usr/bin/env bash
# End-to-end check of the Linux guest image with QEMU: boot the kernel with
# an initramfs that also carries a small user directory, run every test of
# the suite briefly (1 pass, 0.3 s) with 1 and N copies, run the user
# command, reboot; then score the console log with `pacer unixbench
# --report` and check that all twelve tests were scored for both copy
# counts and that the user command's output was captured.
#
# usage: bash guests/linux/test-image.sh [--kvm]
#   default: QEMU's TCG emulator (works on any x86-64 machine, ~1 min with
#   2 vCPUs); --kvm: qemu -enable-kvm (hardware KVM; the PVM-style KVM of
#   the development machines cannot run Linux user space).
# Needs: bash guests/linux/build.sh first, qemu-system-x86 (Debian package).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
img=$root/guests/out/linux
export PATH="$HOME/.cargo/bin:$PATH"
accel=(-accel tcg,thread=multi -cpu max)
[ "${1:-}" = --kvm ] && accel=(-enable-kvm -cpu host)

for f in vmlinuz ubench busybox; do
    [ -f "$img/$f" ] || { echo "missing $img/$f: run bash guests/linux/build.sh" >&2; exit 2; }
done
command -v qemu-system-x86_64 >/dev/null ||
    { echo "qemu-system-x86_64 not found (Debian: apt-get install qemu-system-x86)" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/user"
cat >"$work/user/hello.sh" <<'EOF'
#!/bin/sh
echo "user command ran in $(pwd) with $(nproc) CPUs"
EOF
chmod +x "$work/user/hello.sh"

cargo build -q --release --locked -p guests --bin mkinitramfs
cargo build -q --release --locked -p pacer
"$root/target/release/mkinitramfs" --init "$root/guests/linux/init" --busybox "$img/busybox" \
    --suite "$img/ubench" --user-dir "$work/user" -o "$work/initramfs.cpio.gz"

echo "== booting $img/vmlinuz under QEMU (${accel[*]}), 2 vCPUs"
start=$(date +%s.%N)
timeout 900 qemu-system-x86_64 "${accel[@]}" -smp 2 -m 1024 -nographic -no-reboot -monitor none \
    -kernel "$img/vmlinuz" -initrd "$work/initramfs.cpio.gz" \
    -append 'console=ttyS0 reboot=k panic=-1 ub.passes=1 ub.seconds=0.3 ub.user_cmd="./hello.sh"' \
    -serial "file:$work/console.log" >"$work/qemu.out" 2>&1 || true
end=$(date +%s.%N)
awk -v a="$start" -v b="$end" 'BEGIN { printf "== guest ran %.1f s (boot, suite, user command, reboot)\n", b - a }'

"$root/target/release/pacer" unixbench --report "$work/console.log" --user-out "$work/user.txt" |
    tee "$work/report.txt"
fail=0
for copies in "1 copy" "2 copies"; do
    grep -q "== guest: $copies, 2 CPUs" "$work/report.txt" || { echo "FAIL: no $copies section"; fail=1; }
done
[ "$(grep -c '^System index (12 tests)' "$work/report.txt")" = 2 ] ||
    { echo "FAIL: not all twelve tests scored for both copy counts"; fail=1; }
grep -q "user command ran in /user with 2 CPUs" "$work/user.txt" ||
    { echo "FAIL: user command output not captured"; fail=1; }
grep -q "UB done end=reboot" "$work/console.log" || { echo "FAIL: init did not finish"; fail=1; }
if [ $fail != 0 ]; then
    echo "console log:"; cat "$work/console.log"; exit 1
fi
echo "test-image: all checks passed"
