#!/usr/bin/env bash
# kvm-unit-tests x86 under Pacer, beside QEMU on the same images.
#
#   ci/kvm-unit-tests.sh [--quick] [--no-qemu] [--no-install] [--profile P]
#                        [--dispatch D] [TEST...]
#
# The suite is an external input: its prebuilt images (*.flat) and source
# tarball live outside the repository, in $KVM_UNIT_TESTS_DIR (default:
# ../shared/kvm-unit-tests next to the repository). Without them, or
# without /dev/kvm, this prints SKIPPED and exits 0.
#
# Each TEST is a section of the suite's x86/unittests.cfg (read from the
# images directory, else from the source tarball): smptest, smptest3,
# x2apic, xapic, ioapic, vmexit_cpuid, ... Its `smp`, `test_args` and
# `qemu_params` become a Pacer config (vcpus, cmdline, cpuid overrides for
# -cpu +/-x2apic and +/-tsc-deadline) and a QEMU command line. Every test
# runs under Pacer with policy "host" (KVM's in-kernel LAPIC/IOAPIC), under
# Pacer's own interrupt controller (policy "haiku": the scheduled engine
# and devices/src/irqchip) and under QEMU, each with a per-test time limit.
# The table gives PASS / FAIL (failures of tests) / SKIP / TIMEOUT with the
# wall time, and the cycle counts the vmexit tests print (host / haiku /
# QEMU). Then, per test and Pacer column, the result lines that differ
# from QEMU's.
#
# Exit status: 1 if Pacer (either column) does worse than QEMU on any test
# (a line QEMU passes that Pacer does not, or a worse outcome), or, without
# QEMU, if any Pacer test does not pass; else 0. The last line counts tests
# that matched ("passed") and did worse ("failed").
#
# --quick       smptest (2 and 3 vCPUs) and the vmexit tests that take
#               seconds; what `ci/test.sh` runs.
# --dispatch D  run the haiku column under `dispatch = D` (threads, the
#               default; workers; kvm-irqchip: KVM's in-kernel local APIC
#               with the engine deciding, so the suite then tests KVM's
#               LAPIC under Pacer's scheduling, not devices/src/irqchip).
# --no-qemu     skip the QEMU column.
# --no-install  do not apt-get install qemu-system-x86 when it is missing.
# --profile P   cargo profile of the pacer binary (release, default; or dev).
# --logs DIR    keep every console log (TEST.host.log, TEST.qemu.log, ...) there.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
export PATH="$HOME/.cargo/bin:$PATH"

quick=0 qemu_wanted=1 install=1 profile=release logs="" dispatch=threads
tests=()
while (($#)); do
    case "$1" in
    --quick) quick=1 ;;
    --no-qemu) qemu_wanted=0 ;;
    --no-install) install=0 ;;
    --profile) profile=$2; shift ;;
    --logs) logs=$2; shift ;;
    --dispatch) dispatch=$2; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed 's/^# \{0,1\}//; $d'; exit 0 ;;
    -*) echo "kvm-unit-tests.sh: unknown option $1" >&2; exit 2 ;;
    *) tests+=("$1") ;;
    esac
    shift
done

images=${KVM_UNIT_TESTS_DIR:-$root/../shared/kvm-unit-tests}
if [ ! -d "$images" ] || ! ls "$images"/*.flat >/dev/null 2>&1; then
    echo "kvm-unit-tests: SKIPPED (no images in $images; set KVM_UNIT_TESTS_DIR)"
    exit 0
fi
images=$(cd "$images" && pwd)
if [ ! -r /dev/kvm ] || [ ! -w /dev/kvm ]; then
    echo "kvm-unit-tests: SKIPPED (/dev/kvm not available)"
    exit 0
fi

work=$(mktemp -d /tmp/pacer-kut.XXXXXX)
keep_logs() {
    if [ -n "$logs" ]; then
        mkdir -p "$logs" && cp "$work"/*.log "$logs"/ 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap keep_logs EXIT

# The suite's test table.
cfg=$work/unittests.cfg
if [ -f "$images/unittests.cfg" ]; then
    cp "$images/unittests.cfg" "$cfg"
else
    tarball=$(ls "$images"/kvm-unit-tests-*src.tar.gz 2>/dev/null | head -1 || true)
    if [ -z "$tarball" ] || ! tar -xzOf "$tarball" --wildcards '*/x86/unittests.cfg' >"$cfg" 2>/dev/null; then
        echo "kvm-unit-tests: SKIPPED (no x86/unittests.cfg in $images)"
        exit 0
    fi
fi

# cfg_get SECTION KEY: the value of KEY in [SECTION] (quotes removed).
cfg_get() {
    awk -v sec="[$1]" -v key="$2" '
        /^\[/ { in_sec = ($0 == sec); next }
        in_sec && $0 ~ "^" key "[ \t]*=" {
            sub("^" key "[ \t]*=[ \t]*", ""); gsub(/^'\''|'\''$/, ""); print; exit
        }' "$cfg"
}
cfg_sections() { sed -n 's/^\[\(.*\)\]$/\1/p' "$cfg"; }

# Tests whose image is here, in the suite's order.
available=()
for t in $(cfg_sections); do
    f=$(cfg_get "$t" file)
    [ -n "$f" ] && [ -f "$images/$f" ] && available+=("$t")
done
quick_set=(smptest smptest3 vmexit_cpuid vmexit_mov_to_cr8 vmexit_inl_pmtimer vmexit_ipi
    vmexit_ipi_halt vmexit_tscdeadline vmexit_tscdeadline_immed)
if ((${#tests[@]} == 0)); then
    if ((quick)); then tests=("${quick_set[@]}"); else tests=("${available[@]}"); fi
fi
for t in "${tests[@]}"; do
    if [[ " ${available[*]} " != *" $t "* ]]; then
        echo "kvm-unit-tests.sh: unknown test $t (known here: ${available[*]})" >&2
        exit 2
    fi
done

# Per-test time limits (seconds). The apic tests take 2.5 minutes on a
# quiet machine here under QEMU (guest supervisor code is emulated on this
# machine's KVM; their 30000-NMI and 100000-round NMI tests dominate), far
# longer when the machine is busy, and longer under Pacer's own APIC
# (every APIC access is an exit to user space: the two NMI tests took
# all of 480 s at a load average of 5); ioapic hangs
# in its self-reconfigure test under QEMU too; vmexit_vmcall hangs (VMCALL
# does not return on this KVM). KUT_TIMEOUT overrides them all.
limit_for() {
    if [ -n "${KUT_TIMEOUT:-}" ]; then echo "$KUT_TIMEOUT"; return; fi
    case "$1" in
    x2apic | xapic) echo 900 ;;
    ioapic) echo 180 ;;
    vmexit_vmcall) echo 20 ;;
    *) echo 60 ;;
    esac
}

# The environment module (`-initrd` under QEMU): the apic tests run with
# TEST_DEVICE=0, which skips the PV IPI test (a VMCALL that hangs here).
env_for() {
    case "$1" in
    x2apic | xapic) echo "TEST_DEVICE=0" ;;
    esac
}

# Pacer binary.
echo "== building pacer ($profile)"
cargo build --locked -q --profile "$profile" -p pacer
case "$profile" in dev) pacer=$root/target/debug/pacer ;; *) pacer=$root/target/$profile/pacer ;; esac

# QEMU.
qemu=""
if ((qemu_wanted)); then
    if ! command -v qemu-system-x86_64 >/dev/null && ((install)) && [ "$(id -u)" = 0 ] &&
        command -v apt-get >/dev/null; then
        echo "== installing qemu-system-x86"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-system-x86; } \
            >"$work/apt.log" 2>&1 || echo "   (installation failed; see apt-get output above)"
    fi
    qemu=$(command -v qemu-system-x86_64 || true)
fi

# cpuid overrides from a QEMU -cpu option, e.g. "-cpu qemu64,-x2apic,+tsc-deadline".
cpuid_overrides() {
    local params=$1 out=() flag
    local cpu
    cpu=$(sed -n 's/.*-cpu[ \t]\{1,\}\([^ \t]*\).*/\1/p' <<<"$params")
    IFS=, read -r -a flags <<<"$cpu"
    for flag in "${flags[@]:1}"; do
        case "$flag" in
        +x2apic) out+=("x2apic = true") ;;
        -x2apic) out+=("x2apic = false") ;;
        +tsc-deadline) out+=("tsc_deadline = true") ;;
        -tsc-deadline) out+=("tsc_deadline = false") ;;
        esac
    done
    local IFS=,
    ((${#out[@]})) && echo "cpuid = { ${out[*]} }"
    return 0
}

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# summarize LOG STATUS SECONDS: the table cell for one run.
summarize() {
    local log=$1 status=$2 secs=$3 total failed skipped
    total=$(grep -cE '^(PASS|FAIL|XFAIL|XPASS|SKIP): ' "$log" || true)
    failed=$(grep -cE '^(FAIL|XPASS): ' "$log" || true)
    skipped=$(grep -cE '^SKIP: ' "$log" || true)
    case "$status" in
    1) echo "PASS ${secs}s" ;;
    155) echo "SKIP ${secs}s" ;;
    timeout) echo "TIMEOUT ${secs}s ($((total - failed - skipped)) pass, $failed fail so far)" ;;
    error*) echo "ERROR (${status#error }) ${secs}s" ;;
    *)
        if ((total > 0)); then echo "FAIL ($failed of $total) ${secs}s"; else echo "FAIL (status $status) ${secs}s"; fi ;;
    esac
}

# run_pacer TEST POLICY: runs TEST, leaves $work/TEST.POLICY.log, prints the cell.
run_pacer() {
    local t=$1 policy=$2 dir=$work/$1.$2 smp args params env limit status
    mkdir -p "$dir"
    smp=$(cfg_get "$t" smp); smp=${smp:-1}
    args=$(cfg_get "$t" test_args)
    params=$(cfg_get "$t" qemu_params)
    env=$(env_for "$t")
    limit=$(limit_for "$t")
    {
        printf '[host]\npolicy = "%s"\ndispatch = "%s"\nlog_dir = "logs"\n\n[[vm]]\n' "$policy" "$dispatch"
        printf 'name = "%s"\nvcpus = %s\nmemory_mib = 256\n' "$t" "$smp"
        printf 'kernel = "%s"\ncmdline = "%s"\ntimeout_s = %s\n' "$images/$(cfg_get "$t" file)" "$args" "$limit"
        cpuid_overrides "$params"
        if [ -n "$env" ]; then
            printf '%s\n' "$env" >"$dir/env"
            printf 'modules = ["env"]\n'
        fi
    } >"$dir/pacer.toml"
    if ! "$pacer" validate "$dir/pacer.toml" >"$dir/validate.out" 2>&1; then
        cp "$dir/validate.out" "$work/$t.$policy.log"
        echo "ERROR (config)"
        return
    fi
    local t0
    t0=$(now)
    status=0
    timeout -k 5 $((limit + 10)) "$pacer" run "$dir/pacer.toml" --exit-status-from-guest \
        --json "$dir/results.json" >"$dir/stdout" 2>&1 || status=$?
    local secs
    secs=$(since "$t0")
    tr -d '\r' <"$dir/logs/latest/$t.console.log" >"$work/$t.$policy.log" 2>/dev/null || : >"$work/$t.$policy.log"
    if grep -q '"status": "timeout"' "$dir/results.json" 2>/dev/null || ((status == 124 || status == 137)) ||
        { [ ! -f "$dir/results.json" ] && awk -v s="$secs" -v l="$limit" 'BEGIN { exit !(s >= l) }'; }; then
        status=timeout
    elif ! grep -q '"exit_status": [0-9]' "$dir/results.json" 2>/dev/null; then
        # No guest status: a fault (the VM's status says which), a crash,
        # or pacer killed from outside (its exit code says so).
        local why
        why=$(grep -o '"status": "[a-z_]*"' "$dir/results.json" 2>/dev/null | head -1 | cut -d'"' -f4)
        status="error ${why:-pacer exit $status}"
        cat "$dir/stdout" >>"$work/$t.$policy.log"
    fi
    summarize "$work/$t.$policy.log" "$status" "$secs"
}

run_qemu() {
    local t=$1 smp args params env limit status
    smp=$(cfg_get "$t" smp); smp=${smp:-1}
    args=$(cfg_get "$t" test_args)
    params=$(cfg_get "$t" qemu_params)
    env=$(env_for "$t")
    limit=$(limit_for "$t")
    local cmd=(qemu-system-x86_64 -enable-kvm -nodefaults -display none -serial stdio
        -device isa-debug-exit,iobase=0xf4,iosize=0x4 -device pc-testdev
        -m 256 -smp "$smp" -kernel "$images/$(cfg_get "$t" file)")
    # shellcheck disable=SC2206 # qemu_params is a word list by definition
    [ -n "$params" ] && cmd+=($params)
    [ -n "$args" ] && cmd+=(-append "$args")
    if [ -n "$env" ]; then
        printf '%s\n' "$env" >"$work/$t.qemu.env"
        cmd+=(-initrd "$work/$t.qemu.env")
    fi
    local t0
    t0=$(now)
    status=0
    timeout -k 5 "$limit" "${cmd[@]}" </dev/null >"$work/$t.qemu.raw" 2>&1 || status=$?
    local secs
    secs=$(since "$t0")
    tr -d '\r' <"$work/$t.qemu.raw" >"$work/$t.qemu.log"
    ((status == 124 || status == 137)) && status=timeout
    summarize "$work/$t.qemu.log" "$status" "$secs"
}

# cycles TEST COLUMN: the vmexit figure ("<test_args> <cycles>").
cycles() {
    local args
    args=$(cfg_get "$1" test_args)
    [ -n "$args" ] && [ -f "$work/$1.$2.log" ] || return 0
    awk -v n="$args" '$1 == n && $2 ~ /^[0-9]+$/ { print $2; exit }' "$work/$1.$2.log"
}

# The result lines of a log, sorted (what is compared with QEMU).
result_lines() { grep -E '^(PASS|FAIL|XFAIL|XPASS|SKIP): ' "$1" 2>/dev/null | sort || true; }

rank() {
    case "$1" in PASS*) echo 3 ;; SKIP*) echo 2 ;; FAIL*) echo 1 ;; *) echo 0 ;; esac
}

echo "== kvm-unit-tests from $images (${#tests[@]} tests; pacer $profile; haiku with dispatch $dispatch; qemu: ${qemu:-none})"
declare -A cell_host cell_haiku cell_qemu
worse=()
for t in "${tests[@]}"; do
    cell_host[$t]=$(run_pacer "$t" host)
    cell_haiku[$t]=$(run_pacer "$t" haiku)
    if [ -n "$qemu" ]; then cell_qemu[$t]=$(run_qemu "$t"); elif ((qemu_wanted)); then cell_qemu[$t]="no qemu"; else cell_qemu[$t]="-"; fi
    echo "   $t: host ${cell_host[$t]} | haiku ${cell_haiku[$t]} | qemu ${cell_qemu[$t]}"
    for col in host haiku; do
        if [ "$col" = host ]; then cell=${cell_host[$t]}; else cell=${cell_haiku[$t]}; fi
        if [ -n "$qemu" ]; then
            lost=$(comm -13 <(result_lines "$work/$t.$col.log" | grep '^PASS' || true) \
                <(result_lines "$work/$t.qemu.log" | grep '^PASS' || true))
            if [ -n "$lost" ] || (($(rank "$cell") < $(rank "${cell_qemu[$t]}"))); then
                worse+=("$t ($col)")
            fi
        elif [[ "$cell" != PASS* ]]; then
            worse+=("$t ($col)")
        fi
    done
done

# The table.
echo
fmt='%-26s | %-40s | %-22s | %-40s | %s\n'
# shellcheck disable=SC2059
printf "$fmt" test "Pacer host" "Pacer haiku" QEMU "cycles (host / haiku / qemu)"
# shellcheck disable=SC2059
printf "$fmt" "$(printf -- '-%.0s' {1..26})" "$(printf -- '-%.0s' {1..40})" \
    "$(printf -- '-%.0s' {1..22})" "$(printf -- '-%.0s' {1..40})" "--------------------"
for t in "${tests[@]}"; do
    c=""
    h=$(cycles "$t" host) k=$(cycles "$t" haiku) q=$(cycles "$t" qemu)
    [ -n "$h$k$q" ] && c="${h:--} / ${k:--} / ${q:--}"
    # shellcheck disable=SC2059
    printf "$fmt" "$t" "${cell_host[$t]}" "${cell_haiku[$t]}" "${cell_qemu[$t]}" "$c"
done

# Differences in result lines.
if [ -n "$qemu" ]; then
    echo
    echo "Result lines that differ (< Pacer only, > QEMU only):"
    any=0
    for t in "${tests[@]}"; do
        for col in host haiku; do
            d=$(diff <(result_lines "$work/$t.$col.log") <(result_lines "$work/$t.qemu.log") | grep '^[<>]' || true)
            if [ -n "$d" ]; then
                any=1
                echo "  $t (Pacer $col):"
                sed 's/^/    /' <<<"$d"
            fi
        done
    done
    ((any)) || echo "  none"
fi

if ((${#worse[@]})); then
    echo
    echo "kvm-unit-tests: Pacer does worse than $([ -n "$qemu" ] && echo QEMU || echo expected) on: ${worse[*]}"
    for w in "${worse[@]}"; do
        t=${w% (*} col=${w##*(}
        col=${col%)}
        echo "--- $w: last lines of Pacer's console"
        tail -n 15 "$work/$t.$col.log" | sed 's/^/    /'
    done
    echo "kvm-unit-tests: $((2 * ${#tests[@]} - ${#worse[@]})) passed, ${#worse[@]} failed"
    exit 1
fi
echo
echo "kvm-unit-tests: Pacer (host and haiku) matches $([ -n "$qemu" ] && echo QEMU || echo expectations) on ${#tests[@]} test(s)"
echo "kvm-unit-tests: $((2 * ${#tests[@]})) passed, 0 failed"
