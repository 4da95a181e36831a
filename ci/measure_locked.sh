#!/usr/bin/env bash
# Locked instructions (LOCK-prefixed, and XCHG with memory, which is
# locked implicitly) and instructions per scheduler operation, by a
# callgrind differential like ci/measure_ops.sh: `vcpu_sched/examples/op_cost`
# under `valgrind --tool=callgrind --dump-instr=yes` with N and N + DELTA
# operations; each executed instruction's count is matched against
# `objdump -d` of its object, and (total(N + DELTA) - total(N)) / DELTA
# removes setup and warm-up. A mutex lock and unlock are two locked
# instructions; an atomic read-modify-write is one; plain atomic loads and
# release stores are none (x86-64).
#
#   ci/measure_locked.sh                          # quantum_end and mix, Haiku and the global lock, 1x8x2, 64 vCPUs
#   OPS=quantum_end POLICIES=haiku ci/measure_locked.sh
#   VERBOSE=1 ci/measure_locked.sh                # per function, for the first op and policy
#
# Not part of ci/test.sh. Needs valgrind, binutils and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

DELTA=${DELTA:-20000}
BASE=${BASE_OPS:-10000}
OPS=${OPS:-"quantum_end mix"}
POLICIES=${POLICIES:-"haiku global_rr"}
TOPO=${TOPO:-1x8x2}
VCPUS=${VCPUS:-64}

for tool in valgrind objdump python3; do
    command -v "$tool" >/dev/null 2>&1 || { echo "measure_locked: $tool is missing" >&2; exit 1; }
done
echo "== building examples/op_cost (release)" >&2
cargo build -q --release --locked -p vcpu_sched --example op_cost
bin=${CARGO_TARGET_DIR:-$PWD/target}/release/examples/op_cost
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Sum of the counts of locked instructions in a callgrind profile (file $1);
# with a second argument, per function on stderr too.
locked() {
    python3 - "$@" <<'PY'
import collections, re, subprocess, sys
costs, fnof = collections.Counter(), {}
ob = fn = None
skip = False
for line in open(sys.argv[1]):
    if skip:
        skip = False
    elif line.startswith("ob="):
        ob = line[3:].strip()
    elif line.startswith("fn="):
        fn = line[3:].strip()
    elif line.startswith("calls="):
        skip = True  # the next line is the call's inclusive cost
    elif line.startswith("0x") and ob:
        parts = line.split()
        costs[(ob, int(parts[0], 16))] += int(parts[-1]) if len(parts) >= 3 else 0
        fnof[(ob, int(parts[0], 16))] = fn
locked = {}
for o in {o for o, _ in costs}:
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", o],
                         capture_output=True, text=True).stdout
    s = set()
    for l in dis.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s+(.*)", l)
        if m and (m.group(2).startswith("lock ")
                  or (m.group(2).startswith("xchg") and "(" in m.group(2))):
            s.add(int(m.group(1), 16))
    locked[o] = s
byfn = collections.Counter()
for (o, a), c in costs.items():
    if a in locked[o]:
        byfn[fnof[(o, a)]] += c
print(sum(byfn.values()))
if len(sys.argv) > 2:
    for f, c in byfn.most_common():
        print(f"{c} {f}", file=sys.stderr)
PY
}

printf '%-12s %-10s %-8s %6s %10s %10s\n' op policy topology vCPUs Ir/op locked/op
first=1
for op in $OPS; do
    for policy in $POLICIES; do
        for n in "$BASE" "$((BASE + DELTA))"; do
            valgrind --tool=callgrind --dump-instr=yes --compress-strings=no --compress-pos=no \
                --callgrind-out-file="$out/$n.cg" "$bin" "$TOPO" "$VCPUS" "$n" "$op" "$policy" \
                >/dev/null 2>"$out/$n.log" || { cat "$out/$n.log" >&2; exit 1; }
        done
        ir0=$(awk '/^summary:/ { print $2 }' "$out/$BASE.cg")
        ir1=$(awk '/^summary:/ { print $2 }' "$out/$((BASE + DELTA)).cg")
        if [ -n "${VERBOSE:-}" ] && [ -n "$first" ]; then
            l0=$(locked "$out/$BASE.cg" v 2>"$out/fn0")
            l1=$(locked "$out/$((BASE + DELTA)).cg" v 2>"$out/fn1")
            echo "locked instructions per operation by function ($op, $policy):" >&2
            awk -v d="$DELTA" 'NR == FNR { c = $1; $1 = ""; a[$0] = c; next }
                { c = $1; $1 = ""; x = (c - a[$0]) / d; if (x >= 0.01) printf "  %6.2f %s\n", x, $0 }' \
                "$out/fn0" "$out/fn1" | sort -rn >&2
        else
            l0=$(locked "$out/$BASE.cg")
            l1=$(locked "$out/$((BASE + DELTA)).cg")
        fi
        first=
        awk -v a="$ir0" -v b="$ir1" -v c="$l0" -v d="$l1" -v D="$DELTA" -v op="$op" \
            -v p="$policy" -v t="$TOPO" -v v="$VCPUS" \
            'BEGIN { printf "%-12s %-10s %-8s %6s %10.1f %10.2f\n", op, p, t, v, (b - a) / D, (d - c) / D }'
    done
done
