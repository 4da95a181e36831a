/* Bench guest ring-3 main: the boot CPU (umain) parses and validates the
 * command line, enables the local APICs (SYS_APIC_INIT), starts the APs one
 * by one (SYS_AP_START, then waits for the AP to check in, with a timeout),
 * gives every CPU its workload, releases them together (`go` + an IPI each)
 * and waits until all have finished (`done` + an IPI each) before it
 * reports WORKLOAD_DONE and exits. APs enter at uap_main. */
#include "u.h"
#include "work.h"

struct cfg cfg;
struct ucpu ucpus[MAX_CPUS];
struct run run;

/* AP check-in: the BSP sets BOOTING before it starts an AP; the AP moves
 * it to ONLINE, or the BSP to ABANDONED on timeout, whichever comes first
 * (compare-and-swap), so a late AP never joins a run that gave up on it. */
enum { CPU_OFF, CPU_BOOTING, CPU_ONLINE, CPU_ABANDONED };
static uint32_t cpu_state[MAX_CPUS];
static uint32_t go;
static uint32_t done;

#define AP_TIMEOUT_MS 1000
#define MAX_MS        86400000ull      /* one day */
#define MAX_US        10000000ull      /* 10 s */
#define MAX_NS        1000000000ull    /* 1 s */
#define MAX_WAKES     1000000000ull

/* ---- command line ---------------------------------------------------------- */
static int bad_input;

static void param_error(const char *key, const char *v, unsigned vl, const char *want)
{
    struct buf b = { .n = 0 };
    bs(&b, "pacer-bench: error: bad value for ");
    bs(&b, key);
    bs(&b, ": \"");
    bn(&b, v, vl);
    bs(&b, "\" (want ");
    bs(&b, want);
    bs(&b, ")\r\n");
    bflush(&b);
    unsigned kl = 0;
    while (key[kl])
        kl++;
    record_error(&ucpus[0], PACER_ERR_BAD_PARAM, key, kl, 0);
    bad_input = 1;
}

/* An unsigned decimal in [min, max]: digits only, no sign, no overflow. */
static void num(const char *key, const char *v, unsigned vl, uint64_t min, uint64_t max,
                const char *want, uint64_t *out)
{
    uint64_t x = 0;
    int ok = vl > 0 && vl <= 20;
    for (unsigned i = 0; ok && i < vl; i++) {
        if (v[i] < '0' || v[i] > '9' || x > (~0ull - 9) / 10)
            ok = 0;
        else
            x = x * 10 + (uint64_t)(v[i] - '0');
    }
    if (!ok || x < min || x > max)
        param_error(key, v, vl, want);
    else
        *out = x;
}

static int role_of(const char *w, unsigned wl)
{
    if (keyis(w, wl, "cpu")) return ROLE_CPU;
    if (keyis(w, wl, "sleep")) return ROLE_SLEEP;
    if (keyis(w, wl, "pingpong")) return ROLE_PINGPONG;
    if (keyis(w, wl, "burst")) return ROLE_BURST;
    if (keyis(w, wl, "spinlock")) return ROLE_SPINLOCK;
    if (keyis(w, wl, "barrier")) return ROLE_BARRIER;
    if (keyis(w, wl, "shootdown")) return ROLE_SHOOTDOWN;
    if (keyis(w, wl, "server")) return ROLE_SERVER;
    return ROLE_NONE;
}

static uint64_t ap_skip;       /* test knob: never start this AP (0: none) */
static const char *mixed_v;
static unsigned mixed_vl;
static int vcpus_too_many;

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
        if (keyis(k, kl, "workload")) { cfg.workload = v; cfg.workload_len = vl; }
        else if (keyis(k, kl, "duration_ms")) num("duration_ms", v, vl, 1, MAX_MS, "1..86400000", &cfg.duration_ms);
        else if (keyis(k, kl, "report_ms")) num("report_ms", v, vl, 1, MAX_MS, "1..86400000", &cfg.report_ms);
        else if (keyis(k, kl, "tsc_khz")) num("tsc_khz", v, vl, 1, 100000000, "1..100000000", &cfg.tsc_khz);
        else if (keyis(k, kl, "vcpus")) {
            uint64_t x = 0;
            num("vcpus", v, vl, 1, ~0ull, "1..254", &x);
            vcpus_too_many = x > MAX_CPUS;     /* the last vcpus= counts */
            if (x && x <= MAX_CPUS) cfg.vcpus = x;
        }
        else if (keyis(k, kl, "interval_us")) num("interval_us", v, vl, 1, MAX_US, "1..10000000", &cfg.interval_us);
        else if (keyis(k, kl, "period_us")) num("period_us", v, vl, 1, MAX_US, "1..10000000", &cfg.period_us);
        else if (keyis(k, kl, "run_us")) num("run_us", v, vl, 1, MAX_US, "1..10000000, at most period_us", &cfg.run_us);
        else if (keyis(k, kl, "wakes")) num("wakes", v, vl, 1, MAX_WAKES, "1..1000000000", &cfg.wakes);
        else if (keyis(k, kl, "rate")) num("rate", v, vl, 1, 10000000, "1..10000000", &cfg.rate);
        else if (keyis(k, kl, "seed")) num("seed", v, vl, 0, 4294967295ull, "0..4294967295", &cfg.seed);
        else if (keyis(k, kl, "touch_kib")) num("touch_kib", v, vl, 0, 256, "0..256", &cfg.touch_kib);
        else if (keyis(k, kl, "lock")) {
            if (keyis(v, vl, "on")) cfg.server_lock = 1;
            else if (keyis(v, vl, "off")) cfg.server_lock = 0;
            else param_error("lock", v, vl, "on or off");
        }
        else if (keyis(k, kl, "cs_ns")) num("cs_ns", v, vl, 0, MAX_NS, "0..1000000000", &cfg.cs_ns);
        else if (keyis(k, kl, "gap_ns")) num("gap_ns", v, vl, 0, MAX_NS, "0..1000000000", &cfg.gap_ns);
        else if (keyis(k, kl, "work_us")) num("work_us", v, vl, 0, MAX_US, "0..10000000", &cfg.work_us);
        else if (keyis(k, kl, "apic")) {
            if (keyis(v, vl, "x2apic")) cfg.x2apic = 1;
            else if (keyis(v, vl, "xapic")) cfg.x2apic = 0;
            else param_error("apic", v, vl, "x2apic or xapic");
        }
        else if (keyis(k, kl, "pv_eoi")) {
            if (keyis(v, vl, "on")) cfg.pv_eoi = 1;
            else if (keyis(v, vl, "off")) cfg.pv_eoi = 0;
            else param_error("pv_eoi", v, vl, "on or off");
        }
        else if (keyis(k, kl, "steal")) {
            if (keyis(v, vl, "on")) cfg.steal = 1;
            else if (keyis(v, vl, "off")) cfg.steal = 0;
            else param_error("steal", v, vl, "on or off");
        }
        else if (keyis(k, kl, "pv_spin")) {
            if (keyis(v, vl, "on")) cfg.pv_spin = 1;
            else if (keyis(v, vl, "off")) cfg.pv_spin = 0;
            else param_error("pv_spin", v, vl, "on or off");
        }
        else if (keyis(k, kl, "timer")) {
            if (keyis(v, vl, "deadline")) cfg.deadline = 1;
            else if (keyis(v, vl, "oneshot")) cfg.deadline = 0;
            else param_error("timer", v, vl, "deadline or oneshot");
        }
        else if (keyis(k, kl, "mixed")) { mixed_v = v; mixed_vl = vl; }
        else if (keyis(k, kl, "flood_kib")) num("flood_kib", v, vl, 0, 1048576, "0..1048576", &cfg.flood_kib);
        else if (keyis(k, kl, "flood_records")) num("flood_records", v, vl, 0, 100000000, "0..100000000", &cfg.flood_records);
        else if (keyis(k, kl, "random_ports")) num("random_ports", v, vl, 0, 100000000, "0..100000000", &cfg.random_ports);
        else if (keyis(k, kl, "random_mmio")) num("random_mmio", v, vl, 0, 100000000, "0..100000000", &cfg.random_mmio);
        else if (keyis(k, kl, "ap_skip")) num("ap_skip", v, vl, 1, MAX_CPUS - 1, "1..253", &ap_skip);
        else { bs(&unk, " "); bn(&unk, k, i - t0); n_unk++; }
    }
    if (n_unk) {
        struct buf b = { .n = 0 };
        bs(&b, "pacer-bench: ignored:");
        bn(&b, unk.b, unk.n);
        bs(&b, "\r\n");
        bflush(&b);
    }
}

/* Checks that need several keys; runs after parse_cmdline. */
static void check_cmdline(void)
{
    if (vcpus_too_many) {
        struct buf b = { .n = 0 };
        bs(&b, "pacer-bench: error: vcpus exceeds the maximum of ");
        bu(&b, MAX_CPUS);
        bs(&b, "\r\n");
        bflush(&b);
        record_error(&ucpus[0], PACER_ERR_TOO_MANY_VCPUS, "vcpus", 5, MAX_CPUS);
        bad_input = 1;
    }
    if (cfg.run_us > cfg.period_us) {
        struct buf v = { .n = 0 };
        bu(&v, cfg.run_us);
        param_error("run_us", v.b, v.n, "at most period_us");
    }
    if (keyis(cfg.workload, cfg.workload_len, "mixed")) {
        /* one entry per vCPU: cpu, sleep, pingpong, burst or spinlock */
        unsigned n = 0, i = 0;
        int ok = mixed_v != 0;
        while (ok && i <= mixed_vl) {
            unsigned t0 = i;
            while (i < mixed_vl && mixed_v[i] != ',') i++;
            int r = role_of(mixed_v + t0, i - t0);
            if (r == ROLE_NONE || r > ROLE_LAST_MIXABLE || n >= cfg.vcpus)
                ok = 0;
            else
                cfg.mixed[n++] = (uint8_t)r;
            i++;
        }
        if (!ok || n != cfg.vcpus)
            param_error("mixed", mixed_v ? mixed_v : "", mixed_v ? mixed_vl : 0,
                        "one of cpu,sleep,pingpong,burst,spinlock per vCPU, comma-separated");
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

/* ---- SMP ------------------------------------------------------------------------ */
/* Halt (LAPIC timer) for a short while: lets a booting AP have the host
 * CPU when vCPUs share one. */
static void nap_us(uint64_t us)
{
    sys(SYS_SLEEP_UNTIL, rdtsc() + ns_to_ticks(us * 1000), 0);
}

/* Start APs 1..vcpus-1 one after the other; returns how many failed. */
static unsigned start_aps(struct ucpu *c)
{
    unsigned failed = 0;
    uint64_t timeout = ns_to_ticks(AP_TIMEOUT_MS * 1000000ull);
    marker(PACER_MARKER_SMP_START);
    for (uint32_t i = 1; i < cfg.vcpus; i++) {
        __atomic_store_n(&cpu_state[i], CPU_BOOTING, __ATOMIC_SEQ_CST);
        uint64_t t0 = rdtsc();
        if (i != ap_skip)
            sys(SYS_AP_START, i, 0);
        while (__atomic_load_n(&cpu_state[i], __ATOMIC_ACQUIRE) == CPU_BOOTING &&
               rdtsc() - t0 < timeout)
            nap_us(20);
        uint32_t want = CPU_BOOTING;
        if (__atomic_compare_exchange_n(&cpu_state[i], &want, CPU_ABANDONED, 0,
                                        __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
            struct buf b = { .n = 0 };
            bs(&b, "pacer-bench: error: vCPU "); bu(&b, i);
            bs(&b, " did not start within "); bu(&b, AP_TIMEOUT_MS);
            bs(&b, " ms; continuing without it\r\n");
            bflush(&b);
            record_error(c, PACER_ERR_AP_TIMEOUT, "ap", 2, i);
            failed++;
        }
    }
    marker(PACER_MARKER_SMP_READY);
    return failed;
}

static int is_online(uint32_t i)
{
    return i == 0 || __atomic_load_n(&cpu_state[i], __ATOMIC_ACQUIRE) == CPU_ONLINE;
}

/* Every online CPU's role; pingpong pairs form in vCPU order among the
 * online CPUs that want pingpong, an unpaired one runs cpu. */
static void assign_roles(int role)
{
    int waiting = -1;
    for (uint32_t i = 0; i < cfg.vcpus; i++) {
        if (!is_online(i))
            continue;
        int r = role == ROLE_NONE && keyis(cfg.workload, cfg.workload_len, "mixed")
                    ? cfg.mixed[i] : role;
        run.role[i] = (uint8_t)r;
        if (r != ROLE_PINGPONG)
            continue;
        if (waiting < 0) {
            waiting = (int)i;
        } else {
            run.partner[waiting] = (uint8_t)i;
            run.partner[i] = (uint8_t)waiting;
            waiting = -1;
        }
    }
    if (waiting >= 0)
        run.role[waiting] = ROLE_CPU;
}

/* Wait for `go`, then for the common start time. */
static void await_start(void)
{
    uint64_t seen = (uint64_t)sys(SYS_IRQ_COUNT, IRQ_IPI, 0);
    while (!__atomic_load_n(&go, __ATOMIC_ACQUIRE))
        seen = (uint64_t)sys(SYS_WAIT_IPI, seen, 0);
    if (rdtsc() < run.t_start)
        sys(SYS_SLEEP_UNTIL, run.t_start, 0);
    while (rdtsc() < run.t_start)     /* no LAPIC: the sleep returned at once */
        cpu_relax();
}

__attribute__((noreturn)) void uap_main(uint32_t id)
{
    struct ucpu *c = &ucpus[id];
    c->id = id;
    c->work_state = WORK_STATE_INIT + id;
    uint32_t want = CPU_BOOTING;
    if (!__atomic_compare_exchange_n(&cpu_state[id], &want, CPU_ONLINE, 0, __ATOMIC_SEQ_CST,
                                     __ATOMIC_SEQ_CST))
        sys(SYS_IDLE, 0, 0);    /* the BSP gave up on us: stay out */
    if (steal_on)   /* the BSP registered its own: so does every AP */
        sys(SYS_STEAL_INIT, &steal_areas[id], 0);
    await_start();
    run_role(c);
    __atomic_fetch_add(&done, 1, __ATOMIC_SEQ_CST);
    sys(SYS_IPI, 0, 0);
    sys(SYS_IDLE, 0, 0);
    for (;;)
        ;
}

static const char text_meta[] = "guest=pacer-bench abi=3 work_iters=2048 max_vcpus=254";

/* ---- hostile: what a guest gone bad does to its VMM ------------------------
 * A serial flood (flood_kib KiB of console lines), a result port flood
 * (flood_records records, every 8th with a bad magic), writes of random
 * values to random_ports random ports (k_sys.c spares those that would end
 * the run early), random_mmio 8-byte writes from ring 3 to random addresses
 * between the end of RAM and 1 GiB (no device there: each an MMIO exit),
 * then a triple fault. The port floods run in the kernel (SYS_FLOOD_*). */
static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static __attribute__((noreturn)) void hostile(struct ucpu *c, uint64_t ram_top)
{
    uint64_t seed = rdtsc() | 1;
    con("pacer-bench: hostile: serial flood, result flood, random ports and MMIO, then a triple fault\r\n");
    marker(PACER_MARKER_WORKLOAD_START);
    static const char line[] = "pacer-bench: hostile flood 0123456789abcdefghijklmnopqrstuvw\n";
    sys3(SYS_FLOOD_SERIAL, (long)(uintptr_t)line, (long)(sizeof line - 1), (long)(cfg.flood_kib * 16));
    struct pacer_record r __attribute__((aligned(64)));
    r.magic = PACER_RECORD_MAGIC;
    r.version = PACER_RECORD_VERSION;
    r.kind = PACER_KIND_WORK_SAMPLE;
    r.vcpu = c->id;
    r.seq = c->seq;
    r.tsc = rdtsc();
    r.v[0] = 0; r.v[1] = 1; r.v[2] = 0; r.v[3] = 1; r.v[4] = 0;
    sys(SYS_FLOOD_RECORDS, &r, cfg.flood_records);
    sys(SYS_FLOOD_PORTS, xorshift(&seed), cfg.random_ports);
    uint64_t lo = (ram_top + (2ull << 20) - 1) & ~((2ull << 20) - 1), hi = 1ull << 30;
    for (uint64_t n = 0; lo < hi && n < cfg.random_mmio; n++) {
        uint64_t a = (lo + xorshift(&seed) % (hi - lo)) & ~7ull;
        *(volatile uint64_t *)(uintptr_t)a = xorshift(&seed);
    }
    con("pacer-bench: hostile: triple-faulting\r\n");
    sys(SYS_TRIPLE_FAULT, 0, 0);
    for (;;)
        ;
}

static __attribute__((noreturn)) void single_cpu_workload(const char *w, unsigned wl)
{
    if (keyis(w, wl, "triple_fault")) {
        con("pacer-bench: triple-faulting on purpose\r\n");
        sys(SYS_TRIPLE_FAULT, 0, 0);
    }
    if (keyis(w, wl, "idle")) {
        con("pacer-bench: idle (cli; hlt forever)\r\n");
        marker(PACER_MARKER_WORKLOAD_START);
        sys(SYS_IDLE, 0, 0);
    }
    con("pacer-bench: touching unmapped memory on purpose\r\n");
    *(volatile uint64_t *)(uintptr_t)0x7f0000000000ull = 1;  /* #PF -> kernel panic */
    for (;;)
        ;
}

__attribute__((noreturn)) void umain(struct boot_info *bi)
{
    struct ucpu *c = &ucpus[0];
    c->work_state = WORK_STATE_INIT;
    cfg.workload = "cpu";
    cfg.workload_len = 3;
    cfg.duration_ms = 1000;
    cfg.report_ms = 100;
    cfg.vcpus = 1;
    cfg.interval_us = 1000;
    cfg.period_us = 1000;
    cfg.run_us = 300;
    cfg.cs_ns = 2000;
    cfg.gap_ns = 2000;
    cfg.rate = 1000;
    cfg.work_us = 50;
    cfg.seed = 1;
    cfg.x2apic = 2;
    cfg.deadline = 1;
    cfg.pv_eoi = 1;
    cfg.steal = 1;
    cfg.flood_kib = 256;
    cfg.flood_records = 20000;
    cfg.random_ports = 2000;
    cfg.random_mmio = 2000;
    parse_cmdline(bi->cmdline, bi->cmdline_len);
    check_cmdline();
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
    bs(&b, cfg.x2apic ? " apic=x2apic" : " apic=xapic");
    bs(&b, cfg.deadline ? " timer=deadline" : " timer=oneshot");
    bs(&b, cfg.pv_eoi ? " pv_eoi=on" : " pv_eoi=off");
    bs(&b, cfg.steal ? " steal=on" : " steal=off");
    bs(&b, cfg.pv_spin ? " pv_spin=on" : " pv_spin=off");
    bs(&b, " ram_mib="); bu(&b, ram >> 20);
    bs(&b, "\r\n");
    bflush(&b);
    record(c, PACER_KIND_TEXT, (uint64_t)(uintptr_t)text_meta, sizeof text_meta - 1, 0, 0, 0);
    if (bad_input)
        sys_exit(PACER_EXIT_BAD_INPUT);

    const char *w = cfg.workload;
    unsigned wl = cfg.workload_len;
    if (keyis(w, wl, "triple_fault") || keyis(w, wl, "idle") || keyis(w, wl, "panic"))
        single_cpu_workload(w, wl);
    if (keyis(w, wl, "hostile")) {
        uint64_t top = 0;
        for (uint32_t i = 0; i < bi->e820_n; i++)
            if (bi->e820[i].type == E820_RAM && bi->e820[i].addr + bi->e820[i].size > top)
                top = bi->e820[i].addr + bi->e820[i].size;
        hostile(c, top);
    }
    int role = role_of(w, wl);
    int is_boot = keyis(w, wl, "boot"), is_mixed = keyis(w, wl, "mixed");
    if (role == ROLE_NONE && !is_boot && !is_mixed) {
        con("pacer-bench: unknown workload\r\n");
        record_error(c, PACER_ERR_UNKNOWN_WORKLOAD, w, wl, 0);
        sys_exit(PACER_EXIT_BAD_INPUT);
    }

    /* KVM steal time on the BSP (before any AP starts: they follow it). */
    if (cfg.steal)
        steal_on = sys(SYS_STEAL_INIT, &steal_areas[0], 0) == 1;

    /* Local APICs, then the APs. */
    unsigned failed = 0;
    uint64_t flags = (cfg.x2apic ? APIC_F_X2APIC : 0) | (cfg.deadline ? APIC_F_DEADLINE : 0)
                   | (cfg.pv_eoi ? APIC_F_PV_EOI : 0)
                   | (cfg.x2apic == 2 ? APIC_F_X2APIC_IF_OFFERED : 0);
    long apic = sys3(SYS_APIC_INIT, (long)flags, (long)cfg.tsc_khz, (long)cfg.vcpus);
    if (apic == -2) {
        con("pacer-bench: error: timer=deadline: this local APIC has no TSC-deadline mode\r\n");
        record_error(c, PACER_ERR_NO_TSC_DEADLINE, "timer", 5, 0);
        sys_exit(PACER_EXIT_NO_LAPIC);
    }
    if (apic == 1) {
        con("pacer-bench: CPUID offers no x2APIC: apic=xapic\r\n");
        apic = 0;
    }
    if (apic != 0) {
        int needs = role == ROLE_SLEEP || role == ROLE_BURST || role == ROLE_PINGPONG ||
                    role == ROLE_SHOOTDOWN || role == ROLE_SERVER || is_mixed;
        if (needs) {
            con("pacer-bench: error: this workload needs a local APIC and there is none\r\n");
            record_error(c, PACER_ERR_NO_LAPIC, w, wl, 0);
            sys_exit(PACER_EXIT_NO_LAPIC);
        }
        con("pacer-bench: no local APIC: running on vCPU 0 only\r\n");
        cfg.vcpus = 1;
    } else if (cfg.vcpus > 1) {
        failed = start_aps(c);
    }
    uint64_t tsc_smp = rdtsc();
    uint32_t online = 0;
    for (uint32_t i = 0; i < cfg.vcpus; i++)
        online += (uint32_t)is_online(i);

    assign_roles(role);
    /* Release everyone together: 2 ms from now plus 0.1 ms per CPU to
     * deliver the `go` IPIs. */
    run.t_start = rdtsc() + ns_to_ticks(2000000 + 100000ull * online);
    run.t_end = run.t_start + cfg.duration_ms * cfg.tsc_khz;
    marker(PACER_MARKER_WORKLOAD_START);
    __atomic_store_n(&go, 1, __ATOMIC_SEQ_CST);
    for (uint32_t i = 1; i < cfg.vcpus; i++)
        if (is_online(i))
            sys(SYS_IPI, i, 0);
    if (is_boot)
        record(c, PACER_KIND_BOOT_TIMES, bi->tsc_first, bi->tsc_ready, tsc_smp, online, 0);
    else
        await_start();
    run_role(c);
    __atomic_fetch_add(&done, 1, __ATOMIC_SEQ_CST);

    /* Wait for the others (they IPI us after bumping `done`). */
    uint64_t seen = (uint64_t)sys(SYS_IRQ_COUNT, IRQ_IPI, 0);
    while (__atomic_load_n(&done, __ATOMIC_ACQUIRE) < online)
        seen = (uint64_t)sys(SYS_WAIT_IPI, seen, 0);

    int status = failed ? PACER_EXIT_AP_FAILED : PACER_EXIT_OK;
    uint64_t acq = 0, rate = 0;
    int any_lock = 0;
    for (uint32_t i = 0; i < cfg.vcpus; i++) {
        if (is_online(i) && run.role[i] == ROLE_SPINLOCK) {
            any_lock = 1;
            acq += ucpus[i].acquisitions;
            rate += per_second(ucpus[i].acquisitions, ucpus[i].ticks);
        }
    }
    if (any_lock) {
        uint64_t inside = spinlock_inside();
        b.n = 0;
        bs(&b, "pacer-result vcpu=all workload=spinlock acquisitions="); bu(&b, acq);
        bs(&b, " acquisitions_per_s="); bu(&b, rate);
        bs(&b, "\r\n");
        bflush(&b);
        if (inside != acq) {
            con("pacer-bench: error: spinlock mutual exclusion broken (lost updates)\r\n");
            record_error(c, PACER_ERR_LOCK_BROKEN, "spinlock", 8, acq - inside);
            status = PACER_EXIT_BROKEN;
        }
    }
    marker(PACER_MARKER_WORKLOAD_DONE);
    sys_exit(status);
}
