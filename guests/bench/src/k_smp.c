/* Bench guest kernel, SMP part: the local APIC (x2APIC through MSRs or
 * xAPIC through MMIO at 0xFEE00000, chosen on the command line), AP
 * start-up (INIT, SIPI, SIPI as the Intel SDM's MP initialisation
 * describes), LAPIC-timer sleeps (TSC-deadline or one-shot count mode),
 * IPIs and the idle loop. It follows the SDM only, so it runs the same
 * under KVM's in-kernel LAPIC, a VMM's user-space LAPIC or hardware.
 *
 * The kernel runs with IF=0; the only place interrupts are taken in ring 0
 * is `idle()` (`sti; hlt; cli`: STI's one-instruction shadow makes the
 * check-then-halt race free). Interrupt handlers (k_entry.S) only count in
 * the CPU's block; the loops here re-check the counts.
 * Ring 0: integer only, compiled with -mgeneral-regs-only. */
#include "k.h"

#define MSR_APIC_BASE    0x1B
#define MSR_TSC_DEADLINE 0x6E0
#define APIC_BASE_EXTD   (1u << 10)
#define APIC_BASE_EN     (1u << 11)
#define XAPIC_MMIO       0xFEE00000u

/* register offsets: xAPIC MMIO offset; x2APIC MSR = 0x800 + offset / 16 */
#define APIC_VER   0x30
#define APIC_SVR   0xF0
#define APIC_ICR   0x300
#define APIC_ICR2  0x310
#define APIC_LVTT  0x320
#define APIC_LVT0  0x350
#define APIC_LVT1  0x360
#define APIC_TMICT 0x380
#define APIC_TDCR  0x3E0

#define SVR_ENABLE        (1u << 8)
#define LVT_MASKED        (1u << 16)
#define LVTT_TSC_DEADLINE (2u << 17)
#define TDCR_DIVIDE_BY_1  0xB
#define ICR_FIXED         0x000
#define ICR_INIT          0x500
#define ICR_STARTUP       0x600
#define ICR_BUSY          (1u << 12)  /* xAPIC delivery status */
#define ICR_ASSERT        (1u << 14)
#define ICR_LEVEL         (1u << 15)

#define MODE_XAPIC  1
#define MODE_X2APIC 2

uint8_t apic_mode;          /* 0: no LAPIC in use (k_entry.S sends no EOI) */
uint8_t pv_eoi_on;          /* KVM PV EOI in use (k_entry.S tries it first) */
uint32_t cpu_limit = 1;     /* vcpus: an AP with a higher APIC id parks */
static uint8_t timer_deadline;
static uint64_t tsc_khz;

extern int rdmsr_safe(uint32_t msr, uint64_t *val);
extern char ap_tramp[], ap_tramp_end[];

/* a * b / c, rounded up, with a 128-bit intermediate (no libgcc) */
static uint64_t muldiv_up(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t hi, lo, q, r;
    __asm__("mulq %3" : "=a"(lo), "=d"(hi) : "a"(a), "rm"(b));
    if (hi >= c)
        return ~0ull;
    __asm__("divq %4" : "=a"(q), "=d"(r) : "a"(lo), "d"(hi), "rm"(c));
    return q + (r != 0);
}

static void apic_write(uint32_t reg, uint32_t v)
{
    if (apic_mode == MODE_X2APIC)
        wrmsr(0x800 + (reg >> 4), v);
    else
        *(volatile uint32_t *)(uintptr_t)(XAPIC_MMIO + reg) = v;
}

static uint32_t xapic_read(uint32_t reg)
{
    return *(volatile uint32_t *)(uintptr_t)(XAPIC_MMIO + reg);
}

static uint32_t apic_read(uint32_t reg)
{
    if (apic_mode == MODE_X2APIC)
        return (uint32_t)rdmsr(0x800 + (reg >> 4));
    return xapic_read(reg);
}

static void apic_icr(uint32_t dest, uint32_t low)
{
    if (apic_mode == MODE_X2APIC) {
        wrmsr(0x830, ((uint64_t)dest << 32) | low);
        return;
    }
    /* xAPIC: the previous IPI must have left (bounded: never hang here) */
    for (int i = 0; i < 1000 && (xapic_read(APIC_ICR) & ICR_BUSY); i++)
        ;
    apic_write(APIC_ICR2, dest << 24);
    apic_write(APIC_ICR, low);
}

static void idle(void)
{
    __asm__ volatile("sti; hlt; cli" ::: "memory");
}

static void delay_us(uint64_t us)
{
    uint64_t end = rdtsc() + us * tsc_khz / 1000;
    while (rdtsc() < end)
        ;
}

#define MSR_KVM_PV_EOI_EN 0x4b564d04
#define KVM_FEATURE_PV_EOI (1u << 6)

/* KVM's paravirtual EOI where the hypervisor's CPUID offers it (leaf
 * 0x40000000 signature "KVMKVMKVM", leaf 0x40000001 EAX bit 6), as
 * Linux's kvm_guest_cpu_init does. */
static int pv_eoi_offered(void)
{
    uint32_t a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x40000000u), "c"(0));
    if (b != 0x4b4d564b || c != 0x564b4d56 || d != 0x4d || a < 0x40000001u)
        return 0;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x40000001u), "c"(0));
    return (a & KVM_FEATURE_PV_EOI) != 0;
}

#define MSR_KVM_STEAL_TIME 0x4b564d03
#define KVM_FEATURE_STEAL_TIME (1u << 5)

/* KVM's steal time for the calling CPU where the hypervisor's CPUID
 * offers it, as Linux's kvm_register_steal_time does: the area's address
 * | 1 (enabled). 1 if registered, 0 if not offered. */
long k_steal_init(uint64_t area)
{
    uint32_t a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x40000000u), "c"(0));
    if (b != 0x4b4d564b || c != 0x564b4d56 || d != 0x4d || a < 0x40000001u)
        return 0;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x40000001u), "c"(0));
    if (!(a & KVM_FEATURE_STEAL_TIME) || (area & 63))
        return 0;
    wrmsr(MSR_KVM_STEAL_TIME, area | 1);
    return 1;
}

/* Enable the calling CPU's LAPIC in apic_mode, spurious vector 0xFF, LINT0/1
 * masked (no 8259 virtual wire), the timer LVT in the chosen mode (masked
 * only by never being armed). 0; -1 if there is no LAPIC; -2 if the LAPIC
 * has no TSC-deadline mode (the mode bits do not stick: KVM, for one, masks
 * them unless the CPUID bit is set). Called by the BSP (SYS_APIC_INIT) and
 * by each AP's entry. */
int apic_setup(void)
{
    uint64_t base = rdmsr(MSR_APIC_BASE);
    if (!(base & APIC_BASE_EN)) {
        /* disabled -> xAPIC first: disabled -> x2APIC is not a legal step */
        base = (base & ~(uint64_t)APIC_BASE_EXTD) | APIC_BASE_EN;
        wrmsr(MSR_APIC_BASE, base);
    }
    if (apic_mode == MODE_X2APIC) {
        uint64_t ver;
        if (!(base & APIC_BASE_EXTD))
            wrmsr(MSR_APIC_BASE, base | APIC_BASE_EXTD);
        if (rdmsr_safe(0x800 + (APIC_VER >> 4), &ver))
            return -1;          /* #GP: no x2APIC behind the MSRs */
    } else {
        if (base & APIC_BASE_EXTD) {
            /* x2APIC -> xAPIC goes through disabled (SDM) */
            wrmsr(MSR_APIC_BASE, base & ~(uint64_t)(APIC_BASE_EXTD | APIC_BASE_EN));
            wrmsr(MSR_APIC_BASE, (base & ~(uint64_t)APIC_BASE_EXTD) | APIC_BASE_EN);
        }
        if ((base & ~0xFFFull) != XAPIC_MMIO)
            return -1;          /* relocated: not where our page tables map it */
        /* Integrated APICs have version 0x1X; nothing there reads all ones */
        if ((xapic_read(APIC_VER) & 0xF0) != 0x10)
            return -1;
    }
    apic_write(APIC_SVR, SVR_ENABLE | VEC_SPURIOUS);
    apic_write(APIC_LVT0, LVT_MASKED);
    apic_write(APIC_LVT1, LVT_MASKED);
    if (timer_deadline) {
        apic_write(APIC_LVTT, LVTT_TSC_DEADLINE | VEC_TIMER);
        if ((apic_read(APIC_LVTT) & (3u << 17)) != LVTT_TSC_DEADLINE)
            return -2;
    } else {
        apic_write(APIC_TDCR, TDCR_DIVIDE_BY_1);
        apic_write(APIC_LVTT, VEC_TIMER);      /* one-shot */
    }
    if (pv_eoi_on) {
        /* The flag lives in this CPU's block (identity-mapped: VA = PA). */
        struct percpu *pc = this_cpu();
        pc->pv_eoi = 0;
        wrmsr(MSR_KVM_PV_EOI_EN, (uint64_t)(uintptr_t)&pc->pv_eoi | 1);
    }
    return 0;
}

/* CPUID leaf 1 ECX bit 21. Ring 0 here: the VMM's CPUID table, where
 * ring 3 may see the host's (this KVM's user-mode CPUID). */
static int x2apic_offered(void)
{
    uint32_t a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1u), "c"(0));
    return (c & (1u << 21)) != 0;
}

long k_apic_init(uint64_t flags, uint64_t khz, uint64_t vcpus)
{
    if (apic_mode)
        return 0;
    timer_deadline = (flags & APIC_F_DEADLINE) != 0;
    pv_eoi_on = (flags & APIC_F_PV_EOI) && pv_eoi_offered();
    tsc_khz = khz ? khz : 1;
    apic_mode = (flags & APIC_F_X2APIC) ? MODE_X2APIC : MODE_XAPIC;
    /* As Linux: x2APIC when offered, else xAPIC (unless apic=x2apic asked
     * for it whatever CPUID says). */
    long fell_back = 0;
    if (apic_mode == MODE_X2APIC && (flags & APIC_F_X2APIC_IF_OFFERED) && !x2apic_offered()) {
        apic_mode = MODE_XAPIC;
        fell_back = 1;
    }
    int err = apic_setup();
    if (err) {
        if (err == -2)
            apic_write(APIC_LVTT, LVT_MASKED | VEC_TIMER);
        apic_mode = 0;
        return err;
    }
    cpu_limit = vcpus < 1 ? 1 : vcpus > MAX_CPUS ? MAX_CPUS : (uint32_t)vcpus;
    /* the real-mode trampoline goes to its page below 1 MiB */
    const char *src = ap_tramp;
    char *dst = (char *)(uintptr_t)TRAMPOLINE;
    uint64_t n = (uint64_t)(ap_tramp_end - ap_tramp + 7) / 8;
    __asm__ volatile("rep movsq" : "+S"(src), "+D"(dst), "+c"(n) :: "memory");
    return fell_back;
}

/* INIT, then two STARTUP IPIs (vector TRAMPOLINE >> 12), with the SDM's
 * waits (10 us after INIT as modern CPUs allow, 200 us between SIPIs). A
 * SIPI reaching a CPU that already runs is ignored, as is an INIT-SIPI
 * sequence to a missing APIC id. */
long k_ap_start(uint64_t apic_id)
{
    if (!apic_mode || apic_id == 0 || apic_id >= cpu_limit)
        return -1;
    uint32_t id = (uint32_t)apic_id;
    apic_icr(id, ICR_INIT | ICR_ASSERT | ICR_LEVEL);
    delay_us(10);
    apic_icr(id, ICR_STARTUP | ICR_ASSERT | (TRAMPOLINE >> 12));
    delay_us(200);
    apic_icr(id, ICR_STARTUP | ICR_ASSERT | (TRAMPOLINE >> 12));
    return 0;
}

static void timer_arm(uint64_t target, uint64_t now)
{
    if (timer_deadline) {
        wrmsr(MSR_TSC_DEADLINE, target);
        return;
    }
    /* one-shot: the count runs at the 1 GHz APIC bus clock (divide by 1) */
    uint64_t ns = muldiv_up(target - now, 1000000, tsc_khz);
    apic_write(APIC_TMICT, ns > 0xFFFFFFFFu ? 0xFFFFFFFFu : (uint32_t)ns);
}

/* Halt until the TSC reaches `target`; returns the TSC read on resuming.
 * Re-arms if the timer fires early (one-shot rounding, long sleeps cut at
 * 2^32 bus clocks) or another interrupt ends the halt. */
uint64_t k_sleep_until(uint64_t target)
{
    struct percpu *pc = this_cpu();
    uint64_t now = rdtsc();
    if (!apic_mode)
        return now;
    while (now < target) {
        uint64_t seen = pc->timer;
        timer_arm(target, now);
        while (pc->timer == seen)
            idle();
        now = rdtsc();
    }
    return now;
}

long k_ipi(uint64_t target)
{
    if (!apic_mode || target >= cpu_limit)
        return -1;
    apic_icr((uint32_t)target, ICR_FIXED | ICR_ASSERT | VEC_IPI);
    return 0;
}

/* Halt until this CPU's IPI count exceeds `seen` (an IPI that arrived
 * before the call is already counted: no lost wake-up). */
uint64_t k_wait_ipi(uint64_t seen)
{
    struct percpu *pc = this_cpu();
    if (!apic_mode)
        return pc->ipi;
    while (pc->ipi <= seen)
        idle();
    return pc->ipi;
}
