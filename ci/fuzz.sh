#!/usr/bin/env bash
# Fuzz every target for N inputs each (default 1000000): the config parser,
# the bench matrix parser, the scheduling trace reader, the port-I/O
# devices, the interrupt controller and MMIO bus, the result record parser,
# the ELF loader and the control API. Prints inputs/s, findings and peak
# memory per target; findings are saved to target/fuzz-findings/ (replay
# with: target/release/pacer-fuzz --replay FILE --target NAME).
# Extra arguments go to pacer-fuzz (e.g. --target elf --seed 7).
#
# ci/fuzz.sh --afl [SECONDS] [--update-corpus] [--target NAME]...
# Coverage-guided: the same targets under AFL++ through cargo-afl
# (`cargo install cargo-afl --locked`; the harness is fuzz/afl, its own
# workspace), SECONDS per target (default 60), starting from the corpus
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
targets=()
while [ $# -gt 0 ]; do
    case "$1" in
    --update-corpus) update=1 ;;
    --target) targets+=("$2"); shift ;;
    [0-9]*) secs="$1" ;;
    *) echo "fuzz.sh --afl: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
if ! cargo afl --version >/dev/null 2>&1; then
    echo "fuzz.sh --afl: cargo-afl is not installed (cargo install cargo-afl --locked)" >&2
    exit 2
fi
# Its own target directory: instrumented builds must not share a cache
# with the plain ones.
CARGO_TARGET_DIR="$PWD/target/afl" cargo afl build --release --manifest-path fuzz/afl/Cargo.toml
bin="$PWD/target/afl/release/pacer-afl"
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <("$bin" --list)
mkdir -p target/afl-out
export AFL_NO_UI=1 AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1
# Where the kernel's core_pattern pipes cores to a helper, AFL++ would
# refuse to start without the variable above; cores are not needed.
failed=0
printf '%-10s %10s %9s %13s %8s %8s %6s\n' target execs execs/s edges corpus crashes hangs
for t in "${targets[@]}"; do
    corpus="fuzz/corpus/$t"
    if [ ! -d "$corpus" ] || [ -z "$(ls -A "$corpus")" ]; then
        "$bin" --seeds "$t" "$corpus"
    fi
    out="target/afl-out/$t"
    rm -rf "$out"
    # -t: a generous time limit per input (a loaded machine is slow).
    cargo afl fuzz -i "$corpus" -o "$out" -V "$secs" -t 5000 -- "$bin" "$t" >"$out.log" 2>&1 || {
        echo "$t: afl-fuzz failed, see $out.log" >&2
        failed=1
        continue
    }
    stat() { sed -n "s/^$1 *: *//p" "$out/default/fuzzer_stats"; }
    crashes=$(stat saved_crashes)
    hangs=$(stat saved_hangs)
    printf '%-10s %10s %9s %13s %8s %8s %6s\n' "$t" "$(stat execs_done)" \
        "$(stat execs_per_sec | cut -d. -f1)" "$(stat edges_found)/$(stat total_edges)" \
        "$(stat corpus_count)" "$crashes" "$hangs"
    if [ "$crashes" != 0 ] || [ "$hangs" != 0 ]; then
        failed=1
        { ls "$out"/default/crashes/id* "$out"/default/hangs/id* 2>/dev/null | head -5 | sed 's/^/    /'; } || true
    fi
    if [ "$update" = 1 ]; then
        small="$out/small"
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
done
exit $failed
