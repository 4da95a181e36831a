#!/bin/sh
# VMM mechanism costs on this host (release build):
#  - port-I/O exit round trip: a hand-assembled guest does N OUTs to a port
#    the bench device claims and ignores; Pacer's per-OUT time (between the
#    guest's FIRST_INSTRUCTION and WORKLOAD_DONE markers, host clock) next to
#    a bare kvm-ioctls loop running the same guest (vmm/tests/tiny_guest.rs);
#  - vCPU kick/pause latency: pause (signal + immediate_exit + ack) of a vCPU
#    spinning in guest ring 3, 40 cycles (vmm/tests/boot.rs).
#
#   ci/measure_exit.sh
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
[ -f guests/out/bench-guest.elf ] || guests/build.sh >/dev/null
cargo test -q --release -p vmm --test tiny_guest --test boot -- --nocapture \
    pio_exit_round_trip kick_latency 2>&1 | grep -E "round trip|latency|SKIPPED"
