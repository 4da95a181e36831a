/* Bench guest kernel (ring 0) internals shared by k_sys.c and k_smp.c:
 * the per-CPU block (layout in guest.h) and small instruction wrappers.
 * Ring 0 is emulated on the PVM KVM: integer code only, short paths. */
#ifndef K_H
#define K_H
#include <stdint.h>
#include "pacer_abi.h"
#include "guest.h"

struct percpu {
    uint32_t index;
    volatile uint32_t pv_eoi;    /* KVM PV EOI flag (MSR_KVM_PV_EOI_EN) */
    volatile uint64_t timer;     /* LAPIC timer interrupts */
    volatile uint64_t ipi;       /* workload IPIs */
    volatile uint64_t spurious;
    volatile uint64_t other;     /* any other vector >= 32 */
    uint64_t pad1[3];
    struct pacer_record record;  /* SYS_RECORD's copy */
    /* TSS at PC_TSS, IST and kernel stacks above: touched by k_entry.S only */
};
_Static_assert(__builtin_offsetof(struct percpu, pv_eoi) == PC_PV_EOI, "pc");
_Static_assert(__builtin_offsetof(struct percpu, timer) == PC_TIMER, "pc");
_Static_assert(__builtin_offsetof(struct percpu, ipi) == PC_IPI, "pc");
_Static_assert(__builtin_offsetof(struct percpu, spurious) == PC_SPURIOUS, "pc");
_Static_assert(__builtin_offsetof(struct percpu, other) == PC_OTHER, "pc");
_Static_assert(__builtin_offsetof(struct percpu, record) == PC_RECORD, "pc");
_Static_assert(sizeof(struct percpu) <= PC_TSS, "pc");

/* The calling CPU's block: the kernel stack tops it. */
static inline struct percpu *this_cpu(void)
{
    uint64_t sp;
    __asm__("mov %%rsp, %0" : "=r"(sp));
    return (struct percpu *)(uintptr_t)(sp & ~(uint64_t)(PERCPU_SIZE - 1));
}

static inline void outb(uint16_t port, uint8_t v) { __asm__ volatile("outb %0, %1" :: "a"(v), "Nd"(port)); }
static inline void outl(uint16_t port, uint32_t v) { __asm__ volatile("outl %0, %1" :: "a"(v), "Nd"(port)); }
static inline uint8_t inb(uint16_t port) { uint8_t v; __asm__ volatile("inb %1, %0" : "=a"(v) : "Nd"(port)); return v; }

static inline uint64_t rdtsc(void)
{
    uint32_t lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
}

static inline uint64_t rdmsr(uint32_t msr)
{
    uint32_t lo, hi;
    __asm__ volatile("rdmsr" : "=a"(lo), "=d"(hi) : "c"(msr));
    return ((uint64_t)hi << 32) | lo;
}

static inline void wrmsr(uint32_t msr, uint64_t v)
{
    __asm__ volatile("wrmsr" :: "c"(msr), "a"((uint32_t)v), "d"((uint32_t)(v >> 32)) : "memory");
}

/* k_smp.c */
extern uint8_t apic_mode;
extern uint8_t pv_eoi_on;
extern uint32_t cpu_limit;
long k_apic_init(uint64_t flags, uint64_t tsc_khz, uint64_t vcpus);
long k_ap_start(uint64_t apic_id);
long k_steal_init(uint64_t area);
uint64_t k_sleep_until(uint64_t tsc);
long k_ipi(uint64_t target);
uint64_t k_wait_ipi(uint64_t seen);
int apic_setup(void);

#endif
