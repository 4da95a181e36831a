#!/bin/sh
# VMM memory overhead per VM: run 1 and then 4 VMs (bench guest, `cpu`
# workload, 1 vCPU, 96 MiB each), sample /proc/<pid>/status (VmRSS, RssAnon,
# RssFile) and /proc/<pid>/smaps while the guests run, and subtract the guest
# RAM actually touched (the Rss of the 96 MiB guest-memory mappings; the
# kernel may merge a guest mapping with a few adjacent anonymous pages, which
# then count as guest memory: a slight underestimate of the VMM's share).
#
#   ci/measure_mem.sh [vms...=1 4]
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$here/target}
cargo build --quiet --release -p pacer --manifest-path "$here/Cargo.toml"
pacer="$target/release/pacer"
kernel="$here/guests/out/bench-guest.elf"
[ -f "$kernel" ] || "$here/guests/build.sh" >/dev/null
counts=${*:-1 4}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for n in $counts; do
    cfg="$tmp/mem$n.toml"
    printf '[host]\nlog_dir = "logs"\n' >"$cfg"
    i=0
    while [ "$i" -lt "$n" ]; do
        printf '[[vm]]\nname = "m%s"\nvcpus = 1\nmemory_mib = 96\nkernel = "%s"\nworkload = "cpu duration_ms=4000 report_ms=100"\ntimeout_s = 60\n' "$i" "$kernel" >>"$cfg"
        i=$((i + 1))
    done
    "$pacer" run "$cfg" >"$tmp/out$n" 2>&1 &
    pid=$!
    sleep 1
    python3 - "$pid" "$n" <<'EOT'
import sys
pid, n = sys.argv[1], int(sys.argv[2])
status = {}
for line in open(f"/proc/{pid}/status"):
    k, _, v = line.partition(":")
    if k in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "Threads"):
        status[k] = int(v.split()[0])
guest_kib, guest_maps = 0, 0
size = anon_rw = None
for line in open(f"/proc/{pid}/smaps"):
    f = line.split()
    if "-" in f[0] and ":" not in f[0]:
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        size = (hi - lo) // 1024
        anon_rw = f[1].startswith("rw") and len(f) == 5
    elif f[0] == "Rss:" and anon_rw and size >= 96 * 1024 - 64:
        # Guest RAM: anonymous rw mappings of >= 96 MiB (the kernel merges
        # adjacent guest mappings, and sometimes a few neighbouring pages).
        guest_kib += int(f[1]); guest_maps += 1
rss = status["VmRSS"]
print(f"{n} VM(s): VmRSS {rss/1024:.2f} MiB (RssAnon {status['RssAnon']/1024:.2f}, RssFile {status['RssFile']/1024:.2f}), "
      f"threads {status['Threads']}, guest RAM touched {guest_kib/1024:.2f} MiB in {guest_maps} mapping(s); "
      f"VMM (RSS - guest touched) {(rss-guest_kib)/1024:.2f} MiB = {(rss-guest_kib)/1024/n:.2f} MiB per VM")
EOT
    wait "$pid" || { echo "pacer failed:"; cat "$tmp/out$n"; }
done
