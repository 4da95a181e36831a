#!/bin/sh
# Boot time of the bench guest under `pacer run` (host policy, 1 VM x 1 vCPU):
# from the start of the `pacer` process to the guest's FIRST_INSTRUCTION
# marker and to its first result record, median (and min/max) of N runs.
#
#   ci/measure_boot.sh [N=10] [workload=boot]
#
# Uses a release build of `pacer` (CARGO_TARGET_DIR honoured) and
# guests/out/bench-guest.elf (built with guests/build.sh if missing).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
n=${1:-10}
workload=${2:-boot}
target=${CARGO_TARGET_DIR:-$here/target}
cargo build --quiet --release -p pacer --manifest-path "$here/Cargo.toml"
pacer="$target/release/pacer"
kernel="$here/guests/out/bench-guest.elf"
[ -f "$kernel" ] || "$here/guests/build.sh" >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/boot.toml" <<EOT
[host]
log_dir = "logs"
[[vm]]
name = "boot"
vcpus = 1
memory_mib = 64
kernel = "$kernel"
workload = "$workload"
timeout_s = 60
EOT
i=0
while [ "$i" -lt "$n" ]; do
    start=$(date +%s%N)
    "$pacer" run "$tmp/boot.toml" --json "$tmp/r$i.json" >/dev/null 2>&1 || true
    end=$(date +%s%N)
    echo "$(( (end - start) / 1000 ))" >"$tmp/wall$i"
    i=$((i + 1))
done
python3 - "$tmp" "$n" <<'EOT'
import json, statistics, sys
tmp, n = sys.argv[1], int(sys.argv[2])
keys = [("first_instruction_run_ns", "pacer start -> FIRST_INSTRUCTION"),
        ("first_result_run_ns", "pacer start -> first result record"),
        ("first_instruction_ns", "VM start -> FIRST_INSTRUCTION"),
        ("first_result_ns", "VM start -> first result record")]
vals = {k: [] for k, _ in keys}
walls, status = [], []
for i in range(n):
    r = json.load(open(f"{tmp}/r{i}.json"))
    vm = r["runs"][0]["vms"][0]
    status.append(vm["status"])
    for k, _ in keys:
        if vm["milestones"].get(k) is not None:
            vals[k].append(vm["milestones"][k] / 1e6)
    walls.append(int(open(f"{tmp}/wall{i}").read()) / 1000.0)
print(f"runs: {n}, statuses: {sorted(set(status))}")
for k, label in keys:
    v = vals[k]
    if v:
        print(f"{label:40s} median {statistics.median(v):7.2f} ms  min {min(v):7.2f}  max {max(v):7.2f}  (n={len(v)})")
print(f"{'whole pacer run (process wall)':40s} median {statistics.median(walls):7.2f} ms  min {min(walls):7.2f}  max {max(walls):7.2f}")
EOT
