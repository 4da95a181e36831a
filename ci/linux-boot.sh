#!/usr/bin/env bash
# Early boot of the Linux guest image under Pacer, beside QEMU.
#
#   bash ci/linux-boot.sh [--further] [--no-qemu] [--no-install] [--limit S] [--config FILE] [--logs DIR]
#
# Boots configs/linux.toml (Debian's generic kernel, 2 vCPUs, the
# initramfs of guests/linux/) under Pacer with policy "host" (KVM's
# in-kernel LAPIC/IOAPIC) and policy "haiku" (the scheduled engine and
# Pacer's own LAPIC/IOAPIC), then under QEMU (-enable-kvm, the same kernel,
# initramfs and command line, booted through its PVH entry), one after the
# other. The config runs unchanged except for its log_dir (a temporary
# directory) and, with --further, `cpuid = { cx16 = false }` and `noxsave`
# at the end of its cmdline.
#
# Each Pacer console must show what Pacer gave the kernel: the banner, the
# command line Pacer passed (console=ttyS0 reboot=k, then the config's
# cmdline), the e820 map Pacer built for memory_mib, the MP table found at
# 0xF0000, the I/O APIC and the CPU count from Pacer's MADT. With --further
# also the switch to the I/O APIC ("APIC: Switch to symmetric I/O mode
# setup") and, under haiku, the missing 8259 ("Using NULL legacy PIC").
#
# On hardware KVM the kernel goes on to run the UnixBench-style suite (see
# README); on a KVM that emulates guest ring 0 (the development machines)
# it stops with "KVM internal error" where the emulator gives up: at the
# first SLUB allocation (CMPXCHG16B), or with --further at the INT3
# self-test of the alternatives. The table gives, per run, the wall time
# from starting the VMM to the kernel banner and to the last console line,
# the last line, and how the VM stopped.
#
# Needs the image (bash guests/linux/build.sh, which downloads Debian
# packages; run here if guests/out/linux/ lacks it) and /dev/kvm: without
# /dev/kvm this prints SKIPPED and exits 0. Exit status 1 if a Pacer
# console lacks a line it must show.
#
# --further     hide CMPXCHG16B and XSAVE from the guest (the two
#               instructions this KVM's emulator stops at before): Linux
#               gets through the local APIC, I/O APIC and console setup
#               to the INT3 self-test (about a minute longer per run).
# --no-qemu     skip QEMU.
# --no-install  do not apt-get install qemu-system-x86 when it is missing.
# --limit S     time limit per run (default 600 s).
# --config FILE another Linux VM config (one [[vm]]).
# --logs DIR    keep the time-stamped consoles (host.console, haiku.console,
#               qemu.console), Pacer's output and the derived configs there.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
export PATH="$HOME/.cargo/bin:$PATH"

further=0 qemu_wanted=1 install=1 limit=600 config=configs/linux.toml logs=
while (($#)); do
    case "$1" in
    --further) further=1 ;;
    --no-qemu) qemu_wanted=0 ;;
    --no-install) install=0 ;;
    --limit) limit=$2; shift ;;
    --config) config=$2; shift ;;
    --logs) logs=$2; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed 's/^# \{0,1\}//; $d'; exit 0 ;;
    *) echo "linux-boot.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done

if [ ! -r /dev/kvm ] || [ ! -w /dev/kvm ]; then
    echo "linux-boot: SKIPPED (/dev/kvm not available)"
    exit 0
fi
img=$root/guests/out/linux
if [ ! -f "$img/vmlinux" ] || [ ! -f "$img/initramfs.cpio.gz" ]; then
    echo "== no Linux guest image in $img: bash guests/linux/build.sh"
    bash guests/linux/build.sh
fi
echo "== cargo build --release -p pacer"
cargo build -q --release --locked -p pacer
pacer=$root/target/release/pacer

work=$(mktemp -d /tmp/pacer-linux-boot.XXXXXX)
bg=()
cleanup() {
    for p in "${bg[@]}"; do kill "$p" 2>/dev/null || true; done
    if [ -n "$logs" ]; then
        mkdir -p "$logs" && cp -r "$work"/. "$logs"/ 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# The config's settings this script needs (one [[vm]]).
cfgdir=$(cd "$(dirname "$config")" && pwd)
value() { sed -n "s/^$1 *= *\"\{0,1\}\([^\"]*\)\"\{0,1\}.*/\1/p" "$config" | head -1; }
vm=$(value name)
vcpus=$(value vcpus)
mem=$(value memory_mib)
user_cmdline=$(value cmdline)
abs() { case "$1" in /*) echo "$1" ;; *) echo "$cfgdir/$1" ;; esac; }
kernel=$(abs "$(value kernel)")
initrd=$(abs "$(value initramfs)$(value initrd)")
[ "$further" = 1 ] && user_cmdline="${user_cmdline:+$user_cmdline }noxsave"
expected_cmdline="console=ttyS0 reboot=k${user_cmdline:+ $user_cmdline}"

# The config with paths made absolute, its log_dir in $work/$1.
derive() {
    sed -e "s|^log_dir *=.*|log_dir = \"$work/$1\"|" \
        -e "s|^kernel *=.*|kernel = \"$kernel\"|" \
        -e "s|^initrd *=.*|initrd = \"$initrd\"|" \
        -e "s|^initramfs *=.*|initramfs = \"$initrd\"|" \
        -e "s|^# *cpuid = { cx16 = false }|cpuid = { cx16 = false }|" "$config" >"$work/$1.toml"
    if [ "$further" = 0 ]; then sed -i 's|^cpuid = { cx16 = false }|# &|' "$work/$1.toml"; fi
    if [ "$further" = 1 ] && ! grep -q '^cpuid = { cx16 = false }' "$work/$1.toml"; then
        echo 'cpuid = { cx16 = false }' >>"$work/$1.toml"
    fi
    if [ "$further" = 1 ]; then
        if grep -q '^cmdline *=' "$work/$1.toml"; then
            sed -i "s|^cmdline *=.*|cmdline = \"$user_cmdline\"|" "$work/$1.toml"
        else
            echo "cmdline = \"$user_cmdline\"" >>"$work/$1.toml"
        fi
    fi
}

# stdin lines, each prefixed with the seconds since $t0 (microseconds of
# $EPOCHREALTIME; no process per line), carriage returns dropped.
stamp() {
    local line now
    while IFS= read -r line; do
        now=${EPOCHREALTIME/./}
        printf '%d.%06d %s\n' $(((now - t0) / 1000000)) $(((now - t0) % 1000000)) "${line//$'\r'/}"
    done
}

run_pacer() { # policy
    local policy=$1
    derive "$policy"
    local log=$work/$policy/latest/$vm.console.log # (each run has its own directory)
    mkdir -p "$work/$policy"
    echo "== pacer run $config --policy $policy (log_dir $work/$policy)"
    t0=${EPOCHREALTIME/./}
    tail -n +1 -F -s 0.05 "$log" 2>/dev/null > >(stamp >"$work/$policy.console") &
    local tailpid=$!
    bg+=("$tailpid")
    set +e
    timeout "$limit" "$pacer" run "$work/$policy.toml" --policy "$policy" >"$work/$policy.pacer" 2>&1
    local rc=$?
    set -e
    sleep 1
    kill "$tailpid" 2>/dev/null || true
    # "internal_error: vcpu0: KVM internal error, suberror 1 (emulation
    # failure), at RIP 0x..." -> "emulation failure, RIP 0x...".
    sed -n 's/.*VM stopped: //p; s/.*\] \(FAILED\|OK\): //p' "$work/$policy.pacer" | head -1 |
        sed 's/^internal_error: vcpu[0-9]*: KVM internal error, suberror 1 (emulation failure), at RIP \(0x\)\{0,1\}/emulation failure, RIP /' \
            >"$work/$policy.stop"
    [ -s "$work/$policy.stop" ] || echo "pacer exit $rc" >"$work/$policy.stop"
}

run_qemu() {
    local qemu
    qemu=$(command -v qemu-system-x86_64 || true)
    if [ -z "$qemu" ] && [ "$install" = 1 ] && [ "$(id -u)" = 0 ]; then
        echo "== installing qemu-system-x86"
        apt-get install -y -qq qemu-system-x86 >/dev/null 2>&1 || true
        qemu=$(command -v qemu-system-x86_64 || true)
    fi
    if [ -z "$qemu" ]; then
        echo "== QEMU: not installed, skipped"
        return
    fi
    # Pacer's line exactly as the kernel printed it.
    local cmdline
    cmdline=$(sed -n 's/^[0-9.]* .*Command line: //p' "$work/host.console" | head -1)
    [ -n "$cmdline" ] || cmdline=$expected_cmdline
    local cpu=qemu64,+x2apic,+tsc-deadline
    [ "$further" = 1 ] && cpu=$cpu,-cx16
    echo "== qemu-system-x86_64 -enable-kvm -cpu $cpu -smp $vcpus -m $mem -kernel $(basename "$kernel") -initrd $(basename "$initrd") -append '$cmdline'"
    t0=${EPOCHREALTIME/./}
    "$qemu" -enable-kvm -cpu "$cpu" -smp "$vcpus" -m "$mem" -nographic -no-reboot -monitor none \
        -kernel "$kernel" -initrd "$initrd" -append "$cmdline" -serial stdio \
        > >(stamp >"$work/qemu.console") 2>"$work/qemu.err" &
    local pid=$!
    bg+=("$pid")
    # QEMU pauses the VM on an emulation failure and keeps running.
    local start=$SECONDS
    while kill -0 "$pid" 2>/dev/null; do
        if grep -q "KVM internal error" "$work/qemu.err" 2>/dev/null; then
            sleep 0.5 # the register dump follows the message
            echo "emulation failure, RIP $(sed -n 's/^RIP=\([0-9a-f]*\).*/\1/p' "$work/qemu.err" | head -1)" >"$work/qemu.stop"
            break
        fi
        if ((SECONDS - start > limit)); then
            echo "time limit ${limit} s" >"$work/qemu.stop"
            break
        fi
        sleep 0.5
    done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    sleep 0.5
    [ -s "$work/qemu.stop" ] || echo "exited" >"$work/qemu.stop"
}

fail=0
check() { # run, fixed string
    if ! grep -qF -- "$2" "$work/$1.console"; then
        echo "FAIL ($1): no console line with: $2"
        fail=1
    fi
}

runs=(host haiku)
for p in "${runs[@]}"; do run_pacer "$p"; done
[ "$qemu_wanted" = 1 ] && run_qemu

# The e820 map Pacer builds for memory_mib (RAM below the 3 GiB gap).
hex() { printf '0x%016x' "$1"; }
ram_end=$((mem << 20))
[ "$ram_end" -gt $((3 << 30)) ] && ram_end=$((3 << 30))
for p in "${runs[@]}"; do
    check "$p" "Linux version "
    check "$p" "Command line: $expected_cmdline"
    check "$p" "BIOS-e820: [mem $(hex 0)-$(hex $((0xa0000 - 1)))] usable"
    check "$p" "BIOS-e820: [mem $(hex 0xa0000)-$(hex $((0x100000 - 1)))] reserved"
    check "$p" "BIOS-e820: [mem $(hex 0x100000)-$(hex $((ram_end - 1)))] usable"
    check "$p" "found SMP MP-table at [mem 0x000f0000-0x000f000f]"
    check "$p" "IOAPIC[0]: apic_id 0, version 17, address 0xfec00000, GSI 0-23"
    check "$p" "ACPI: Using ACPI (MADT) for SMP configuration information"
    check "$p" "smpboot: Allowing $vcpus CPUs, 0 hotplug CPUs"
    if [ "$further" = 1 ]; then
        check "$p" "APIC: Switch to symmetric I/O mode setup"
    fi
done
[ "$further" = 1 ] && check haiku "Using NULL legacy PIC"

# The table.
echo
printf '%-12s %9s %10s  %-36s %s\n' run banner "last line" stop "last console line"
for r in host haiku qemu; do
    [ -f "$work/$r.console" ] || continue
    name="pacer $r"
    [ "$r" = qemu ] && name=qemu
    banner=$(awk '/Linux version / { printf "%.1f s", $1; exit }' "$work/$r.console")
    last=$(awk 'NF > 1 { t = $1; $1 = ""; l = $0 } END { printf "%.1f s\t%s", t, substr(l, 2) }' "$work/$r.console")
    printf '%-12s %9s %10s  %-36.36s %.70s\n' "$name" "${banner:--}" "${last%%$'\t'*}" \
        "$(cat "$work/$r.stop")" "${last#*$'\t'}"
done
echo
if [ "$fail" = 0 ]; then
    echo "linux-boot: passed (banner, command line, e820 map, MP table, I/O APIC, $vcpus CPUs from the MADT under host and haiku)"
else
    echo "linux-boot: FAILED${logs:+ (consoles in $logs)}"
    for p in "${runs[@]}"; do echo "--- $p: last 15 lines"; tail -15 "$work/$p.console"; done
fi
exit "$fail"
