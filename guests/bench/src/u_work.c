/* Bench guest workloads (ring 3, native speed), one per CPU, all between
 * the shared run.t_start and run.t_end (TSC):
 *   cpu       the work loop: WORK_SAMPLE every report_ms, WORK_DONE
 *   sleep     cyclictest-like: sleep until every interval_us tick, record
 *             wake TSC - programmed TSC (LATENCY + HISTOGRAM, SLEEP_DONE)
 *   pingpong  two CPUs wake each other with IPIs (PINGPONG_DONE)
 *   burst     FreeBSD ULE's bursty waker: wake every period_us, do run_us
 *             of work, sleep (BURST_DONE, LATENCY + HISTOGRAM)
 *   spinlock  all spinlock CPUs contend on one test-and-test-and-set lock
 *             (SPINLOCK_DONE, LATENCY + HISTOGRAM of the lock wait)
 * Each also prints one `pacer-result vcpu=N workload=..` line (PROTOCOL.md)
 * so a VMM with only a console can read the results. */
#include "u.h"
#include "work.h"

/* pingpong: one cache line per pair, indexed by the pair's lower vCPU */
struct pair {
    uint64_t ping, pong;     /* sequence numbers: initiator -> responder -> back */
    uint32_t stop;
} __attribute__((aligned(64)));
static struct pair pairs[MAX_CPUS];

/* spinlock: the lock and a counter bumped non-atomically inside it */
static struct {
    uint32_t lock;
    uint64_t inside;
} __attribute__((aligned(64))) spin;

uint64_t spinlock_inside(void) { return __atomic_load_n(&spin.inside, __ATOMIC_ACQUIRE); }

static void result_head(struct buf *b, struct ucpu *c, const char *workload)
{
    b->n = 0;
    bs(b, "pacer-result vcpu="); bu(b, c->id);
    bs(b, " workload="); bs(b, workload);
}

static void result_end(struct buf *b)
{
    bs(b, "\r\n");
    bflush(b);
}

static void wl_cpu(struct ucpu *c)
{
    uint64_t report = cfg.report_ms * cfg.tsc_khz;
    uint64_t units = 0, last_units = 0;
    uint64_t t0 = rdtsc(), last = t0, next = t0 + report, now;
    for (;;) {
        c->work_sink = work_unit(&c->work_state);
        units++;
        now = rdtsc();
        if (now >= next) {
            record(c, PACER_KIND_WORK_SAMPLE, units - last_units, now - last, units, now - t0, 0);
            last_units = units;
            last = now;
            next += report;
            if (next <= now)
                next = now + report;
        }
        if (now >= run.t_end)
            break;
    }
    uint64_t ticks = now - t0, ups = per_second(units, ticks);
    record(c, PACER_KIND_WORK_DONE, units, ticks, ups, 0, 0);
    struct buf b;
    result_head(&b, c, "cpu");
    bs(&b, " units="); bu(&b, units);
    bs(&b, " ticks="); bu(&b, ticks);
    bs(&b, " units_per_s="); bu(&b, ups);
    result_end(&b);
}

static void wl_sleep(struct ucpu *c)
{
    uint64_t interval = ns_to_ticks(cfg.interval_us * 1000);
    uint64_t next = run.t_start + interval, wake = run.t_start;
    uint64_t count = 0, missed = 0, max = 0;
    hist_clear(c);
    while (next <= run.t_end && (!cfg.wakes || count < cfg.wakes)) {
        wake = (uint64_t)sys(SYS_SLEEP_UNTIL, next, 0);
        uint64_t ns = ticks_to_ns(wake - next);
        hist_add(c, ns);
        count++;
        if (ns > max)
            max = ns;
        next += interval;
        while (next <= wake) {
            next += interval;
            missed++;
        }
    }
    uint64_t ticks = wake - run.t_start;
    record(c, PACER_KIND_SLEEP_DONE, count, missed, cfg.interval_us * 1000, ticks, 0);
    struct buf b;
    result_head(&b, c, "sleep");
    bs(&b, " count="); bu(&b, count);
    bs(&b, " missed="); bu(&b, missed);
    bs(&b, " interval_us="); bu(&b, cfg.interval_us);
    report_latency(c, PACER_METRIC_SLEEP_WAKE, count, max, &b, "");
    result_end(&b);
}

/* The initiator bumps `ping` and sends an IPI; the responder answers with
 * `pong` = ping and an IPI back. Both halt in wait_ipi between messages and
 * re-check memory after every wake, so a stray IPI (the `go` IPI, say)
 * costs one loop and a message is never lost: the sender stores before it
 * sends, the receiver reads its IPI count before it looks. */
static void wl_pingpong(struct ucpu *c)
{
    uint32_t peer = run.partner[c->id];
    int initiator = c->id < peer;
    struct pair *p = &pairs[initiator ? c->id : peer];
    uint64_t seen = (uint64_t)sys(SYS_IRQ_COUNT, IRQ_IPI, 0);
    uint64_t trips = 0, now;
    if (initiator) {
        while (rdtsc() < run.t_end) {
            uint64_t k = trips + 1;
            __atomic_store_n(&p->ping, k, __ATOMIC_SEQ_CST);
            sys(SYS_IPI, peer, 0);
            while (__atomic_load_n(&p->pong, __ATOMIC_ACQUIRE) != k)
                seen = (uint64_t)sys(SYS_WAIT_IPI, seen, 0);
            trips = k;
        }
        __atomic_store_n(&p->stop, 1, __ATOMIC_SEQ_CST);
        sys(SYS_IPI, peer, 0);
    } else {
        uint64_t last = 0;
        for (;;) {
            while (__atomic_load_n(&p->ping, __ATOMIC_ACQUIRE) == last &&
                   !__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE))
                seen = (uint64_t)sys(SYS_WAIT_IPI, seen, 0);
            if (__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE))
                break;
            last = __atomic_load_n(&p->ping, __ATOMIC_ACQUIRE);
            __atomic_store_n(&p->pong, last, __ATOMIC_SEQ_CST);
            sys(SYS_IPI, peer, 0);
            trips++;
        }
    }
    now = rdtsc();
    uint64_t ticks = now - run.t_start, rate = per_second(trips, ticks);
    record(c, PACER_KIND_PINGPONG_DONE, trips, ticks, rate, peer, initiator ? 0 : 1);
    struct buf b;
    result_head(&b, c, "pingpong");
    bs(&b, " partner="); bu(&b, peer);
    bs(&b, initiator ? " role=initiator" : " role=responder");
    bs(&b, " roundtrips="); bu(&b, trips);
    bs(&b, " roundtrips_per_s="); bu(&b, rate);
    result_end(&b);
}

/* burst work comes in granules of this many work iterations (~0.5 us) */
#define BURST_GRANULE 256

static void wl_burst(struct ucpu *c)
{
    uint64_t period = ns_to_ticks(cfg.period_us * 1000);
    uint64_t run_ticks = ns_to_ticks(cfg.run_us * 1000);
    /* Calibrate: granules per run_us, from the fastest of 5 samples (the
     * least disturbed), so a burst is a fixed amount of work. */
    uint64_t best = ~0ull;
    for (int i = 0; i < 5; i++) {
        uint64_t t0 = rdtsc();
        for (int g = 0; g < 8; g++)
            c->work_sink = work_iters(&c->work_state, BURST_GRANULE);
        uint64_t t = rdtsc() - t0;
        if (t < best)
            best = t;
    }
    uint64_t per_granule = best / 8 ? best / 8 : 1;
    uint64_t granules = (run_ticks + per_granule / 2) / per_granule;
    if (!granules)
        granules = 1;

    uint64_t next = run.t_start + period, done = run.t_start;
    uint64_t bursts = 0, missed = 0, max = 0, busy = 0;
    hist_clear(c);
    while (next <= run.t_end && (!cfg.wakes || bursts < cfg.wakes)) {
        uint64_t wake = (uint64_t)sys(SYS_SLEEP_UNTIL, next, 0);
        uint64_t ns = ticks_to_ns(wake - next);
        hist_add(c, ns);
        if (ns > max)
            max = ns;
        for (uint64_t g = 0; g < granules; g++)
            c->work_sink = work_iters(&c->work_state, BURST_GRANULE);
        done = rdtsc();
        busy += done - wake;
        bursts++;
        next += period;
        while (next <= done) {
            next += period;
            missed++;
        }
    }
    uint64_t ticks = done - run.t_start;
    /* achieved share: the work done (bursts x run_us) over the time taken */
    uint64_t ppm = muldiv(bursts * run_ticks, 1000000, ticks);
    record(c, PACER_KIND_BURST_DONE, bursts, missed, ticks, busy, ppm);
    struct buf b;
    result_head(&b, c, "burst");
    bs(&b, " bursts="); bu(&b, bursts);
    bs(&b, " missed="); bu(&b, missed);
    bs(&b, " run_fraction_ppm="); bu(&b, ppm);
    report_latency(c, PACER_METRIC_BURST_WAKE, bursts, max, &b, "wake_");
    result_end(&b);
}

static void spin_ticks(uint64_t from, uint64_t ticks)
{
    while (rdtsc() - from < ticks)
        ;
}

/* pv_spin: how often a waiter looks at the holder's vCPU (Linux's
 * pv_wait_early looks every 256 spins) */
#define PV_SPIN_CHECK 256

static void wl_spinlock(struct ucpu *c)
{
    uint64_t cs = ns_to_ticks(cfg.cs_ns), gap = ns_to_ticks(cfg.gap_ns);
    uint64_t acq = 0, max = 0, yields = 0, now;
    uint32_t me = c->id + 1, pv = cfg.pv_spin && steal_on;
    hist_clear(c);
    while ((now = rdtsc()) < run.t_end) {
        /* test-and-test-and-set; the lock word holds the holder's vCPU + 1 */
        uint32_t free = 0;
        while (!__atomic_compare_exchange_n(&spin.lock, &free, me, 0, __ATOMIC_ACQUIRE,
                                            __ATOMIC_RELAXED)) {
            uint32_t spins = 0, h;
            while ((h = __atomic_load_n(&spin.lock, __ATOMIC_RELAXED)) != 0) {
                cpu_relax();
                /* pv_spin: spinning for a holder whose vCPU is not running
                 * only burns the time it needs: give the CPU away (Pacer's
                 * yield port) so that it runs sooner, as Linux's pv
                 * spin locks stop spinning when vcpu_is_preempted. */
                if (pv && ++spins % PV_SPIN_CHECK == 0 && vcpu_is_preempted(h - 1)) {
                    sys(SYS_YIELD, 0, 0);
                    yields++;
                }
            }
            free = 0;
        }
        uint64_t got = rdtsc(), ns = ticks_to_ns(got - now);
        /* a plain read-modify-write: lost updates if exclusion ever broke */
        uint64_t v = __atomic_load_n(&spin.inside, __ATOMIC_RELAXED);
        __atomic_store_n(&spin.inside, v + 1, __ATOMIC_RELAXED);
        spin_ticks(got, cs);
        __atomic_store_n(&spin.lock, 0, __ATOMIC_RELEASE);
        acq++;
        hist_add(c, ns);
        if (ns > max)
            max = ns;
        spin_ticks(rdtsc(), gap);
    }
    uint64_t ticks = rdtsc() - run.t_start, rate = per_second(acq, ticks);
    c->acquisitions = acq;
    c->ticks = ticks;
    record(c, PACER_KIND_SPINLOCK_DONE, acq, ticks, rate, max, cfg.cs_ns);
    struct buf b;
    result_head(&b, c, "spinlock");
    bs(&b, " acquisitions="); bu(&b, acq);
    bs(&b, " acquisitions_per_s="); bu(&b, rate);
    if (pv) {
        bs(&b, " yields="); bu(&b, yields);
    }
    report_latency(c, PACER_METRIC_LOCK_WAIT, acq, max, &b, "wait_");
    result_end(&b);
}

void run_role(struct ucpu *c)
{
    uint64_t steal0 = steal_on ? steal_ns(c->id) : 0;
    switch (run.role[c->id]) {
    case ROLE_CPU: wl_cpu(c); break;
    case ROLE_SLEEP: wl_sleep(c); break;
    case ROLE_PINGPONG: wl_pingpong(c); break;
    case ROLE_BURST: wl_burst(c); break;
    case ROLE_SPINLOCK: wl_spinlock(c); break;
    case ROLE_BARRIER: wl_barrier(c); break;
    case ROLE_SHOOTDOWN: wl_shootdown(c); break;
    case ROLE_SERVER: wl_server(c); break;
    default: break;
    }
    if (!steal_on)
        return;
    /* Its steal time: over its life (as the hypervisor last published it,
     * at this vCPU's latest dispatch) and over the workload. */
    uint64_t steal = steal_ns(c->id), ticks = rdtsc() - run.t_start;
    record(c, PACER_KIND_STEAL, steal, steal - steal0, ticks, 0, 0);
    struct buf b;
    result_head(&b, c, "steal");
    bs(&b, " steal_ns="); bu(&b, steal);
    bs(&b, " run_steal_ns="); bu(&b, steal - steal0);
    result_end(&b);
}
