/* Bench guest workloads (ring 3, run natively). Parses the command line,
 * then runs the selected workload and reports through system calls. */
#include <stdint.h>
#include "pacer_abi.h"
#include "guest.h"
#include "work.h"

/* ---- system calls: `ud2` traps to the kernel (see k_entry.S ud_entry) ------ */
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

static uint64_t strlen_(const char *s) { uint64_t n = 0; while (s[n]) n++; return n; }
static void con(const char *s) { sys(SYS_WRITE, s, strlen_(s)); }
static void marker(int m) { sys(SYS_MARKER, m, 0); }
static __attribute__((noreturn)) void sys_exit(int st) { sys(SYS_EXIT, st, 0); for (;;) ; }

static inline uint64_t rdtsc(void)
{
    uint32_t lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
}

/* ---- gcc may emit calls to these --------------------------------------- */
void *memset(void *d, int c, uint64_t n) { char *p = d; while (n--) *p++ = (char)c; return d; }
void *memcpy(void *d, const void *s, uint64_t n) { char *p = d; const char *q = s; while (n--) *p++ = *q++; return d; }

/* ---- tiny formatting ------------------------------------------------------ */
struct buf { char b[512]; unsigned n; };
static void bs(struct buf *b, const char *s) { while (*s && b->n < sizeof b->b - 1) b->b[b->n++] = *s++; }
static void bn(struct buf *b, const char *s, unsigned len) { while (len-- && *s && b->n < sizeof b->b - 1) b->b[b->n++] = *s++; }
static void bu(struct buf *b, uint64_t v)
{
    char t[24]; int i = 0;
    do { t[i++] = (char)('0' + v % 10); v /= 10; } while (v);
    while (i && b->n < sizeof b->b - 1) b->b[b->n++] = t[--i];
}
static void bflush(struct buf *b) { sys(SYS_WRITE, b->b, b->n); b->n = 0; }

/* ---- records -------------------------------------------------------------- */
static uint32_t seq;
static void record(uint16_t kind, uint64_t v0, uint64_t v1, uint64_t v2, uint64_t v3, uint64_t v4)
{
    struct pacer_record r __attribute__((aligned(64)));
    r.magic = PACER_RECORD_MAGIC;
    r.version = PACER_RECORD_VERSION;
    r.kind = kind;
    r.vcpu = 0;
    r.seq = seq++;
    r.tsc = rdtsc();
    r.v[0] = v0; r.v[1] = v1; r.v[2] = v2; r.v[3] = v3; r.v[4] = v4;
    sys(SYS_RECORD, &r, 0);
}

/* ---- command line --------------------------------------------------------- */
static struct {
    const char *workload; unsigned workload_len;
    uint64_t duration_ms, report_ms, tsc_khz, vcpus;
} cfg = { "cpu", 3, 1000, 100, 0, 1 };

static int keyis(const char *k, unsigned kl, const char *want)
{
    unsigned i = 0;
    for (; i < kl; i++)
        if (want[i] != k[i])
            return 0;
    return want[i] == 0;
}

static uint64_t parse_u(const char *v, unsigned vl, int *ok)
{
    uint64_t x = 0;
    *ok = vl > 0;
    for (unsigned i = 0; i < vl; i++) {
        if (v[i] < '0' || v[i] > '9') { *ok = 0; return 0; }
        x = x * 10 + (uint64_t)(v[i] - '0');
    }
    return x;
}

static void parse_cmdline(const char *s, unsigned len)
{
    struct buf unk = { .n = 0 };
    int n_unk = 0;
    unsigned i = 0;
    while (i < len && s[i]) {
        while (i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n')) i++;
        unsigned t0 = i;
        while (i < len && s[i] && s[i] != ' ' && s[i] != '\t' && s[i] != '\n') i++;
        if (i == t0) break;
        const char *k = s + t0, *v = k;
        unsigned kl = 0, vl = 0;
        while (t0 + kl < i && k[kl] != '=') kl++;
        if (t0 + kl < i) { v = k + kl + 1; vl = i - t0 - kl - 1; }
        int ok = 1;
        uint64_t x;
        if (keyis(k, kl, "workload")) { cfg.workload = v; cfg.workload_len = vl; }
        else if (keyis(k, kl, "duration_ms")) { x = parse_u(v, vl, &ok); if (ok) cfg.duration_ms = x; }
        else if (keyis(k, kl, "report_ms")) { x = parse_u(v, vl, &ok); if (ok && x) cfg.report_ms = x; }
        else if (keyis(k, kl, "tsc_khz")) { x = parse_u(v, vl, &ok); if (ok) cfg.tsc_khz = x; }
        else if (keyis(k, kl, "vcpus")) { x = parse_u(v, vl, &ok); if (ok && x) cfg.vcpus = x; }
        else { bs(&unk, " "); bn(&unk, k, i - t0); n_unk++; }
        if (!ok) { bs(&unk, " (bad)"); bn(&unk, k, i - t0); n_unk++; }
    }
    if (n_unk) {
        struct buf b = { .n = 0 };
        bs(&b, "pacer-bench: ignored:");
        bn(&b, unk.b, unk.n);
        bs(&b, "\r\n");
        bflush(&b);
    }
}

static uint64_t cpuid_tsc_khz(void)
{
    uint32_t a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0));
    uint32_t max = a;
    if (max >= 0x15) {
        __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x15), "c"(0));
        if (a && b && c)
            return (uint64_t)c * b / a / 1000;
    }
    if (max >= 0x16) {
        __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x16), "c"(0));
        if (a & 0xffff)
            return (uint64_t)(a & 0xffff) * 1000;
    }
    return 2000000;
}

/* a * b / c with a 128-bit intermediate (no libgcc: one MUL, one DIV) */
static uint64_t muldiv(uint64_t a, uint64_t b, uint64_t c)
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

/* ---- workloads ------------------------------------------------------------ */
static __attribute__((noreturn)) void wl_cpu(void)
{
    uint64_t khz = cfg.tsc_khz;
    uint64_t report = cfg.report_ms * khz, dur = cfg.duration_ms * khz;
    uint64_t units = 0, last_units = 0;
    marker(PACER_MARKER_WORKLOAD_START);
    uint64_t t0 = rdtsc(), last = t0, next = t0 + report, end = t0 + dur, now;
    for (;;) {
        work_unit();
        units++;
        now = rdtsc();
        if (now >= next) {
            record(PACER_KIND_WORK_SAMPLE, units - last_units, now - last, units, now - t0, 0);
            last_units = units;
            last = now;
            next += report;
            if (next <= now)
                next = now + report;
        }
        if (now >= end)
            break;
    }
    uint64_t ticks = now - t0;
    uint64_t ups = muldiv(units, khz * 1000, ticks);
    record(PACER_KIND_WORK_DONE, units, ticks, ups, 0, 0);
    struct buf b = { .n = 0 };
    bs(&b, "pacer-bench: cpu done units="); bu(&b, units);
    bs(&b, " ticks="); bu(&b, ticks);
    bs(&b, " units_per_s="); bu(&b, ups);
    bs(&b, " irqs="); bu(&b, (uint64_t)sys(SYS_IRQ_COUNT, 0, 0));
    bs(&b, "\r\n");
    bflush(&b);
    marker(PACER_MARKER_WORKLOAD_DONE);
    sys_exit(0);
}

static const char text_meta[] = "guest=pacer-bench abi=1 work_iters=2048";

__attribute__((noreturn)) void umain(struct boot_info *bi)
{
    parse_cmdline(bi->cmdline, bi->cmdline_len);
    if (!cfg.tsc_khz) {
        cfg.tsc_khz = cpuid_tsc_khz();
        con("pacer-bench: no tsc_khz= on the command line, using CPUID\r\n");
    }
    uint64_t ram = 0;
    for (uint32_t i = 0; i < bi->e820_n; i++)
        if (bi->e820[i].type == E820_RAM)
            ram += bi->e820[i].size;

    struct buf b = { .n = 0 };
    bs(&b, "pacer-bench: workload="); bn(&b, cfg.workload, cfg.workload_len);
    bs(&b, " duration_ms="); bu(&b, cfg.duration_ms);
    bs(&b, " report_ms="); bu(&b, cfg.report_ms);
    bs(&b, " tsc_khz="); bu(&b, cfg.tsc_khz);
    bs(&b, " vcpus="); bu(&b, cfg.vcpus);
    bs(&b, " ram_mib="); bu(&b, ram >> 20);
    bs(&b, "\r\n");
    bflush(&b);
    record(PACER_KIND_TEXT, (uint64_t)(uintptr_t)text_meta, sizeof text_meta - 1, 0, 0, 0);

    const char *w = cfg.workload;
    unsigned wl = cfg.workload_len;
    if (keyis(w, wl, "cpu"))
        wl_cpu();
    if (keyis(w, wl, "boot")) {
        marker(PACER_MARKER_WORKLOAD_START);
        record(PACER_KIND_BOOT_TIMES, bi->tsc_first, bi->tsc_ready, 0, 0, 0);
        marker(PACER_MARKER_WORKLOAD_DONE);
        sys_exit(0);
    }
    if (keyis(w, wl, "triple_fault")) {
        con("pacer-bench: triple-faulting on purpose\r\n");
        sys(SYS_TRIPLE_FAULT, 0, 0);
    }
    if (keyis(w, wl, "idle")) {
        con("pacer-bench: idle (cli; hlt forever)\r\n");
        marker(PACER_MARKER_WORKLOAD_START);
        sys(SYS_IDLE, 0, 0);
    }
    if (keyis(w, wl, "panic")) {
        con("pacer-bench: touching unmapped memory on purpose\r\n");
        *(volatile uint64_t *)(uintptr_t)0x7f0000000000ull = 1;  /* #PF -> kernel panic */
    }
    con("pacer-bench: unknown workload\r\n");
    record(PACER_KIND_ERROR, 1, 0, 0, 0, 0);
    sys_exit(2);
}
