#!/usr/bin/env python3
"""The table of docs/measurements/ranked.md from a run of
benches/mechanism.toml: medians per (layout, policy) of the VM under
test's figures (and its neighbours' where they pay), ratios to `host`,
and a two-sided permutation test of haiku (the default dispatch) against
host over the repetitions (on medians; 20000 shuffles, fixed seed).

    pacer bench benches/mechanism.toml --out-dir target/bench/mechanism
    python3 ci/bench_medians.py target/bench/mechanism/results.jsonl
"""
import json, sys, statistics, random
from collections import defaultdict

path = sys.argv[1]
cells = [json.loads(l) for l in open(path) if l.strip()]
# figure name -> function(samples) -> value
def total(metric, vm=None, group=None):
    def f(s):
        v = [x["value"] for x in s if x["metric"] == metric and x["vcpu"] is not None
             and (vm is None or x["vm"] == vm) and (group is None or x["group"] == group)]
        return sum(v) if v else None
    return f
def worst(metric, group):
    def f(s):
        v = [x["value"] for x in s if x["metric"] == metric and x["group"] == group and x["vcpu"] is not None]
        return max(v) if v else None
    return f
def first(metric, group):
    def f(s):
        v = [x["value"] for x in s if x["metric"] == metric and x["group"] == group and x["vcpu"] == 0]
        return v[0] if v else None
    return f
FIG = {
 "pingpong": [("round trips/s", first("pingpong.roundtrips_per_s", "pp"), "higher")],
 "pingpong-vs-hog": [("round trips/s", first("pingpong.roundtrips_per_s", "pp"), "higher"),
                      ("its hog units/s", total("cpu.units_per_s", group="hog"), "higher")],
 "noisy-neighbour": [("sleep p50 (worst vCPU)", worst("sleep.wake_latency.p50_ns", "lat"), "lower"),
                     ("sleep p99 (worst vCPU)", worst("sleep.wake_latency.p99_ns", "lat"), "lower"),
                     ("its hog units/s", total("cpu.units_per_s", group="hog"), "higher")],
 "bursty-vs-hog": [("run fraction", first("burst.run_fraction", "waker"), "higher"),
                   ("wake p99", first("burst.wake_latency.p99_ns", "waker"), "lower"),
                   ("its hog units/s", total("cpu.units_per_s", group="hog"), "higher")],
 "cpu-1to2": [("units/s", total("cpu.units_per_s"), "higher")],
 "cpu-1to1": [("units/s", total("cpu.units_per_s"), "higher")],
 "cpu-2to1": [("units/s", total("cpu.units_per_s"), "higher")],
 "cpu-3to1": [("units/s", total("cpu.units_per_s"), "higher")],
 "smp-alone": [("units/s", total("cpu.units_per_s"), "higher")],
 "mixed-tenants": [("ping-pong round trips/s", first("pingpong.roundtrips_per_s", "pp"), "higher"),
                   ("sleeper p99", worst("sleep.wake_latency.p99_ns", "lat"), "lower"),
                   ("hogs units/s", total("cpu.units_per_s", group="hog"), "higher")],
}
vals = defaultdict(list)
policies = []
for c in cells:
    if c["status"] != "ok":
        continue
    if c["policy"] not in policies:
        policies.append(c["policy"])
    for name, f, _ in FIG.get(c["layout"], []):
        v = f(c["samples"])
        if v is not None:
            vals[(c["layout"], name, c["policy"])].append(v)

def perm_p(a, b, n=20000):
    obs = abs(statistics.median(a) - statistics.median(b))
    pool = a + b; k = len(a); hits = 0
    rnd = random.Random(1)
    for _ in range(n):
        rnd.shuffle(pool)
        if abs(statistics.median(pool[:k]) - statistics.median(pool[k:])) >= obs - 1e-12:
            hits += 1
    return hits / n

def fmt(v, name):
    if "p50" in name or "p99" in name:
        return f"{v/1000:.0f} us"
    if "fraction" in name:
        return f"{v:.3f}"
    if v >= 10000:
        return f"{v/1000:.0f}k"
    return f"{v:.0f}"

order = [p for p in ["host", "haiku", "haiku-ps", "haiku-threads", "haiku-kvm", "qemu"] if p in policies]
print("| layout | figure | " + " | ".join(order) + " | haiku p (vs host) |")
print("|---|---|" + "---|" * len(order) + "---|")
for layout, figs in FIG.items():
    for name, _, better in figs:
        host = vals.get((layout, name, "host"))
        if not host:
            continue
        hm = statistics.median(host)
        row = []
        for p in order:
            v = vals.get((layout, name, p))
            if not v:
                row.append("-"); continue
            m = statistics.median(v)
            r = m / hm if hm else float("nan")
            row.append(fmt(m, name) if p == "host" else f"{fmt(m, name)} ({r:.2f}x)")
        hk = vals.get((layout, name, "haiku"))
        pv = f"{perm_p(hk, host):.3f} (n={len(hk)}/{len(host)})" if hk else "-"
        print(f"| {layout} | {name} ({better}) | " + " | ".join(row) + f" | {pv} |")
# worst-of-reps for the noisy p99
for p in order:
    v = vals.get(("noisy-neighbour", "sleep p99 (worst vCPU)", p))
    if v:
        print(f"noisy p99 worst-of-{len(v)} {p}: {max(v)/1000:.0f} us")
