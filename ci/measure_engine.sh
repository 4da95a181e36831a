#!/usr/bin/env bash
# The scheduled engine's mechanism costs and figures on real guests, every
# policy side by side and interleaved (medians, ratios to `host`). Needs
# /dev/kvm; takes a few minutes. Not part of ci/test.sh.
#   bash ci/measure_engine.sh
# Check with `top` that nothing else runs first: one busy process on a
# 2-CPU machine moves every figure.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
if [ ! -c /dev/kvm ]; then
    echo "SKIPPED: /dev/kvm not available"
    exit 0
fi
echo "== exit round trip, yield and local vCPU switch (both dispatch mechanisms)"
cargo test --release --locked -q -p vmm --test engine_costs -- --nocapture 2>&1 | grep -v "^running\|^test \|^$\|test result"
echo "== guest figures"
cargo test --release --locked -q -p vmm --test engine_figures -- --ignored --nocapture 2>&1 | grep -v "^running\|^test \|^$\|test result"
