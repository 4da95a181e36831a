/* Bench guest workload `server` (schbench-like, ring 3): requests arrive
 * open-loop at the lowest `server` vCPU, the dispatcher, with Poisson
 * inter-arrival times at `rate` requests/s (a seeded PRNG, so the same
 * seed gives the same arrival schedule); it hands each to the worker
 * vCPU with the shortest queue and wakes that worker by IPI if it is
 * idle. A worker serves a request with `work_us` of work (optionally
 * inside a lock shared by all workers, and touching `touch_kib` KiB of
 * shared memory). A request's latency runs from its *intended* arrival
 * time to the end of its service: queueing + the dispatcher's and the
 * worker's wake-ups + service, with no coordinated omission (a late
 * dispatcher does not move arrivals). After the last arrival (run end or
 * `wakes` requests) the workers drain their queues; the dispatcher then
 * merges their histograms and reports the VM's throughput and request
 * latency (SERVER_DONE, LATENCY + HISTOGRAM metric 8, and a console line).
 * With one `server` vCPU the dispatcher serves the requests itself. */
#include "u.h"
#include "work.h"

#define QUEUE_LEN 256u             /* per worker; a full queue drops the request */
#define TOUCH_MAX_KIB 256
#define SERVER_GRANULE 256         /* work iterations per granule (~0.5 us) */

struct queue {
    uint64_t head __attribute__((aligned(64)));   /* consumer (the worker) */
    uint64_t tail __attribute__((aligned(64)));   /* producer (the dispatcher) */
    uint32_t idle;                                /* the worker is about to halt */
    uint64_t slot[QUEUE_LEN];                     /* intended arrival TSCs */
} __attribute__((aligned(64)));

struct worker_result {
    uint64_t served, max_ns, last_done;
} __attribute__((aligned(64)));

static struct queue queues[MAX_CPUS];
static struct worker_result results[MAX_CPUS];
static uint32_t stop, finished;
static uint32_t lock_word;
static uint8_t touch_area[TOUCH_MAX_KIB * 1024] __attribute__((aligned(64)));

/* splitmix64: the arrival stream, seeded by `seed` */
static uint64_t next_random(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ln(x) for x in (0, 1]: x = m 2^e with m in [1, 2), ln m by the atanh
 * series (|s| <= 1/3, error < 1e-7); ring 3 has no libm */
static double ln_unit(double x)
{
    int e = 0;
    while (x < 1.0) {
        x *= 2.0;
        e--;
    }
    double s = (x - 1.0) / (x + 1.0), s2 = s * s, term = s, sum = 0.0;
    for (int k = 1; k <= 15; k += 2) {
        sum += term / k;
        term *= s2;
    }
    return 2.0 * sum + e * 0.69314718055994530942;
}

/* one exponential inter-arrival time in ticks at `rate` per second */
static uint64_t interarrival(uint64_t *s, uint64_t rate)
{
    /* u in (0, 1]: 53 random bits, never 0 */
    double u = (double)((next_random(s) >> 11) + 1) * (1.0 / 9007199254740992.0);
    double ticks = -ln_unit(u) * (double)cfg.tsc_khz * 1000.0 / (double)rate;
    return ticks < 1.0 ? 1 : (uint64_t)ticks;
}

/* granules of work per work_us: the fastest of 5 samples (least disturbed) */
static uint64_t calibrate(struct ucpu *c)
{
    uint64_t best = ~0ull;
    for (int i = 0; i < 5; i++) {
        uint64_t t0 = rdtsc();
        for (int g = 0; g < 8; g++)
            c->work_sink = work_iters(&c->work_state, SERVER_GRANULE);
        uint64_t t = rdtsc() - t0;
        if (t < best)
            best = t;
    }
    uint64_t per = best / 8 ? best / 8 : 1, run = ns_to_ticks(cfg.work_us * 1000);
    return (run + per / 2) / per;
}

static void serve(struct ucpu *c, uint64_t granules, uint64_t arrival)
{
    if (cfg.server_lock)
        while (__atomic_exchange_n(&lock_word, 1, __ATOMIC_ACQUIRE))
            while (__atomic_load_n(&lock_word, __ATOMIC_RELAXED))
                cpu_relax();
    for (uint64_t g = 0; g < granules; g++)
        c->work_sink = work_iters(&c->work_state, SERVER_GRANULE);
    /* one write per cache line: lines bounce between the workers */
    for (uint64_t i = 0; i < cfg.touch_kib * 1024; i += 64)
        __atomic_store_n(&touch_area[i], (uint8_t)(touch_area[i] + 1), __ATOMIC_RELAXED);
    if (cfg.server_lock)
        __atomic_store_n(&lock_word, 0, __ATOMIC_RELEASE);
    uint64_t done = rdtsc(), ns = ticks_to_ns(done - arrival);
    struct worker_result *r = &results[c->id];
    hist_add(c, ns);
    r->served++;
    if (ns > r->max_ns)
        r->max_ns = ns;
    r->last_done = done;
}

static void worker(struct ucpu *c, uint32_t dispatcher)
{
    struct queue *q = &queues[c->id];
    uint64_t granules = calibrate(c);
    uint64_t seen = (uint64_t)sys(SYS_IRQ_COUNT, IRQ_IPI, 0);
    hist_clear(c);
    for (;;) {
        uint64_t head = q->head;
        if (head != __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE)) {
            serve(c, granules, q->slot[head % QUEUE_LEN]);
            __atomic_store_n(&q->head, head + 1, __ATOMIC_RELEASE);
            continue;
        }
        if (__atomic_load_n(&stop, __ATOMIC_ACQUIRE))
            break;
        /* Say we halt, then look again: the dispatcher stores the request
         * before it reads `idle`, so one of us sees the other. */
        __atomic_store_n(&q->idle, 1, __ATOMIC_SEQ_CST);
        if (head == __atomic_load_n(&q->tail, __ATOMIC_SEQ_CST) &&
            !__atomic_load_n(&stop, __ATOMIC_SEQ_CST))
            seen = (uint64_t)sys(SYS_WAIT_IPI, seen, 0);
        __atomic_store_n(&q->idle, 0, __ATOMIC_RELAXED);
    }
    struct buf b;
    b.n = 0;
    bs(&b, "pacer-result vcpu="); bu(&b, c->id);
    bs(&b, " workload=server role=worker served="); bu(&b, results[c->id].served);
    bs(&b, "\r\n");
    bflush(&b);
    __atomic_fetch_add(&finished, 1, __ATOMIC_SEQ_CST);
    sys(SYS_IPI, dispatcher, 0);
}

/* the worker with the shortest queue, ties to the one after `last` */
static uint32_t pick(const uint32_t *w, uint32_t n, uint32_t *last)
{
    uint32_t best = 0;
    uint64_t best_len = ~0ull;
    for (uint32_t k = 1; k <= n; k++) {
        uint32_t i = (*last + k) % n;
        struct queue *q = &queues[w[i]];
        uint64_t len = __atomic_load_n(&q->tail, __ATOMIC_RELAXED) -
                       __atomic_load_n(&q->head, __ATOMIC_ACQUIRE);
        if (len < best_len) {
            best_len = len;
            best = i;
        }
    }
    *last = best;
    return best;
}

static void dispatcher(struct ucpu *c)
{
    uint32_t w[MAX_CPUS], n = 0;
    for (uint32_t i = 0; i < cfg.vcpus; i++)
        if (i != c->id && run.role[i] == ROLE_SERVER)
            w[n++] = i;
    uint64_t granules = n ? 0 : calibrate(c);
    uint64_t rng = cfg.seed, offered = 0, dropped = 0;
    uint32_t last = 0;
    hist_clear(c);
    uint64_t next = run.t_start + interarrival(&rng, cfg.rate);
    while (next <= run.t_end && (!cfg.wakes || offered < cfg.wakes)) {
        if (rdtsc() < next)
            sys(SYS_SLEEP_UNTIL, next, 0);
        uint64_t now = rdtsc();
        /* every arrival due by now, each with its intended time */
        while (next <= now && next <= run.t_end && (!cfg.wakes || offered < cfg.wakes)) {
            offered++;
            if (!n) {
                serve(c, granules, next);
            } else {
                struct queue *q = &queues[w[pick(w, n, &last)]];
                uint64_t tail = q->tail;
                if (tail - __atomic_load_n(&q->head, __ATOMIC_ACQUIRE) >= QUEUE_LEN) {
                    dropped++;
                } else {
                    q->slot[tail % QUEUE_LEN] = next;
                    __atomic_store_n(&q->tail, tail + 1, __ATOMIC_SEQ_CST);
                    if (__atomic_load_n(&q->idle, __ATOMIC_SEQ_CST))
                        sys(SYS_IPI, w[last], 0);
                }
            }
            next += interarrival(&rng, cfg.rate);
        }
    }
    /* Drain: the workers serve what is queued, then check in. */
    uint64_t seen = (uint64_t)sys(SYS_IRQ_COUNT, IRQ_IPI, 0);
    __atomic_store_n(&stop, 1, __ATOMIC_SEQ_CST);
    for (uint32_t k = 0; k < n; k++)
        sys(SYS_IPI, w[k], 0);
    while (__atomic_load_n(&finished, __ATOMIC_ACQUIRE) < n)
        seen = (uint64_t)sys(SYS_WAIT_IPI, seen, 0);

    /* The VM's figures: every worker's histogram merged into this one. */
    struct worker_result *mine = &results[c->id];
    uint64_t served = mine->served, max = mine->max_ns, last_done = mine->last_done;
    for (uint32_t k = 0; k < n; k++) {
        struct worker_result *r = &results[w[k]];
        for (unsigned b = 0; b < PACER_HIST_BUCKETS; b++) {
            uint64_t sum = (uint64_t)c->hist[b] + ucpus[w[k]].hist[b];
            c->hist[b] = sum > 0xFFFFFFFFu ? 0xFFFFFFFFu : (uint32_t)sum;
        }
        served += r->served;
        if (r->max_ns > max)
            max = r->max_ns;
        if (r->last_done > last_done)
            last_done = r->last_done;
    }
    uint64_t ticks = last_done > run.t_start ? last_done - run.t_start : 0;
    uint64_t per_s = ticks ? per_second(served, ticks) : 0;
    record(c, PACER_KIND_SERVER_DONE, served, ticks, per_s, offered, dropped);
    struct buf b;
    b.n = 0;
    bs(&b, "pacer-result vcpu="); bu(&b, c->id);
    bs(&b, " workload=server role=dispatcher workers="); bu(&b, n);
    bs(&b, " requests="); bu(&b, served);
    bs(&b, " offered="); bu(&b, offered);
    bs(&b, " dropped="); bu(&b, dropped);
    bs(&b, " requests_per_s="); bu(&b, per_s);
    report_latency(c, PACER_METRIC_SERVER_REQUEST, served, max, &b, "request_");
    bs(&b, "\r\n");
    bflush(&b);
}

void wl_server(struct ucpu *c)
{
    uint32_t first = 0;
    while (first < cfg.vcpus && run.role[first] != ROLE_SERVER)
        first++;
    if (c->id == first)
        dispatcher(c);
    else
        worker(c, first);
}
