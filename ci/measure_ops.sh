#!/usr/bin/env bash
# Instructions and L1 data-cache read misses per scheduler operation, by a
# cachegrind differential (deterministic, unlike wall time on a shared host):
# `vcpu_sched/examples/op_cost` runs under
# `valgrind --tool=cachegrind --cache-sim=yes` with N and N + 200000
# operations; (total(N + 200000) - total(N)) / 200000 removes setup and
# warm-up. Operations: wake (wake+select on a half-idle machine), pick
# (block, pick the next, enqueue a sleeper on a busy machine), quantum_end;
# see the comment at the top of op_cost.rs. Sizes: CPUs {8, 64, 1024}
# (1x4x2, 2x16x2, 4x64x4) x vCPUs {64, 2048, 65536}.
#
# Prints one table: Ir/op, D1mr/op, and the Ir ratios to the smallest size
# (same vCPUs on 8 CPUs; same CPUs with 64 vCPUs), then the goals
# (scalability): <= 1.2x Ir/op from 8 to 1024 CPUs and from 64 to 65536 vCPUs,
# <= 4 D1mr/op everywhere. The simulated caches are fixed (32 KiB 8-way L1s,
# 8 MiB 16-way LL) so the figures do not depend on the host.
#
#   ci/measure_ops.sh                  # all sizes, a few minutes
#   JOBS=1 OPS="quantum_end" ci/measure_ops.sh
#   COSCHED=relaxed VM_VCPUS=4 ci/measure_ops.sh   # VMs of 4 vCPUs, co-scheduled
#
# COSCHED (off or relaxed, default off) sets every VM's co-scheduling;
# VM_VCPUS splits the vCPUs into VMs of that many (default: one VM).
#
# Not part of ci/test.sh. Installs valgrind with apt-get if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

DELTA=200000
BASE=${BASE_OPS:-10000}
JOBS=${JOBS:-$(nproc)}
OPS=${OPS:-"wake pick quantum_end"}
TOPOS=${TOPOS:-"1x4x2 2x16x2 4x64x4"}
VCPUS=${VCPUS:-"64 2048 65536"}
COSCHED=${COSCHED:-off}
VM_VCPUS=${VM_VCPUS:-}
# op_cost's optional arguments: policy, co-scheduling, vCPUs per VM.
layout=(haiku "$COSCHED" $VM_VCPUS)

if ! command -v valgrind >/dev/null 2>&1; then
    echo "== installing valgrind" >&2
    apt-get update -qq >&2 && apt-get install -y -qq valgrind >&2
fi

echo "== building examples/op_cost (release)" >&2
cargo build -q --release --locked -p vcpu_sched --example op_cost
bin=${CARGO_TARGET_DIR:-$PWD/target}/release/examples/op_cost

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# One cachegrind run: writes "Ir D1mr" to $out/<op>_<topo>_<vcpus>_<count>.
measure() {
    local op=$1 topo=$2 vcpus=$3 count=$4
    local file=$out/${op}_${topo}_${vcpus}_${count}
    valgrind --tool=cachegrind --cache-sim=yes \
        --I1=32768,8,64 --D1=32768,8,64 --LL=8388608,16,64 \
        --cachegrind-out-file="$file.cg" \
        "$bin" "$topo" "$vcpus" "$count" "$op" "${layout[@]}" >/dev/null 2>"$file.log" || {
        echo "op_cost $topo $vcpus $count $op failed:" >&2
        cat "$file.log" >&2
        return 1
    }
    awk '/^events:/ { for (i = 2; i <= NF; i++) col[$i] = i }
         /^summary:/ { print $col["Ir"], $col["D1mr"] }' "$file.cg" >"$file"
}

echo "== layout: co-scheduling $COSCHED, ${VM_VCPUS:-all} vCPUs per VM" >&2
echo "== cachegrind: $(echo $OPS | wc -w) ops x $(echo $TOPOS | wc -w) topologies x $(echo $VCPUS | wc -w) vCPU counts x 2 runs, $JOBS at a time" >&2
running=0
for op in $OPS; do
    for topo in $TOPOS; do
        for vcpus in $VCPUS; do
            for count in "$BASE" "$((BASE + DELTA))"; do
                measure "$op" "$topo" "$vcpus" "$count" &
                running=$((running + 1))
                if [ "$running" -ge "$JOBS" ]; then
                    wait -n
                    running=$((running - 1))
                fi
            done
        done
    done
done
wait

# Table: per op, topology and vCPUs, the per-op differences and ratios.
for op in $OPS; do
    for topo in $TOPOS; do
        for vcpus in $VCPUS; do
            read -r ir0 d0 <"$out/${op}_${topo}_${vcpus}_${BASE}"
            read -r ir1 d1 <"$out/${op}_${topo}_${vcpus}_$((BASE + DELTA))"
            echo "$op $topo $vcpus $(((ir1 - ir0))) $(((d1 - d0)))"
        done
    done
done | awk -v delta="$DELTA" -v topos="$TOPOS" -v vcpus="$VCPUS" '
    BEGIN {
        split(topos, t, " "); split(vcpus, v, " ")
        t0 = t[1]; v0 = v[1]
    }
    {
        op[NR] = $1; topo[NR] = $2; n[NR] = $3
        ir[$1, $2, $3] = $4 / delta; d1[$1, $2, $3] = $5 / delta
    }
    function cpus(spec,   p, k, c) {
        k = split(spec, p, "x"); c = 1
        for (i = 1; i <= k; i++) c *= p[i]
        return c
    }
    END {
        printf "%-12s %5s %6s %10s %9s %8s %9s\n", "op", "CPUs", "vCPUs", "Ir/op", "D1mr/op", "Ir/8cpu", "Ir/64vcpu"
        worst_cpu = 0; worst_vcpu = 0; worst_d1 = 0
        for (r = 1; r <= NR; r++) {
            o = op[r]; s = topo[r]; k = n[r]
            rc = ir[o, t0, k] > 0 ? ir[o, s, k] / ir[o, t0, k] : 0
            rv = ir[o, s, v0] > 0 ? ir[o, s, k] / ir[o, s, v0] : 0
            printf "%-12s %5d %6d %10.0f %9.2f %7.2fx %8.2fx\n", o, cpus(s), k, ir[o, s, k], d1[o, s, k], rc, rv
            if (rc > worst_cpu) { worst_cpu = rc; at_cpu = o " " cpus(s) " CPUs " k " vCPUs" }
            if (rv > worst_vcpu) { worst_vcpu = rv; at_vcpu = o " " cpus(s) " CPUs " k " vCPUs" }
            if (d1[o, s, k] > worst_d1) { worst_d1 = d1[o, s, k]; at_d1 = o " " cpus(s) " CPUs " k " vCPUs" }
        }
        printf "\ngoal <= 1.20x Ir/op over CPUs:  worst %.2fx (%s) %s\n", worst_cpu, at_cpu, worst_cpu <= 1.2 ? "met" : "MISSED"
        printf "goal <= 1.20x Ir/op over vCPUs: worst %.2fx (%s) %s\n", worst_vcpu, at_vcpu, worst_vcpu <= 1.2 ? "met" : "MISSED"
        printf "goal <= 4 D1mr/op:              worst %.2f (%s) %s\n", worst_d1, at_d1, worst_d1 <= 4 ? "met" : "MISSED"
    }'
