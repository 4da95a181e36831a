#!/usr/bin/env bash
# Soak: 4 VMs (cpu, sleep, pingpong, spinlock; 10 vCPUs) under the Haiku
# policy for DURATION seconds; checks each second that every vCPU makes
# progress and that the VMM's memory stays flat, and at the end that every
# result is complete.
#   bash ci/soak.sh 600           # 10 minutes; 3600 before a release
#   bash ci/soak.sh 600 --churn   # the same while random affinity, priority
#                                 # and mode changes are made all along
#   bash ci/soak.sh 600 --hostile # beside a hostile VM (floods, random port
#                                 # and MMIO writes, a triple fault) started
#                                 # again each time it stops
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
DURATION="${1:-600}"
TEST=soak
case "${2:-}" in
"") ;;
--churn) TEST=soak_churn ;;
--hostile) TEST=soak_hostile ;;
*) echo "usage: ci/soak.sh [SECONDS] [--churn|--hostile]" >&2; exit 2 ;;
esac
if [ ! -c /dev/kvm ]; then
    echo "SKIPPED: /dev/kvm not available"
    exit 0
fi
SOAK_SECONDS="$DURATION" cargo test --release --locked -q -p vmm --test soak -- --ignored --nocapture --exact "$TEST"
