#!/usr/bin/env bash
# The README's main command: set up, build the guests, boot a demo of two
# VMs, and run the scheduler simulator on a seed scenario. Must work on a
# fresh clone: everything it writes goes under target/ (ignored by git),
# and it creates what it writes into.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install.sh
export PATH="$HOME/.cargo/bin:$PATH"

# The demo's results: the side-by-side run's JSON document. (Each run's
# consoles and per-VM results go to its own directory under the config's
# log_dir, target/pacer-logs/demo/.)
out=target/demo
mkdir -p "$out"

echo "== building the bench guest (guests/out/)"
bash guests/build.sh
echo "== building pacer (release)"
cargo build --release --locked -p pacer
echo "== host topology as vcpu_sched sees it"
./target/release/pacer topology
if [ -c /dev/kvm ]; then
    echo "== two VMs (configs/demo.toml) under Pacer's haiku scheduler (dispatch ranked, the default), then left to the host kernel"
    ./target/release/pacer run configs/demo.toml --compare haiku,host --json "$out/demo.json"
    echo "== the comparison as JSON: $out/demo.json"
    echo "== the price of control: ping-pong alone (configs/pingpong.toml), nothing for the scheduler to decide"
    ./target/release/pacer run configs/pingpong.toml --compare haiku,host --json "$out/pingpong.json"
    echo "== the same ping-pong under haiku with Pacer's own local APIC (dispatch threads: an exit to Pacer per IPI, EOI and HLT)"
    ./target/release/pacer run configs/pingpong.toml --dispatch threads --json "$out/pingpong-threads.json"
else
    echo "SKIPPED: /dev/kvm not available, not booting the demo VMs"
fi
echo "== simulator: scenario 1 (overload balance) under the Haiku policy"
./target/release/pacer sim vcpu_sched/scenarios/01_overload_balance.toml
