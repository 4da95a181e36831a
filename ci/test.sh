#!/usr/bin/env bash
# The test command of the README: formatting, lints, docs, and every test
# of the workspace. Tests that need /dev/kvm print SKIPPED when it is absent
# (and fail instead under PACER_REQUIRE_KVM=1, which .ci/run sets on a host
# with /dev/kvm); the closing summary counts them as skipped, not passed.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TERM_COLOR=never
log=$(mktemp)
trap 'rm -f "$log"' EXIT

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy --all-targets"
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo clippy -p vcpu_sched --all-targets --features profiler --locked -- -D warnings
echo "== vcpu_sched without default features (no simulator, no rand/toml)"
cargo build -p vcpu_sched --no-default-features --locked
cargo clippy -p vcpu_sched --no-default-features --all-targets --locked -- -D warnings
cargo test -p vcpu_sched --no-default-features --locked --lib 2>&1 | tee -a "$log"
echo "== cargo doc -p vcpu_sched"
RUSTDOCFLAGS="-D warnings" cargo doc -p vcpu_sched --no-deps --locked
echo "== cargo doc -p vcpu_engine"
RUSTDOCFLAGS="-D warnings" cargo doc -p vcpu_engine --no-deps --locked
echo "== cargo test -p vcpu_sched --features profiler (profiler tests)"
cargo test -p vcpu_sched --features profiler --locked --lib profiler 2>&1 | tee -a "$log"
echo "== cargo test --workspace"
# --show-output: a passing test's SKIPPED line reaches the log and the summary.
cargo test --workspace --locked -- --show-output 2>&1 | tee -a "$log"

# The smoke benchmark matrix: every policy through `pacer bench`, results,
# summary, plots and report (under 2 minutes here).
echo "== pacer bench benches/smoke.toml"
if [ -e /dev/kvm ]; then
    sh guests/build.sh >/dev/null
    rm -rf target/bench/smoke
    start=$(date +%s)
    ./target/debug/pacer bench benches/smoke.toml --out-dir target/bench/smoke
    echo "smoke matrix: $(($(date +%s) - start)) s, report in target/bench/smoke/report.html"
else
    echo "SKIPPED: /dev/kvm not available; smoke matrix not run" | tee -a "$log"
fi

# kvm-unit-tests (an external suite, see README): the quick subset under
# Pacer (threads dispatch, then ranked and kvm-irqchip), beside QEMU if installed. Needs the suite's prebuilt images
# ($KVM_UNIT_TESTS_DIR, default ../shared/kvm-unit-tests).
echo "== kvm-unit-tests --quick"
if [ -d "${KVM_UNIT_TESTS_DIR:-../shared/kvm-unit-tests}" ]; then
    bash ci/kvm-unit-tests.sh --quick --no-install --profile dev 2>&1 | tee -a "$log"
    # The same subset with the haiku column under KVM's in-kernel local
    # APIC: the default dispatch (ranked) and kvm-irqchip.
    bash ci/kvm-unit-tests.sh --quick --no-install --profile dev --dispatch ranked 2>&1 | tee -a "$log"
    bash ci/kvm-unit-tests.sh --quick --no-install --profile dev --dispatch kvm-irqchip 2>&1 | tee -a "$log"
else
    echo "kvm-unit-tests: SKIPPED (no images in ${KVM_UNIT_TESTS_DIR:-../shared/kvm-unit-tests})"
fi

# One closing line over every test binary (cargo prints one per binary)
# and the kvm-unit-tests run. A test that printed a SKIPPED line (its
# section of --show-output) passed without running what it is for: it is
# counted as skipped, not passed, as are ignored tests.
awk '/^kvm-unit-tests: [0-9]+ passed/ { p += $2; f += $4 }
     /^---- .* stdout ----$/ { cur = bin ":" $2; next }
     /^successes:$/ { cur = ""; failing = 0 }
     /^failures:$/ { cur = ""; failing = 1 }
     /^SKIPPED:/ && !failing {
        if (cur == "") k++
        else if (!(cur in seen)) { seen[cur] = 1; k++; kp++ }
     }
     /^test result:/ {
        bin++; cur = ""; failing = 0
        for (i = 1; i <= NF; i++) {
            if ($(i+1) ~ /^passed/)  p += $i
            if ($(i+1) ~ /^failed/)  f += $i
            if ($(i+1) ~ /^ignored/) s += $i
        }
     }
     END { printf "summary: %d passed, %d failed, %d skipped (%d printed SKIPPED, %d ignored)\n", p - kp, f, s + k, k, s }' "$log"
