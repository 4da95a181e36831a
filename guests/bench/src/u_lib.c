/* Bench guest ring-3 library: console formatting, result records, TSC
 * arithmetic and the latency histograms (log-linear buckets, layout in
 * pacer_abi.h), shared by the orchestration (u_main.c) and the workloads
 * (u_work.c). Everything here acts on the calling CPU's own state. */
#include "u.h"

struct kvm_steal_time steal_areas[MAX_CPUS];
int steal_on;

uint64_t steal_ns(uint32_t i)
{
    const struct kvm_steal_time *st = &steal_areas[i];
    uint32_t v;
    uint64_t s;
    do {
        v = __atomic_load_n(&st->version, __ATOMIC_ACQUIRE);
        s = __atomic_load_n(&st->steal, __ATOMIC_ACQUIRE);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
    } while ((v & 1) || v != __atomic_load_n(&st->version, __ATOMIC_ACQUIRE));
    return s;
}

/* ---- gcc may emit calls to these ------------------------------------------ */
void *memset(void *d, int c, uint64_t n) { char *p = d; while (n--) *p++ = (char)c; return d; }
void *memcpy(void *d, const void *s, uint64_t n) { char *p = d; const char *q = s; while (n--) *p++ = *q++; return d; }

static uint64_t strlen_(const char *s) { uint64_t n = 0; while (s[n]) n++; return n; }
void con(const char *s) { sys(SYS_WRITE, s, strlen_(s)); }
void marker(int m) { sys(SYS_MARKER, m, 0); }
__attribute__((noreturn)) void sys_exit(int st) { sys(SYS_EXIT, st, 0); for (;;) ; }

/* ---- tiny formatting -------------------------------------------------------- */
void bs(struct buf *b, const char *s) { while (*s && b->n < sizeof b->b - 1) b->b[b->n++] = *s++; }
void bn(struct buf *b, const char *s, unsigned len) { while (len-- && *s && b->n < sizeof b->b - 1) b->b[b->n++] = *s++; }
void bu(struct buf *b, uint64_t v)
{
    char t[24]; int i = 0;
    do { t[i++] = (char)('0' + v % 10); v /= 10; } while (v);
    while (i && b->n < sizeof b->b - 1) b->b[b->n++] = t[--i];
}
void bflush(struct buf *b) { sys(SYS_WRITE, b->b, b->n); b->n = 0; }

int keyis(const char *k, unsigned kl, const char *want)
{
    unsigned i = 0;
    for (; i < kl; i++)
        if (want[i] != k[i])
            return 0;
    return want[i] == 0;
}

/* ---- records ----------------------------------------------------------------- */
void record(struct ucpu *c, uint16_t kind, uint64_t v0, uint64_t v1, uint64_t v2, uint64_t v3,
            uint64_t v4)
{
    struct pacer_record r __attribute__((aligned(64)));
    r.magic = PACER_RECORD_MAGIC;
    r.version = PACER_RECORD_VERSION;
    r.kind = kind;
    r.vcpu = c->id;
    r.seq = c->seq++;
    r.tsc = rdtsc();
    r.v[0] = v0; r.v[1] = v1; r.v[2] = v2; r.v[3] = v3; r.v[4] = v4;
    sys(SYS_RECORD, &r, 0);
}

void record_error(struct ucpu *c, uint64_t code, const char *name, unsigned name_len,
                  uint64_t detail)
{
    uint64_t v[3] = { 0, 0, 0 };
    for (unsigned i = 0; i < name_len && i < 24 && name[i]; i++)
        v[i / 8] |= (uint64_t)(uint8_t)name[i] << (8 * (i % 8));
    record(c, PACER_KIND_ERROR, code, v[0], v[1], v[2], detail);
}

/* ---- TSC arithmetic ------------------------------------------------------------ */
/* a * b / c with a 128-bit intermediate (no libgcc: one MUL, one DIV) */
uint64_t muldiv(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t hi, lo, q, r;
    if (!c)
        return 0;
    __asm__("mulq %3" : "=a"(lo), "=d"(hi) : "a"(a), "rm"(b));
    if (hi >= c)
        return ~0ull;
    __asm__("divq %4" : "=a"(q), "=d"(r) : "a"(lo), "d"(hi), "rm"(c));
    return q;
}

uint64_t ticks_to_ns(uint64_t ticks) { return muldiv(ticks, 1000000, cfg.tsc_khz); }
uint64_t ns_to_ticks(uint64_t ns) { return muldiv(ns, cfg.tsc_khz, 1000000); }
uint64_t per_second(uint64_t count, uint64_t ticks) { return muldiv(count, cfg.tsc_khz * 1000, ticks); }

/* ---- histograms -------------------------------------------------------------------- */
void hist_clear(struct ucpu *c)
{
    for (unsigned i = 0; i < PACER_HIST_BUCKETS; i++)
        c->hist[i] = 0;
}

static unsigned hist_bucket(uint64_t v)
{
    if (v < PACER_HIST_SUB)
        return (unsigned)v;
    if (v >> PACER_HIST_TOP_BIT)
        return PACER_HIST_BUCKETS - 1;
    unsigned e = 63 - (unsigned)__builtin_clzll(v);
    return PACER_HIST_SUB * (e - (PACER_HIST_SUB_BITS - 1)) +
           (unsigned)((v >> (e - PACER_HIST_SUB_BITS)) & (PACER_HIST_SUB - 1));
}

/* largest value in bucket b */
static uint64_t hist_top(unsigned b)
{
    if (b < PACER_HIST_SUB)
        return b;
    if (b >= PACER_HIST_BUCKETS - 1)
        return ~0ull;
    unsigned e = b / PACER_HIST_SUB + (PACER_HIST_SUB_BITS - 1), m = b % PACER_HIST_SUB;
    return ((uint64_t)(PACER_HIST_SUB + 1 + m) << (e - PACER_HIST_SUB_BITS)) - 1;
}

void hist_add(struct ucpu *c, uint64_t ns)
{
    uint32_t *h = &c->hist[hist_bucket(ns)];
    if (*h != 0xFFFFFFFFu)
        (*h)++;
}

uint64_t hist_quantile(const struct ucpu *c, uint64_t count, uint64_t num, uint64_t den,
                       uint64_t max)
{
    if (!count)
        return 0;
    uint64_t rank = (count * num + den - 1) / den, seen = 0;
    if (!rank)
        rank = 1;
    for (unsigned b = 0; b < PACER_HIST_BUCKETS; b++) {
        seen += c->hist[b];
        if (seen >= rank) {
            uint64_t top = hist_top(b);
            return top < max ? top : max;
        }
    }
    return max;
}

void report_latency(struct ucpu *c, uint64_t metric, uint64_t count, uint64_t max,
                    struct buf *b, const char *prefix)
{
    uint64_t p50 = hist_quantile(c, count, 50, 100, max);
    uint64_t p99 = hist_quantile(c, count, 99, 100, max);
    uint64_t p999 = hist_quantile(c, count, 999, 1000, max);
    record(c, PACER_KIND_LATENCY, metric, count, p50, p99, max);
    uint64_t pairs[PACER_HIST_PAIRS];
    unsigned n = 0;
    for (unsigned i = 0; i < PACER_HIST_BUCKETS; i++) {
        if (!c->hist[i])
            continue;
        pairs[n++] = ((uint64_t)i << PACER_HIST_COUNT_BITS) | c->hist[i];
        if (n == PACER_HIST_PAIRS) {
            record(c, PACER_KIND_HISTOGRAM, metric | ((uint64_t)n << 16), pairs[0], pairs[1],
                   pairs[2], pairs[3]);
            n = 0;
        }
    }
    if (n) {
        for (unsigned i = n; i < PACER_HIST_PAIRS; i++)
            pairs[i] = 0;
        record(c, PACER_KIND_HISTOGRAM, metric | ((uint64_t)n << 16), pairs[0], pairs[1],
               pairs[2], pairs[3]);
    }
    bs(b, " "); bs(b, prefix); bs(b, "p50_ns="); bu(b, p50);
    bs(b, " "); bs(b, prefix); bs(b, "p99_ns="); bu(b, p99);
    bs(b, " "); bs(b, prefix); bs(b, "p999_ns="); bu(b, p999);
    bs(b, " "); bs(b, prefix); bs(b, "max_ns="); bu(b, max);
}
