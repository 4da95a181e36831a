#!/usr/bin/env bash
# Fuzz every target for N inputs each (default 1000000): the config parser,
# the bench matrix parser, the scheduling trace reader, the port-I/O
# devices, the interrupt controller and MMIO bus, the result record parser,
# the ELF loader and the control API. Prints inputs/s, findings and peak
# memory per target; findings are saved to target/fuzz-findings/ (replay
# with: target/release/pacer-fuzz --replay FILE --target NAME).
# Extra arguments go to pacer-fuzz (e.g. --target elf --seed 7).
#
# ci/fuzz.sh --afl [SECONDS] [--jobs N] [--update-corpus] [--target NAME]...
# Coverage-guided: the same targets under AFL++ through cargo-afl
# (installed here with `cargo install cargo-afl --locked` and AFL++ built by
# `cargo afl config --build` when missing; the harness is fuzz/afl, its own
# workspace), SECONDS per target (default 60; a campaign: 3600), N targets
# at a time (default 1; each fuzzes on its own core), starting from the corpus
# kept in fuzz/corpus/<target>/. Prints executions, edges covered (of the
# instrumented total), corpus size, crashes and hangs per target; exits 1
# if any target crashed or hung (inputs in target/afl-out/<target>/default/
# crashes, replay with pacer-fuzz --replay as above; the harness is built
# with overflow checks, so an arithmetic overflow is a crash there even
# where the release build of pacer-fuzz wraps silently). --update-corpus
# replaces fuzz/corpus/<target>/ with the run's queue minimised by
# `cargo afl cmin` (at most 40 inputs of at most 4 KiB each).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" != "--afl" ]; then
    n="${1:-1000000}"
    shift || true
    cargo build --release --locked -p pacer-fuzz
    exec target/release/pacer-fuzz "$n" "$@"
fi

shift
secs=60
update=0
jobs=1
targets=()
while [ $# -gt 0 ]; do
    case "$1" in
    --update-corpus) update=1 ;;
    --jobs) jobs="$2"; shift ;;
    --target) targets+=("$2"); shift ;;
    [0-9]*) secs="$1" ;;
    *) echo "fuzz.sh --afl: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
case "$jobs" in
'' | *[!0-9]* | 0) echo "fuzz.sh --afl: --jobs takes a positive integer, not '$jobs'" >&2; exit 2 ;;
esac
if ! cargo afl --version >/dev/null 2>&1; then
    echo "== installing cargo-afl (cargo install cargo-afl --locked)"
    cargo install cargo-afl --locked
fi
# AFL++ itself (its compiler runtime) is built once per cargo-afl version.
if ! ls "${XDG_DATA_HOME:-$HOME/.local/share}"/afl.rs/rustc-*/afl.rs-*/afl/bin/afl-fuzz >/dev/null 2>&1; then
    echo "== building AFL++ (cargo afl config --build)"
    cargo afl config --build --force
fi
# Its own target directory: instrumented builds must not share a cache
# with the plain ones.
CARGO_TARGET_DIR="$PWD/target/afl" cargo afl build --release --manifest-path fuzz/afl/Cargo.toml
bin="$PWD/target/afl/release/pacer-afl"
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <("$bin" --list)
mkdir -p target/afl-out
export AFL_NO_UI=1 AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1
# More targets than CPUs: AFL++ would refuse to start a fuzzer without a
# free CPU of its own to bind to ("No more free CPU cores").
if [ "$jobs" -gt "$(nproc)" ]; then export AFL_NO_AFFINITY=1; fi
# Where the kernel's core_pattern pipes cores to a helper, AFL++ would
# refuse to start without the variable above; cores are not needed.
# One target: fuzz it, then write its row of the table (and, if it crashed
# or hung, a few of the inputs) to $out.row; the exit status says whether
# it found something.
fuzz_one() {
    local t="$1" corpus="fuzz/corpus/$1" out="target/afl-out/$1"
    if [ ! -d "$corpus" ] || [ -z "$(ls -A "$corpus")" ]; then
        "$bin" --seeds "$t" "$corpus"
    fi
    rm -rf "$out"
    # -t: a generous time limit per input (a loaded machine is slow).
    cargo afl fuzz -i "$corpus" -o "$out" -V "$secs" -t 5000 -- "$bin" "$t" >"$out.log" 2>&1 || {
        echo "$t: afl-fuzz failed, see $out.log" >"$out.row"
        return 1
    }
    stat() { sed -n "s/^$1 *: *//p" "$out/default/fuzzer_stats"; }
    local crashes hangs
    crashes=$(stat saved_crashes)
    hangs=$(stat saved_hangs)
    printf '%-10s %10s %9s %13s %8s %8s %6s %9s\n' "$t" "$(stat execs_done)" \
        "$(stat execs_per_sec | cut -d. -f1)" "$(stat edges_found)/$(stat total_edges)" \
        "$(stat corpus_count)" "$crashes" "$hangs" "$(stat run_time)" >"$out.row"
    if [ "$update" = 1 ]; then
        local small="$out/small"
        mkdir -p "$small"
        find "$out/default/queue" -maxdepth 1 -type f -size -4097c -exec cp {} "$small/" \;
        rm -rf "$out/cmin"
        cargo afl cmin -i "$small" -o "$out/cmin" -- "$bin" "$t" >"$out.cmin.log" 2>&1
        rm -rf "$corpus"
        mkdir -p "$corpus"
        # The 40 smallest inputs of the minimised set.
        { ls -S -r "$out/cmin" | head -40 || true; } | while read -r f; do
            cp "$out/cmin/$f" "$corpus/$(sha1sum "$out/cmin/$f" | cut -c1-16)"
        done
    fi
    if [ "$crashes" != 0 ] || [ "$hangs" != 0 ]; then
        { ls "$out"/default/crashes/id* "$out"/default/hangs/id* 2>/dev/null | head -5 | sed 's/^/    /'; } >>"$out.row" || true
        return 1
    fi
}

failed=0
running=0
for t in "${targets[@]}"; do
    fuzz_one "$t" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n || failed=1
        running=$((running - 1))
    fi
done
while [ "$running" -gt 0 ]; do
    wait -n || failed=1
    running=$((running - 1))
done
printf '%-10s %10s %9s %13s %8s %8s %6s %9s\n' target execs execs/s edges corpus crashes hangs seconds
for t in "${targets[@]}"; do
    cat "target/afl-out/$t.row"
done
exit $failed
