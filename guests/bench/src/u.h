/* Bench guest ring-3 side: what u_main.c (command line, SMP orchestration),
 * u_work.c (workloads) and u_lib.c (system calls, formatting, records,
 * histograms) share. Ring 3 runs natively, one stack per CPU; state shared
 * between CPUs is touched with __atomic builtins only. */
#ifndef U_H
#define U_H
#include <stdint.h>
#include "pacer_abi.h"
#include "guest.h"

/* ---- system calls: `ud2` traps to the kernel (k_entry.S ud_entry) ------- */
static inline long sys3(long nr, long a0, long a1, long a2)
{
    long ret;
    register long r10 __asm__("r10");
    register long r8 __asm__("r8");
    register long r9 __asm__("r9");
    __asm__ volatile("ud2"
                     : "=a"(ret), "+D"(a0), "+S"(a1), "+d"(a2), "=r"(r10), "=r"(r8), "=r"(r9)
                     : "a"(nr)
                     : "rcx", "r11", "memory");
    return ret;
}
#define sys(nr, a0, a1) sys3(nr, (long)(a0), (long)(a1), 0)

static inline uint64_t rdtsc(void)
{
    uint32_t lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
}

static inline void cpu_relax(void) { __asm__ volatile("pause" ::: "memory"); }

/* ---- configuration (parsed by the BSP before any AP starts) ------------- */
enum role { ROLE_NONE, ROLE_CPU, ROLE_SLEEP, ROLE_PINGPONG, ROLE_BURST, ROLE_SPINLOCK,
            ROLE_BARRIER, ROLE_SHOOTDOWN, ROLE_SERVER };
/* roles a `mixed=` entry may name */
#define ROLE_LAST_MIXABLE ROLE_SPINLOCK

struct cfg {
    const char *workload;
    unsigned workload_len;
    uint64_t duration_ms, report_ms, tsc_khz, vcpus;
    uint64_t interval_us, period_us, run_us, cs_ns, gap_ns;
    uint64_t wakes;              /* sleep, burst, server: stop after this many wakes/requests (0: at the end) */
    uint64_t work_us;            /* barrier, shootdown, server: work between meetings / per request */
    uint64_t rate, seed, touch_kib;   /* server (u_server.c) */
    int server_lock;             /* server: requests take a lock shared by the workers */
    int x2apic, deadline, pv_eoi;   /* x2apic: 0 xapic, 1 x2apic, 2 x2APIC if offered */
    int steal;                   /* KVM steal time where CPUID offers it */
    int pv_spin;                 /* spinlock: yield while the holder's vCPU is preempted */
    uint64_t flood_kib, flood_records, random_ports, random_mmio;   /* hostile */
    uint8_t mixed[MAX_CPUS];     /* enum role per vCPU (workload=mixed) */
};
extern struct cfg cfg;

/* ---- per-CPU state (ucpus[i] belongs to CPU i; the BSP reads the result
 * fields after that CPU has finished) ---------------------------------------- */
struct ucpu {
    uint32_t id;
    uint32_t seq;                /* record sequence number */
    uint64_t work_state;
    uint64_t work_sink;
    uint64_t acquisitions;       /* spinlock: read by the BSP for the total */
    uint64_t ticks;              /* spinlock: its run length */
    uint32_t hist[PACER_HIST_BUCKETS];
} __attribute__((aligned(64)));
extern struct ucpu ucpus[MAX_CPUS];

/* the run's shared timeline and pairing (set by the BSP before `go`) */
struct run {
    uint64_t t_start, t_end;     /* TSC: every CPU starts and stops together */
    uint8_t role[MAX_CPUS];
    uint8_t partner[MAX_CPUS];   /* pingpong partner */
};
extern struct run run;

/* ---- KVM steal time (one area per CPU, user memory, VA = PA) ------------- */
struct kvm_steal_time {
    uint64_t steal;              /* ns this vCPU waited runnable for a host CPU */
    uint32_t version;            /* odd while the hypervisor writes */
    uint32_t flags;
    uint8_t preempted;           /* bit 0: runnable but not running */
    uint8_t pad[47];
} __attribute__((aligned(64)));
extern struct kvm_steal_time steal_areas[MAX_CPUS];
extern int steal_on;             /* every CPU registered its area */
#define KVM_VCPU_PREEMPTED 1
/* CPU i's steal as Linux's kvm_steal_clock reads it (version-checked) */
uint64_t steal_ns(uint32_t i);
static inline int vcpu_is_preempted(uint32_t i)
{
    return steal_on && i < MAX_CPUS &&
           (__atomic_load_n(&steal_areas[i].preempted, __ATOMIC_RELAXED) & KVM_VCPU_PREEMPTED);
}

/* ---- u_lib.c ------------------------------------------------------------- */
struct buf { char b[512]; unsigned n; };
void bs(struct buf *b, const char *s);
void bn(struct buf *b, const char *s, unsigned len);
void bu(struct buf *b, uint64_t v);
void bflush(struct buf *b);
void con(const char *s);
void marker(int m);
__attribute__((noreturn)) void sys_exit(int status);
void record(struct ucpu *c, uint16_t kind, uint64_t v0, uint64_t v1, uint64_t v2, uint64_t v3,
            uint64_t v4);
/* ERROR record: `name` (up to 24 bytes) packed into v1..v3 */
void record_error(struct ucpu *c, uint64_t code, const char *name, unsigned name_len,
                  uint64_t detail);
uint64_t muldiv(uint64_t a, uint64_t b, uint64_t c);
uint64_t ticks_to_ns(uint64_t ticks);
uint64_t ns_to_ticks(uint64_t ns);
uint64_t per_second(uint64_t count, uint64_t ticks);
int keyis(const char *k, unsigned kl, const char *want);

/* histogram of nanosecond values in c->hist (layout: pacer_abi.h) */
void hist_clear(struct ucpu *c);
void hist_add(struct ucpu *c, uint64_t ns);
/* the value at quantile num/den: the top of the bucket holding that rank,
 * never above `max` */
uint64_t hist_quantile(const struct ucpu *c, uint64_t count, uint64_t num, uint64_t den,
                       uint64_t max);
/* LATENCY + HISTOGRAM records and ` p50_ns=.. p99_ns=.. p999_ns=.. max_ns=..` in b */
void report_latency(struct ucpu *c, uint64_t metric, uint64_t count, uint64_t max,
                    struct buf *b, const char *prefix);

/* ---- u_server.c ---------------------------------------------------------- */
void wl_server(struct ucpu *c);

/* ---- u_work.c ------------------------------------------------------------ */
void run_role(struct ucpu *c);
/* the spinlock's in-lock counter: equals the acquisitions if exclusion held */
uint64_t spinlock_inside(void);

/* ---- u_sync.c: workloads whose vCPUs wait for each other ------------------ */
void wl_barrier(struct ucpu *c);
void wl_shootdown(struct ucpu *c);

#endif
