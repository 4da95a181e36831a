/* Bench guest workloads whose vCPUs wait for each other, as SMP guests do
 * (ring 3, native speed, between run.t_start and run.t_end):
 *   barrier    every `barrier` vCPU does work_us of work, then meets the
 *              others at a sense-reversing spin barrier (BARRIER_DONE:
 *              rounds and the ticks spent spinning at the barrier)
 *   shootdown  the lowest `shootdown` vCPU sends an IPI to every sibling
 *              and spins until all have acknowledged, as a TLB shootdown
 *              does; the siblings run work and answer between granules
 *              (SHOOTDOWN_DONE, LATENCY + HISTOGRAM of the round trip)
 * A sibling the hypervisor parked holds up everyone spinning for it: the
 * spin time is what a co-scheduling hypervisor saves. */
#include "u.h"
#include "work.h"

/* work comes in granules of this many work iterations (~0.5 us), the
 * amount calibrated once, so that a preempted vCPU's work takes longer
 * (as burst's does) */
#define SYNC_GRANULE 256

static uint64_t granules_for(struct ucpu *c, uint64_t ticks)
{
    if (!ticks)
        return 0;
    uint64_t best = ~0ull;
    for (int i = 0; i < 5; i++) {   /* fastest of 5: the least disturbed */
        uint64_t t0 = rdtsc();
        for (int g = 0; g < 8; g++)
            c->work_sink = work_iters(&c->work_state, SYNC_GRANULE);
        uint64_t t = rdtsc() - t0;
        if (t < best)
            best = t;
    }
    uint64_t per = best / 8 ? best / 8 : 1;
    uint64_t n = (ticks + per / 2) / per;
    return n ? n : 1;
}

static void do_granules(struct ucpu *c, uint64_t n)
{
    for (uint64_t g = 0; g < n; g++)
        c->work_sink = work_iters(&c->work_state, SYNC_GRANULE);
}

static void result_head(struct buf *b, struct ucpu *c, const char *workload)
{
    b->n = 0;
    bs(b, "pacer-result vcpu="); bu(b, c->id);
    bs(b, " workload="); bs(b, workload);
}

/* ---- barrier ------------------------------------------------------------ */
static struct {
    uint32_t count;          /* arrivals in this round */
    uint32_t sense;          /* flips when the last one arrives */
    uint32_t stop;           /* set by the last arrival of the final round */
} __attribute__((aligned(64))) bar;

void wl_barrier(struct ucpu *c)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < cfg.vcpus; i++)
        n += run.role[i] == ROLE_BARRIER;
    uint64_t granules = granules_for(c, ns_to_ticks(cfg.work_us * 1000));
    uint32_t sense = 0;
    uint64_t rounds = 0, spin = 0;
    for (;;) {
        do_granules(c, granules);
        sense ^= 1;
        uint64_t t0 = rdtsc();
        /* The last to arrive resets the count, decides whether this was
         * the final round (so every vCPU leaves after the same round) and
         * releases the others by flipping the sense. */
        if (__atomic_add_fetch(&bar.count, 1, __ATOMIC_ACQ_REL) == n) {
            __atomic_store_n(&bar.count, 0, __ATOMIC_RELAXED);
            if (t0 >= run.t_end)
                __atomic_store_n(&bar.stop, 1, __ATOMIC_RELAXED);
            __atomic_store_n(&bar.sense, sense, __ATOMIC_RELEASE);
        } else {
            while (__atomic_load_n(&bar.sense, __ATOMIC_ACQUIRE) != sense)
                cpu_relax();
        }
        spin += rdtsc() - t0;
        rounds++;
        if (__atomic_load_n(&bar.stop, __ATOMIC_ACQUIRE))
            break;
    }
    uint64_t ticks = rdtsc() - run.t_start, rate = per_second(rounds, ticks);
    if (spin > ticks)
        spin = ticks;
    uint64_t spin_ppm = muldiv(spin, 1000000, ticks ? ticks : 1);
    record(c, PACER_KIND_BARRIER_DONE, rounds, ticks, rate, spin, n);
    struct buf b;
    result_head(&b, c, "barrier");
    bs(&b, " participants="); bu(&b, n);
    bs(&b, " rounds="); bu(&b, rounds);
    bs(&b, " rounds_per_s="); bu(&b, rate);
    bs(&b, " spin_ppm="); bu(&b, spin_ppm);
    bs(&b, "\r\n");
    bflush(&b);
}

/* ---- shootdown ---------------------------------------------------------- */
static struct {
    uint64_t gen;            /* the request being answered */
    uint32_t stop;
} __attribute__((aligned(64))) sd;
static struct {
    uint64_t ack;            /* the last request this vCPU answered */
} __attribute__((aligned(64))) sd_ack[MAX_CPUS];

static void shootdown_initiator(struct ucpu *c, uint32_t targets)
{
    uint64_t granules = granules_for(c, ns_to_ticks(cfg.work_us * 1000));
    uint64_t trips = 0, max = 0, gen = 0;
    hist_clear(c);
    /* at least one round trip, however late this vCPU got here */
    while (targets && (trips == 0 || rdtsc() < run.t_end)) {
        do_granules(c, granules);
        gen++;
        __atomic_store_n(&sd.gen, gen, __ATOMIC_SEQ_CST);
        uint64_t t0 = rdtsc();
        for (uint32_t i = c->id + 1; i < cfg.vcpus; i++)
            if (run.role[i] == ROLE_SHOOTDOWN)
                sys(SYS_IPI, i, 0);
        for (uint32_t i = c->id + 1; i < cfg.vcpus; i++)
            if (run.role[i] == ROLE_SHOOTDOWN)
                while (__atomic_load_n(&sd_ack[i].ack, __ATOMIC_ACQUIRE) != gen)
                    cpu_relax();
        uint64_t ns = ticks_to_ns(rdtsc() - t0);
        hist_add(c, ns);
        if (ns > max)
            max = ns;
        trips++;
    }
    __atomic_store_n(&sd.stop, 1, __ATOMIC_SEQ_CST);
    for (uint32_t i = c->id + 1; i < cfg.vcpus; i++)
        if (run.role[i] == ROLE_SHOOTDOWN)
            sys(SYS_IPI, i, 0);
    if (!targets)   /* nobody to ask: sit the run out */
        sys(SYS_SLEEP_UNTIL, run.t_end, 0);
    uint64_t ticks = rdtsc() - run.t_start, rate = per_second(trips, ticks);
    record(c, PACER_KIND_SHOOTDOWN_DONE, trips, ticks, rate, targets, 0);
    struct buf b;
    result_head(&b, c, "shootdown");
    bs(&b, " role=initiator targets="); bu(&b, targets);
    bs(&b, " roundtrips="); bu(&b, trips);
    bs(&b, " roundtrips_per_s="); bu(&b, rate);
    report_latency(c, PACER_METRIC_SHOOTDOWN, trips, max, &b, "");
    bs(&b, "\r\n");
    bflush(&b);
}

/* A sibling keeps working and answers between granules, as an interrupt
 * handler answers between instructions; parked, it answers late. */
static void shootdown_responder(struct ucpu *c, uint32_t initiator)
{
    uint64_t last = 0, acks = 0;
    while (!__atomic_load_n(&sd.stop, __ATOMIC_ACQUIRE)) {
        uint64_t g = __atomic_load_n(&sd.gen, __ATOMIC_ACQUIRE);
        if (g != last) {
            __atomic_store_n(&sd_ack[c->id].ack, g, __ATOMIC_RELEASE);
            last = g;
            acks++;
        }
        c->work_sink = work_iters(&c->work_state, SYNC_GRANULE);
    }
    uint64_t ticks = rdtsc() - run.t_start, rate = per_second(acks, ticks);
    record(c, PACER_KIND_SHOOTDOWN_DONE, acks, ticks, rate, initiator, 1);
    struct buf b;
    result_head(&b, c, "shootdown");
    bs(&b, " role=responder initiator="); bu(&b, initiator);
    bs(&b, " acks="); bu(&b, acks);
    bs(&b, "\r\n");
    bflush(&b);
}

void wl_shootdown(struct ucpu *c)
{
    uint32_t first = c->id, targets = 0;
    for (uint32_t i = 0; i < cfg.vcpus; i++) {
        if (run.role[i] != ROLE_SHOOTDOWN)
            continue;
        if (i < first)
            first = i;
        targets += i != c->id;
    }
    if (first == c->id)
        shootdown_initiator(c, targets);
    else
        shootdown_responder(c, first);
}
