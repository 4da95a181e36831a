#!/usr/bin/env bash
# The test command of the README: formatting, lints, docs, and every test
# of the workspace. Tests that need /dev/kvm print SKIPPED when it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TERM_COLOR=never

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy --all-targets"
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo clippy -p vcpu_sched --all-targets --features profiler --locked -- -D warnings
echo "== cargo doc -p vcpu_sched"
RUSTDOCFLAGS="-D warnings" cargo doc -p vcpu_sched --no-deps --locked
echo "== cargo test --workspace"
cargo test --workspace --locked
echo "== cargo test -p vcpu_sched --features profiler"
cargo test -p vcpu_sched --features profiler --locked profiler
