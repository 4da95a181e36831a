#!/usr/bin/env bash
# Fuzz every target for N inputs each (default 1000000): the config parser,
# the bench matrix parser, the scheduling trace reader,
# the port-I/O devices, the interrupt controller and MMIO bus, the result
# record parser and the ELF loader. Prints inputs/s, findings and peak
# memory per target; findings are saved to target/fuzz-findings/ (replay
# with: target/release/pacer-fuzz --replay FILE --target NAME).
# Extra arguments go to pacer-fuzz (e.g. --target elf --seed 7).
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-1000000}"
shift || true
cargo build --release --locked -p pacer-fuzz
exec target/release/pacer-fuzz "$n" "$@"
