#!/usr/bin/env bash
# Behaviour of two `pacer` binaries side by side: what a user sees must be
# the same byte for byte when a change only moves code (a refactoring).
#
#   bash ci/compare_behaviour.sh OLD_DIR/pacer NEW_DIR/pacer [WORKDIR]
#
# Both binaries must be named `pacer` (the usage lines print the name the
# program was started by).
#
# Compares, for both binaries (stdout, stderr and exit code each):
#   - `--help` and `-h` of the root and of every subcommand, found by
#     walking each help's "Commands:" list;
#   - `pacer man` (every page), `pacer completions SHELL` for every shell,
#     `pacer config-reference`;
#   - `pacer validate FILE` over a corpus of mutated configs (configs/*.toml)
#     and `pacer bench FILE --out DIR --dry-run` over a corpus of mutated
#     matrices (benches/*.toml): N_CONFIG and N_MATRIX files (default 2500
#     and 1000), made by a seeded generator (SEED, default 1), so the same
#     corpus every time: lines dropped, doubled or swapped, values replaced
#     (other types, out-of-range numbers, values of other keys), keys and
#     section names misspelt, files cut short;
#   - with RUNS=1, real runs under both binaries (configs/pingpong.toml
#     and configs/demo.toml --compare with --json, benches/smoke.toml
#     through `pacer bench`): their JSON documents compared by shape
#     (every key path with its JSON type, and the `schema`, `type`,
#     `policy` and `status` strings), since timings differ run to run;
#   - `pacer sim` on every scenario and its JSON; `pacer unixbench
#     --report` on the tests' console log and its JSON; and, when TRACE
#     names a trace (`pacer run --trace`), `pacer trace summary` (JSON),
#     `export`, `dump`, `plot` (SVG) and `pacer sim --replay` of it.
# Build both with the same PACER_COMMIT (e.g. PACER_COMMIT=compare cargo
# build --release -p pacer) so `--version` and the documents' producer
# agree; otherwise the commit is masked in what is compared.
#
# Prints one line per kind and a total; every difference is kept in
# WORKDIR/diffs/. Exit 0 when nothing differs, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
old=$(realpath "$1")
new=$(realpath "$2")
work=${3:-$root/target/compare}
N_CONFIG=${N_CONFIG:-2500}
N_MATRIX=${N_MATRIX:-1000}
SEED=${SEED:-1}
rm -rf "$work"
mkdir -p "$work/diffs" "$work/corpus/configs" "$work/corpus/benches" "$work/scratch"
# The corpus stands where configs/ and benches/ stand relative to the
# guests and the logs, so relative paths in the files mean what they mean
# in the repository.
ln -s "$root/guests" "$work/corpus/guests"
ln -s "$root/vcpu_sched" "$work/corpus/vcpu_sched"
mkdir -p "$work/corpus/target"

total=0
differ=0
# run KIND NAME CMD...: one command under both binaries (the binary is
# "$PACER" in CMD), compared.
run_both() {
    local kind=$1 name=$2
    shift 2
    local o=$work/scratch/old n=$work/scratch/new
    for side in old new; do
        local bin=$old
        [ "$side" = new ] && bin=$new
        local d=$work/scratch/$side
        rm -rf "$d"
        mkdir -p "$d"
        set +e
        (cd "$work/corpus" && PACER=$bin TMPOUT=$d/out "$@" >"$d/stdout" 2>"$d/stderr" </dev/null)
        echo $? >"$d/rc"
        set -e
        sed -i 's/(commit [0-9a-f]*)/(commit X)/g; s/"commit": "[0-9a-f]*"/"commit": "X"/g' "$d/stdout" "$d/stderr"
        # What differs from run to run by its nature: the binary's and the
        # scratch directory's paths, and the simulator's own host timing
        # (wall time and the rates made of it).
        sed -i -e "s#$bin#PACER#g; s#$d#SCRATCH#g" \
            -e 's/ host [0-9.]* ms  [0-9.]* M events\/s  [0-9.]* M sched calls\/s$/ host (timing)/' \
            -e 's/ in [0-9.]* ms host time = [0-9.]* M events\/s, [0-9.]* M scheduler calls\/s$/ (timing)/' \
            -e 's/"\(wall_ns\|events_per_sec\|sched_calls_per_sec\)": [0-9.e+-]*/"\1": (timing)/' \
            "$d/stdout" "$d/stderr"
    done
    total=$((total + 1))
    if ! diff -q "$o/rc" "$n/rc" >/dev/null || ! diff -q "$o/stdout" "$n/stdout" >/dev/null ||
        ! diff -q "$o/stderr" "$n/stderr" >/dev/null; then
        differ=$((differ + 1))
        local f=$work/diffs/$kind-${name//\//_}
        {
            echo "== $kind $name: $*"
            for x in rc stdout stderr; do diff -u "$o/$x" "$n/$x" | sed "s#^#$x #" || true; done
        } >"$f"
        kind_differ[$kind]=$((${kind_differ[$kind]:-0} + 1))
    fi
    kind_total[$kind]=$((${kind_total[$kind]:-0} + 1))
}
declare -A kind_total kind_differ

# --- help texts: walk the subcommand tree of the NEW binary and of the OLD
# one; a subcommand only one of them has shows up as a difference.
subcommands() {
    "$1" "${@:2}" --help 2>/dev/null | awk '/^Commands:/ { on = 1; next } on && /^  [a-z]/ { print $1 } on && /^$/ { on = 0 }' | grep -v '^help$' || true
}
walk() {
    local bin=$1
    shift
    echo "$*"
    local s
    for s in $(subcommands "$bin" "$@"); do walk "$bin" "$@" "$s"; done
}
{ walk "$old"; walk "$new"; } | sort -u >"$work/help-paths"
while read -r path; do
    # shellcheck disable=SC2086
    run_both help "${path:-root}-long" sh -c '"$PACER" "$@" --help' _ $path
    # shellcheck disable=SC2086
    run_both help "${path:-root}-short" sh -c '"$PACER" "$@" -h' _ $path
    # shellcheck disable=SC2086
    run_both help "${path:-root}-help-sub" sh -c '"$PACER" help "$@"' _ $path
done <"$work/help-paths"
run_both help version sh -c '"$PACER" --version'
run_both help no-args sh -c '"$PACER"'
run_both help bad-flag sh -c '"$PACER" run --no-such-flag x.toml'

# --- generated texts
run_both generated man sh -c '"$PACER" man --out "$TMPOUT" >/dev/null && for f in "$TMPOUT"/*; do echo "== ${f##*/}"; cat "$f"; done'
run_both generated man-stdout sh -c '"$PACER" man'
for shell in bash zsh fish elvish powershell; do
    run_both generated "completions-$shell" sh -c '"$PACER" completions "$1"' _ "$shell"
done
run_both generated config-reference sh -c '"$PACER" config-reference'
run_both generated topology-spec sh -c '"$PACER" topology --spec 2x4x2'

# --- the corpora
python3 - "$root" "$work/corpus" "$N_CONFIG" "$N_MATRIX" "$SEED" <<'PY'
import glob, os, random, sys
root, out, n_config, n_matrix, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rng = random.Random(seed)
VALUES = ['""', '"x"', '0', '-1', '1', '2', '3', '1.5', '-0.5', '1e99', 'nan', 'inf', 'true', 'false',
          '18446744073709551616', '4294967296', '65536', '999999', '[]', '[1, 2]', '["a", "b"]', '{}',
          '{ name = "x" }', '"0-1"', '"0-999"', '"1-0"', '"0,0"', '"/nonexistent/x"', '"../guests/out/bench-guest.elf"',
          '"haiku"', '"host"', '"pinned"', '"eevdf"', '"global-rr"', '"qemu"', '"low-latency"', '"power-saving"',
          '"threads"', '"workers"', '"kvm-irqchip"', '"cpu"', '"sleep"', '"2x22x2"', '"\u00e9"', "'''x'''", '1979-05-27']
def mutate(lines, pool_values, pool_keys):
    lines = list(lines)
    k = rng.choice([1, 1, 1, 2, 2, 3])
    for _ in range(k):
        if not lines:
            break
        i = rng.randrange(len(lines))
        line = lines[i]
        m = rng.randrange(11)
        if m == 0:
            del lines[i]
        elif m == 1:
            lines.insert(i, line)
        elif m == 2:
            j = rng.randrange(len(lines)); lines[i], lines[j] = lines[j], lines[i]
        elif m in (3, 4, 5) and '=' in line and not line.lstrip().startswith('#'):
            key, _, val = line.partition('=')
            new = rng.choice(VALUES) if m != 5 else rng.choice(pool_values)
            lines[i] = key + '= ' + new
        elif m == 6 and '=' in line:
            key, _, val = line.partition('=')
            key2 = rng.choice(pool_keys) if rng.random() < 0.5 else key.strip() + rng.choice(['x', '_', 's'])
            lines[i] = key2 + ' =' + val
        elif m == 7 and line.startswith('['):
            lines[i] = rng.choice(['[[vm]]', '[host]', '[matrix]', '[[workload]]', '[[layout]]', '[[vms]]', '[hots]', '[vm]', '[[host]]', '[[policy]]'])
        elif m == 8:
            text = '\n'.join(lines); cut = rng.randrange(len(text) + 1)
            lines = text[:cut].split('\n')
        elif m == 9 and '=' in line:
            import re
            nums = list(re.finditer(r'\d+', line))
            if nums:
                n = rng.choice(nums)
                v = rng.choice(['0', '1', str(int(n.group()) * 1000), str(int(n.group()) + 1), '9' * 20])
                lines[i] = line[:n.start()] + v + line[n.end():]
        else:
            lines.insert(i, rng.choice(pool_keys) + ' = ' + rng.choice(VALUES))
    return lines
def corpus(pattern, n, sub):
    files = sorted(glob.glob(os.path.join(root, pattern)))
    texts = [open(f).read().split('\n') for f in files]
    pool_values, pool_keys = [], []
    for t in texts:
        for l in t:
            if '=' in l and not l.lstrip().startswith('#'):
                k, _, v = l.partition('='); pool_keys.append(k.strip()); pool_values.append(v.strip())
    for i in range(n):
        j = i % len(files)
        name = '%05d-%s' % (i, os.path.basename(files[j]))
        with open(os.path.join(out, sub, name), 'w') as f:
            f.write('\n'.join(mutate(texts[j], pool_values, pool_keys)))
    # The unmutated files too.
    for f, t in zip(files, texts):
        with open(os.path.join(out, sub, 'orig-' + os.path.basename(f)), 'w') as g:
            g.write('\n'.join(t))
corpus('configs/*.toml', n_config, 'configs')
corpus('benches/*.toml', n_matrix, 'benches')
PY
for f in "$work"/corpus/configs/*.toml; do
    b=configs/${f##*/}
    run_both validate "${f##*/}" sh -c '"$PACER" validate "$1"' _ "$b"
done
for f in "$work"/corpus/configs/orig-*.toml; do
    b=configs/${f##*/}
    for flags in "--policy host" "--policy pinned" "--policy haiku:power-saving" "--mode power-saving" \
        "--dispatch workers" "--dispatch kvm-irqchip" "--log-dir /nonexistent/x" "--log-dir target/x" \
        "--policy host --mode low-latency" "--policy eevdf --dispatch workers --log-dir target/y"; do
        # shellcheck disable=SC2086
        run_both validate-flags "${f##*/}${flags// /_}" sh -c '"$PACER" validate "$@"' _ "$b" $flags
    done
done
for f in "$work"/corpus/benches/*.toml; do
    b=benches/${f##*/}
    run_both bench-dry-run "${f##*/}" sh -c '"$PACER" bench "$1" --out "$TMPOUT" --dry-run' _ "$b"
done

# --- the simulator (deterministic) and its JSON
for s in "$root"/vcpu_sched/scenarios/*.toml; do
    b=vcpu_sched/scenarios/${s##*/}
    run_both sim "${s##*/}" sh -c '"$PACER" sim "$1" --compare' _ "$b"
    run_both sim "${s##*/}-json" sh -c '"$PACER" sim "$1" --json "$TMPOUT.json" >/dev/null && cat "$TMPOUT.json"' _ "$b"
done

# --- a recorded trace read back
if [ -n "${TRACE:-}" ]; then
    run_both trace summary sh -c '"$PACER" trace summary "$1" --json "$TMPOUT.json" && cat "$TMPOUT.json"' _ "$TRACE"
    run_both trace export sh -c '"$PACER" trace export "$1" --out "$TMPOUT.json" && cat "$TMPOUT.json"' _ "$TRACE"
    run_both trace dump sh -c '"$PACER" trace dump "$1"' _ "$TRACE"
    run_both trace plot-svg sh -c '"$PACER" trace plot "$1" --out "$TMPOUT.svg" && cat "$TMPOUT.svg"' _ "$TRACE"
    run_both trace replay sh -c '"$PACER" sim --replay "$1"' _ "$TRACE"
    run_both trace replay-compare sh -c '"$PACER" sim --replay "$1" --compare' _ "$TRACE"
fi

# --- UnixBench: a guest's console log scored (the log of the tests' data)
ub_log=${UNIXBENCH_LOG:-}
for cand in "$root/pacer/tests/data/unixbench-console.txt" "$root/vmm/tests/data/unixbench-console.txt"; do
    [ -z "$ub_log" ] && [ -e "$cand" ] && ub_log=$cand
done
if [ -n "$ub_log" ]; then
    run_both unixbench report sh -c '"$PACER" unixbench --report "$1" --json "$TMPOUT.json" && cat "$TMPOUT.json"' _ "$ub_log"
    run_both unixbench report-missing sh -c '"$PACER" unixbench --report /nonexistent/log'
fi

# --- real runs: the documents' shape (keys, types, kinds), not timings
if [ "${RUNS:-0}" = 1 ] && [ -e /dev/kvm ]; then
    shape() {
        python3 - "$@" <<'PY'
import json, sys
def walk(v, path, out):
    if isinstance(v, dict):
        for k, x in v.items():
            walk(x, path + '.' + k, out)
        if not v:
            out.add(path + ' {}')
    elif isinstance(v, list):
        for x in v:
            walk(x, path + '[]', out)
        if not v:
            out.add(path + ' []')
    else:
        t = {bool: 'bool', int: 'number', float: 'number', str: 'string', type(None): 'null'}[type(v)]
        if isinstance(v, str) and path.split('.')[-1] in ('schema', 'type', 'policy', 'status', 'mode', 'kind'):
            t += '=' + v
        out.add(path + ' ' + t)
out = set()
for f in sys.argv[1:]:
    text = open(f).read()
    docs = [json.loads(l) for l in text.splitlines() if l.strip()] if f.endswith('.jsonl') else [json.loads(text)]
    for d in docs:
        walk(d, '', out)
print('\n'.join(sorted(out)))
PY
    }
    for side in old new; do
        bin=$old
        [ "$side" = new ] && bin=$new
        d=$work/runs/$side
        mkdir -p "$d"
        "$bin" -q run configs/pingpong.toml --log-dir "$d/logs-pp" --json "$d/pingpong.json" >/dev/null 2>&1 || true
        "$bin" -q run configs/demo.toml --compare haiku,host --log-dir "$d/logs-demo" --json "$d/demo.json" >/dev/null 2>&1 || true
        "$bin" -q bench benches/smoke.toml --out "$d/smoke" >/dev/null 2>&1 || true
    done
    for doc in pingpong.json demo.json smoke/summary.json smoke/results.jsonl; do
        for side in old new; do
            d=$work/runs/$side
            extra=
            case $doc in pingpong.json) extra=$(ls "$d"/logs-pp/latest/*.results.jsonl) ;; esac
            shape "$d/$doc" > "$work/runs/$side-${doc//\//_}.shape"
            [ -n "$extra" ] && shape $extra > "$work/runs/$side-${doc//\//_}-events.shape"
        done
        for f in "$work/runs/old-${doc//\//_}"*.shape; do
            n=${f/\/old-/\/new-}
            total=$((total + 1))
            kind_total[json-shape]=$((${kind_total[json-shape]:-0} + 1))
            if ! diff -q "$f" "$n" >/dev/null; then
                differ=$((differ + 1))
                kind_differ[json-shape]=$((${kind_differ[json-shape]:-0} + 1))
                diff -u "$f" "$n" >"$work/diffs/json-shape-${f##*/}" || true
            fi
        done
    done
fi

for k in $(printf '%s\n' "${!kind_total[@]}" | sort); do
    echo "$k: ${kind_total[$k]} compared, ${kind_differ[$k]:-0} differ"
done
echo "total: $total compared, $differ differ (diffs in $work/diffs/)"
[ "$differ" -eq 0 ]
