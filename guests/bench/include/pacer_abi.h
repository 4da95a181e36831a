/* Pacer guest protocol constants (see guests/PROTOCOL.md).
 * The VMM's side lives in devices/src/result_port.rs; keep them in sync.
 * Usable from C and from assembly (.S). */
#ifndef PACER_ABI_H
#define PACER_ABI_H

/* boot_params ("zero page") offsets read by the guest */
#define BP_E820_ENTRIES   0x1E8   /* u8 */
#define BP_CMD_LINE_PTR   0x228   /* u32 */
#define BP_CMDLINE_SIZE   0x238   /* u32 */
#define BP_E820_TABLE     0x2D0   /* 20-byte entries */
#define BP_E820_MAX       128
#define E820_ENTRY_SIZE   20
#define E820_RAM          1

/* ports */
#define PACER_PORT_COM1     0x3F8
#define PACER_PORT_MARKER   0xE00   /* out, 8 bit */
#define PACER_PORT_RECORD   0xE04   /* out, 32 bit: guest-physical addr of a record */
#define PACER_PORT_EXIT     0xE08   /* out, 32 bit: exit status */
#define PACER_PORT_YIELD    0xE0C   /* out, any width: voluntary yield hint (value ignored) */

/* markers */
#define PACER_MARKER_FIRST_INSTRUCTION 1
#define PACER_MARKER_KERNEL_READY      2
#define PACER_MARKER_WORKLOAD_START    3
#define PACER_MARKER_WORKLOAD_DONE     4
#define PACER_MARKER_SMP_START         5   /* BSP: about to start the APs */
#define PACER_MARKER_AP_ONLINE         6   /* an AP: in 64-bit mode, LAPIC on */
#define PACER_MARKER_SMP_READY         7   /* BSP: every AP online or timed out */
#define PACER_MARKER_PANIC             0xEE

/* result records */
#define PACER_RECORD_MAGIC    0x52434150u  /* "PACR" */
#define PACER_RECORD_VERSION  1
#define PACER_RECORD_SIZE     64

#define PACER_KIND_WORK_SAMPLE 1
#define PACER_KIND_WORK_DONE   2
#define PACER_KIND_BOOT_TIMES  3
#define PACER_KIND_TEXT        4
#define PACER_KIND_ERROR       5
#define PACER_KIND_LATENCY     6   /* v0 metric, v1 count, v2 p50 ns, v3 p99 ns, v4 max ns */
#define PACER_KIND_HISTOGRAM   7   /* v0 metric | pairs << 16; v1..v4 bucket << 48 | count */
#define PACER_KIND_SLEEP_DONE  8   /* v0 wakes, v1 missed periods, v2 interval ns, v3 ticks */
#define PACER_KIND_PINGPONG_DONE 9 /* v0 round trips, v1 ticks, v2 per s, v3 partner, v4 role */
#define PACER_KIND_BURST_DONE 10   /* v0 bursts, v1 missed, v2 ticks, v3 run ticks, v4 ppm */
#define PACER_KIND_SPINLOCK_DONE 11 /* v0 acquisitions, v1 ticks, v2 per s, v3 max wait ns, v4 cs ns */
#define PACER_KIND_STEAL      12   /* v0 steal ns (life), v1 steal ns (workload), v2 workload ticks */
#define PACER_KIND_BARRIER_DONE 13 /* v0 rounds, v1 ticks, v2 per s, v3 spin ticks, v4 participants */
#define PACER_KIND_SHOOTDOWN_DONE 14 /* v0 round trips (initiator) / acks, v1 ticks, v2 per s,
                                       v3 targets / the initiator's vCPU, v4 role */
#define PACER_KIND_SERVER_DONE 16  /* v0 requests served, v1 ticks, v2 per s, v3 offered, v4 dropped */

/* LATENCY / HISTOGRAM metrics */
#define PACER_METRIC_SLEEP_WAKE 1  /* sleep: wake TSC - programmed TSC */
#define PACER_METRIC_BURST_WAKE 2  /* burst: the same, per period */
#define PACER_METRIC_LOCK_WAIT  3  /* spinlock: time to acquire the lock */
#define PACER_METRIC_SHOOTDOWN  4  /* shootdown: IPIs sent to every sibling acknowledged */
#define PACER_METRIC_SERVER_REQUEST 8 /* server: intended arrival to end of service */

/* Histogram buckets (log-linear, HdrHistogram-style with 2 significant
 * digits: 128 sub-buckets per power of two, in ns): v < 128 -> bucket v;
 * v < 2^37 with e = floor(log2 v): bucket 128 * (e - 6) + ((v >> (e - 7)) & 127),
 * covering [(128 + m) << (e - 7), (129 + m) << (e - 7)), at most 1/128
 * of its value wide; v >= 2^37 ns (137 s) -> the last bucket, 3968. */
#define PACER_HIST_SUB     128
#define PACER_HIST_SUB_BITS 7
#define PACER_HIST_TOP_BIT 37
#define PACER_HIST_BUCKETS 3969
#define PACER_HIST_PAIRS   4
#define PACER_HIST_COUNT_BITS 48

/* ERROR codes (v0); v1..v3 hold a NUL-padded ASCII name (24 bytes, the
 * offending key or workload), v4 a detail value */
#define PACER_ERR_UNKNOWN_WORKLOAD 1  /* name = the workload */
#define PACER_ERR_BAD_PARAM        2  /* name = the key */
#define PACER_ERR_TOO_MANY_VCPUS   3  /* name = "vcpus", detail = the maximum */
#define PACER_ERR_AP_TIMEOUT       4  /* name = "ap", detail = the vCPU index */
#define PACER_ERR_NO_LAPIC         5  /* name = the workload that needs one */
#define PACER_ERR_LOCK_BROKEN      6  /* name = "spinlock", detail = lost updates */
#define PACER_ERR_NO_TSC_DEADLINE  7  /* name = "timer": timer=deadline, the LAPIC lacks it */

/* exit statuses the bench guest uses */
#define PACER_EXIT_OK          0
#define PACER_EXIT_BAD_INPUT   2  /* parameter, workload name, vcpus > max */
#define PACER_EXIT_NO_LAPIC    3  /* the workload needs a local APIC (or its TSC-deadline
                                     timer); none found */
#define PACER_EXIT_AP_FAILED   4  /* an AP did not start; the others' results were reported */
#define PACER_EXIT_BROKEN      5  /* a self-check failed (spinlock exclusion) */

#define PACER_TEXT_MAX 4096

/* exit status the guest kernel uses for an unexpected exception: 0x100 + vector */
#define PACER_EXIT_PANIC_BASE 0x100

#ifndef __ASSEMBLER__
#include <stdint.h>

struct pacer_record {
    uint32_t magic;
    uint16_t version;
    uint16_t kind;
    uint32_t vcpu;
    uint32_t seq;
    uint64_t tsc;
    uint64_t v[5];
};
_Static_assert(sizeof(struct pacer_record) == PACER_RECORD_SIZE, "record size");
#endif

#endif
