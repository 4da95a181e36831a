#!/bin/sh
# Build the bench guest into guests/out/ (stable path for configs):
#   guests/out/bench-guest.elf, guests/out/host_work
# `guests/build.sh tools` also builds guests/out/kvmrun (raw /dev/kvm dev runner).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
exec make -C "$here/bench" O="$here/out" all "$@"
