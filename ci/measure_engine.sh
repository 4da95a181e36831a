#!/usr/bin/env bash
# The scheduled engine's mechanism costs and figures on real guests, every
# policy side by side and interleaved (medians, ratios to `host`), then
# the table of "the price of control" (docs/measurements/price-of-control.md) in one place, host first.
# Needs /dev/kvm; takes several minutes. Not part of ci/test.sh.
#   bash ci/measure_engine.sh
# The kvm-unit-tests rows need the suite's images ($KVM_UNIT_TESTS_DIR,
# default ../shared/kvm-unit-tests; see ci/kvm-unit-tests.sh) and QEMU for
# their goal's column (not installed from here: run ci/kvm-unit-tests.sh
# once without --no-install for that).
# Check with `top` that nothing else runs first: one busy process on a
# 2-CPU machine moves every figure (`uptime` is printed with the table).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
if [ ! -c /dev/kvm ]; then
    echo "SKIPPED: /dev/kvm not available"
    exit 0
fi
rows=$(mktemp /tmp/pacer-measure.XXXXXX)
trap 'rm -f "$rows"' EXIT
# Print a test's output but its ROW lines, which go to $rows.
split_rows() {
    grep -v "^running\|^test \|^$\|test result" | while IFS= read -r line; do
        case "$line" in
        ROW\|*) echo "$line" >>"$rows" ;;
        *) echo "$line" ;;
        esac
    done
}
echo "== exit round trip, yield and local vCPU switch (both dispatch mechanisms)"
cargo test --release --locked -q -p vmm --test engine_costs -- --nocapture 2>&1 | split_rows
echo "== guest figures"
cargo test --release --locked -q -p vmm --test engine_figures -- --ignored --nocapture 2>&1 | split_rows

echo "== kvm-unit-tests vmexit (cycles per operation)"
kut=$(bash ci/kvm-unit-tests.sh --no-install vmexit_ipi vmexit_ipi_halt vmexit_tscdeadline_immed 2>&1 || true)
echo "$kut" | grep -E "^(vmexit_|test |kvm-unit-tests: SKIPPED)" || true
# The last column of a test's table line: "host / haiku / qemu".
for t in vmexit_ipi vmexit_ipi_halt vmexit_tscdeadline_immed; do
    c=$(echo "$kut" | awk -F'|' -v t="$t" '{ n = $1; gsub(/ /, "", n) } n == t { print $NF; exit }')
    read -r h _ k _ q <<<"$c" || true
    [[ "${k:-}" =~ ^[0-9]+$ ]] || continue
    case "$t" in
    vmexit_tscdeadline_immed) goal="<= 2x QEMU" ;;
    *) goal="<= 1.0x QEMU" ;;
    esac
    if [[ "${q:-}" =~ ^[0-9]+$ ]]; then
        ratio=$(awk -v k="$k" -v q="$q" 'BEGIN { printf "%.2fx QEMU (%s)", k / q, q }')
    else
        ratio="no QEMU"
    fi
    if [[ "${h:-}" =~ ^[0-9]+$ ]]; then
        ratio="$ratio, $(awk -v k="$k" -v h="$h" 'BEGIN { printf "%.2fx host", k / h }')"
    fi
    echo "ROW|kvm-unit-tests $t (cycles)|${h:--}|$k|$ratio|$goal" >>"$rows"
done

echo
echo "== the price of control: host first, haiku (threads dispatch), haiku's ratio, goal;"
echo "   haiku under dispatch kvm-irqchip (KVM's local APIC) and its ratio where measured"
echo "   $(uptime)"
fmt='%-52s %-16s %-16s %-30s %-12s %-16s %s\n'
# shellcheck disable=SC2059
printf "$fmt" figure host haiku ratio goal kvm-irqchip ratio
while IFS='|' read -r _ figure host haiku ratio goal kvm kvm_ratio; do
    # shellcheck disable=SC2059
    printf "$fmt" "$figure" "$host" "$haiku" "$ratio" "$goal" "${kvm:--}" "${kvm_ratio:--}"
done <"$rows"
