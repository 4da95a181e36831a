#!/usr/bin/env bash
# The README's main command: set up, build the guests, boot a demo of two
# VMs, and run the scheduler simulator on a seed scenario.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install.sh
export PATH="$HOME/.cargo/bin:$PATH"

echo "== building the bench guest (guests/out/)"
bash guests/build.sh
echo "== building pacer (release)"
cargo build --release --locked -p vmm --bin pacer
echo "== host topology as vcpu_sched sees it"
./target/release/pacer topology
if [ -c /dev/kvm ]; then
    echo "== two VMs (configs/demo.toml) under Pacer's haiku scheduler, then left to the host kernel"
    mkdir -p results
    ./target/release/pacer run configs/demo.toml --compare haiku,host --json results/demo.json
else
    echo "SKIPPED: /dev/kvm not available, not booting the demo VMs"
fi
echo "== simulator: scenario 1 (overload balance) under the Haiku policy"
cargo run --release --locked -q -p vcpu_sched --example sim -- vcpu_sched/scenarios/01_overload_balance.toml
