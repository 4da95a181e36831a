#!/usr/bin/env bash
# What a traced event costs the thread that records it (pacer run --trace):
# instructions (Ir) and L1 data read misses (D1mr) per event by a
# cachegrind differential (deterministic, unlike wall time on a shared
# host): `vcpu_engine/examples/trace_cost` runs under
# `valgrind --tool=cachegrind --cache-sim=yes` with N and N + 200000
# events; (total(N + 200000) - total(N)) / 200000 removes setup. Modes:
#   emit  a Dispatch event (clock read, the thread's ring, one record)
#   stop  a Stop event, with the thread's CPU time read as the engine does
#   off   an event site with tracing off
#   drain a Dispatch event recorded, then drained into the trace file by
#         the drain thread (frame checksum, encoding, write); the line
#         `drain-only` is drain minus emit: the drain's share per event
# Then the same example's wall time per event (noisy on a shared host).
#
#   ci/measure_trace.sh
#
# Not part of ci/test.sh. Installs valgrind with apt-get if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

DELTA=200000
BASE=${BASE_EVENTS:-10000}
MODES=${MODES:-"emit stop off drain"}

if ! command -v valgrind >/dev/null 2>&1; then
    echo "== installing valgrind" >&2
    apt-get update -qq >&2 && apt-get install -y -qq valgrind >&2
fi
echo "== building examples/trace_cost (release)" >&2
cargo build -q --release --locked -p vcpu_engine --example trace_cost
bin=${CARGO_TARGET_DIR:-$PWD/target}/release/examples/trace_cost
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

measure() {
    local mode=$1 count=$2 file=$out/${1}_${2}
    valgrind --tool=cachegrind --cache-sim=yes \
        --I1=32768,8,64 --D1=32768,8,64 --LL=8388608,16,64 \
        --cachegrind-out-file="$file.cg" "$bin" "$count" "$mode" >/dev/null 2>"$file.log" || {
        echo "trace_cost $count $mode failed:" >&2
        cat "$file.log" >&2
        return 1
    }
    awk '/^events:/ { for (i = 2; i <= NF; i++) col[$i] = i }
         /^summary:/ { print $col["Ir"], $col["D1mr"] }' "$file.cg" >"$file"
}

printf "%-6s %10s %9s %14s\n" mode "Ir/event" "D1mr/event" "wall ns/event"
for mode in $MODES; do
    measure "$mode" "$BASE"
    measure "$mode" "$((BASE + DELTA))"
    read -r ir0 d0 <"$out/${mode}_${BASE}"
    read -r ir1 d1 <"$out/${mode}_$((BASE + DELTA))"
    # The last figure: in drain mode, the drain's own time per event.
    wall=$("$bin" 2000000 "$mode" 2>&1 | sed -n 's/.*, \([0-9.]*\) ns\/event/\1/p' | tail -1)
    awk -v m="$mode" -v a="$ir0" -v b="$ir1" -v c="$d0" -v d="$d1" -v n="$DELTA" -v w="$wall" \
        'BEGIN { printf "%-6s %10.1f %9.3f %14s\n", m, (b - a) / n, (d - c) / n, w }' | tee -a "$out/table"
done
awk '$1 == "emit" { ei = $2; ed = $3 } $1 == "drain" { di = $2; dd = $3; dw = $4 }
     END { if (ei != "" && di != "") printf "%-6s %10.1f %9.3f %14s\n", "drain-only", di - ei, dd - ed, dw }' "$out/table"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
