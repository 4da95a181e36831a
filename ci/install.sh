#!/usr/bin/env bash
# Install what building and testing Pacer needs on a fresh machine of this
# project's kind (Debian bookworm with the Rust toolchain preinstalled).
set -euo pipefail

need_apt=()
command -v gcc >/dev/null || need_apt+=(gcc)
command -v make >/dev/null || need_apt+=(make)
command -v objdump >/dev/null || need_apt+=(binutils)
command -v ld >/dev/null || need_apt+=(binutils)
# the Linux guest's suite (guests/linux/suite) links statically
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || need_apt+=(libc6-dev)
# A TrueType font for the text of `pacer bench`'s PNG/SVG plots.
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need_apt+=(fonts-dejavu-core)
# The smoke matrix's QEMU column is one of its baselines (benches/smoke.toml).
command -v qemu-system-x86_64 >/dev/null || need_apt+=(qemu-system-x86)
apt_updated=false
if ((${#need_apt[@]})); then
    echo "ci/install.sh: installing ${need_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt_updated=true
    apt-get install -y -qq "${need_apt[@]}"
fi

# Headless Chromium for the live page's browser test (pacer/tests/api.rs).
# Optional: where it cannot be installed the test prints SKIPPED.
if ! command -v chromium >/dev/null; then
    echo "ci/install.sh: installing chromium (the live page's browser test)"
    export DEBIAN_FRONTEND=noninteractive
    if { $apt_updated || timeout 300 apt-get update -qq; } &&
        timeout 600 apt-get install -y -qq --no-install-recommends chromium >/dev/null; then
        chromium --version 2>/dev/null || true
    else
        echo "ci/install.sh: SKIPPED: chromium could not be installed; the browser test will be skipped"
    fi
fi

# Slurm and munge for the one-node cluster of pacer/tests/slurm.rs
# (ci/slurm.sh installs them too). Optional: without them the test prints
# SKIPPED.
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    echo "ci/install.sh: installing slurm-wlm and munge (the Slurm test)"
    export DEBIAN_FRONTEND=noninteractive
    if ! { { $apt_updated || timeout 300 apt-get update -qq; } &&
        timeout 600 apt-get install -y -qq slurm-wlm munge >/dev/null; }; then
        echo "ci/install.sh: SKIPPED: slurm-wlm could not be installed; the Slurm test will be skipped"
    fi
fi

if ! command -v cargo >/dev/null; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    else
        echo "ci/install.sh: no Rust toolchain found (expected rustup's in ~/.cargo/bin)" >&2
        exit 1
    fi
fi
for component in rustfmt clippy; do
    if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
        rustup component add "$component"
    fi
done
cargo --version
gcc --version | head -1
