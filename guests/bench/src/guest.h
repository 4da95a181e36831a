/* Bench-guest internal ABI between its kernel (ring 0) and its workloads
 * (ring 3). Not part of the VMM protocol. Usable from C and assembly. */
#ifndef GUEST_H
#define GUEST_H

/* selectors of the guest's own GDT (0x10/0x18 as in the VMM's boot GDT) */
#define SEL_KCODE32 0x08   /* 32-bit kernel code: the AP trampoline only */
#define SEL_KCODE   0x10
#define SEL_KDATA   0x18
#define SEL_UCODE32 0x23   /* placeholder (a compatibility-mode user segment) */
#define SEL_UDATA   0x2B
#define SEL_UCODE   0x33
#define SEL_TSS0    0x38   /* CPU i's TSS: SEL_TSS0 + 16 * i (16-byte descriptors) */

/* Most vCPUs the guest supports: APIC ids 0..253 (xAPIC's 8-bit
 * destination, 0xFF is broadcast). Statically sized: per-CPU kernel blocks,
 * TSS descriptors, user stacks. */
#define MAX_CPUS    254

/* fixed memory layout (linker.ld asserts these) */
#define KERNEL_BASE 0x100000   /* 256 ISR stubs x 16 bytes */
#define STUB_SIZE   16
#define PERCPU_BASE 0x200000   /* MAX_CPUS kernel blocks of PERCPU_SIZE (bss) */
#define PERCPU_SIZE 0x1000
#define USER_BASE   0x400000   /* first user (U=1) 2 MiB page */
#define MAP_LIMIT   0x40000000 /* identity map of the first 1 GiB */
#define TRAMPOLINE  0x10000    /* AP real-mode start page (SIPI vector 0x10) */

/* Per-CPU kernel block (CPU i at PERCPU_BASE + i * PERCPU_SIZE, all zero at
 * boot). The kernel stack tops the block, so ring-0 code finds its block
 * with RSP & ~(PERCPU_SIZE - 1). */
#define PC_INDEX     0x00   /* u32: vCPU index (= APIC id) */
#define PC_PV_EOI    0x04   /* u32: KVM PV EOI flag (bit 0: EOI by clearing it) */
#define PC_TIMER     0x08   /* u64: LAPIC timer interrupts */
#define PC_IPI       0x10   /* u64: workload IPIs received */
#define PC_SPURIOUS  0x18   /* u64: spurious interrupts (vector 0xFF) */
#define PC_OTHER     0x20   /* u64: other interrupts, vector >= 32 */
#define PC_RECORD    0x40   /* 64 bytes: the record being reported */
#define PC_TSS       0x80   /* 104 bytes: this CPU's TSS */
#define PC_IST_TOP   0x600  /* IST1 stack (#DF, NMI, #MC): 0x100-0x600 */
#define PC_STACK_TOP PERCPU_SIZE /* kernel stack: 0x600-0x1000, RSP0 */

/* interrupt vectors */
#define VEC_TIMER    0xEC   /* LAPIC timer */
#define VEC_IPI      0xFD   /* workload IPI */
#define VEC_SPURIOUS 0xFF   /* LAPIC spurious vector: no EOI */

/* user stacks: one per CPU, USTACK_SIZE each, in user bss */
#define USTACK_SIZE  0x4000

/* system calls: `ud2` from ring 3 (the #UD handler treats it as a system
 * call and resumes after it); nr in RAX, args in RDI, RSI, RDX; result in
 * RAX. RCX, R11, RDI, RSI, RDX, R8, R9, R10 are clobbered. (SYSCALL stays
 * at CPL 3 on the PVM KVM, so it is not used.) All calls act on the
 * calling CPU. */
#define SYS_WRITE        0   /* (buf, len) -> COM1, one caller at a time */
#define SYS_MARKER       1   /* (value) -> port 0xE00 */
#define SYS_RECORD       2   /* (struct pacer_record *) -> copied, addr -> port 0xE04 */
#define SYS_EXIT         3   /* (status) -> port 0xE08; never returns */
#define SYS_INFO         4   /* () -> struct boot_info * */
#define SYS_TRIPLE_FAULT 5   /* () -> triple fault (KVM_EXIT_SHUTDOWN) */
#define SYS_IDLE         6   /* () -> cli; hlt forever */
#define SYS_IRQ_COUNT    7   /* (which: IRQ_*) -> this CPU's interrupt count */
#define SYS_APIC_INIT    8   /* (APIC_F_* flags, tsc_khz, vcpus) -> 0, -1: no LAPIC,
                                -2: no TSC-deadline mode (APIC_F_DEADLINE),
                                1: xAPIC, x2APIC not offered (APIC_F_X2APIC_IF_OFFERED).
                                BSP only, once: sets the mode for every CPU,
                                enables the BSP's LAPIC, installs the trampoline */
#define SYS_AP_START     9   /* (apic_id) -> INIT, SIPI, SIPI to that CPU; 0 or -1 */
#define SYS_CPU_ID      10   /* () -> this CPU's index */
#define SYS_CPU_COUNT   11   /* () -> vcpus given to SYS_APIC_INIT (1 before it
                                or without a LAPIC): the CPUs the kernel can run */
#define SYS_SLEEP_UNTIL 12   /* (tsc) -> TSC on resuming after the LAPIC timer fired */
#define SYS_IPI         13   /* (target cpu) -> 0, or -1: no such CPU / no LAPIC */
#define SYS_WAIT_IPI    14   /* (seen) -> halts until IPI count > seen; returns it */
#define SYS_YIELD       15   /* () -> OUT 0 to port 0xE0C (voluntary yield hint) */
#define SYS_STEAL_INIT  16   /* (struct kvm_steal_time *, 64-byte aligned, VA = PA) ->
                                1: MSR_KVM_STEAL_TIME points the calling CPU's steal
                                time there; 0: the hypervisor's CPUID does not offer it */
/* The `hostile` workload's floods (port I/O from ring 3 would need IOPL 3,
 * which the software KVM the project is tested on does not honour): */
#define SYS_FLOOD_SERIAL  17 /* (buf, len, reps) -> buf[0..len] to COM1's data port, reps times */
#define SYS_FLOOD_RECORDS 18 /* (record, count) -> count copies to the result port (v1 = n + 1,
                                seq counts up, every 8th with a bad magic) */
#define SYS_FLOOD_PORTS   19 /* (seed, count) -> count byte writes of random values to random
                                ports, sparing those that would end the run early */

/* SYS_IRQ_COUNT selectors */
#define IRQ_ALL      0
#define IRQ_TIMER    1
#define IRQ_IPI      2
#define IRQ_SPURIOUS 3
#define IRQ_OTHER    4

/* SYS_APIC_INIT flags */
#define APIC_F_X2APIC   1   /* x2APIC (MSRs) instead of xAPIC (MMIO) */
#define APIC_F_DEADLINE 2   /* TSC-deadline timer instead of one-shot count */
#define APIC_F_PV_EOI   4   /* KVM's PV EOI where CPUID offers it */
#define APIC_F_X2APIC_IF_OFFERED 8 /* with APIC_F_X2APIC: xAPIC if CPUID leaf 1
                                   ECX bit 21 is clear (the default, as Linux) */

/* struct boot_info layout (filled by the kernel entry, in user memory) */
#define BI_TSC_FIRST    0
#define BI_TSC_READY    8
#define BI_BOOT_PARAMS  16
#define BI_CMDLINE_LEN  24
#define BI_E820_N       28
#define BI_CMDLINE      32
#define BI_CMDLINE_MAX  2048
#define BI_E820         (BI_CMDLINE + BI_CMDLINE_MAX)
#define BI_SIZE         (BI_E820 + 128 * 20)

#ifndef __ASSEMBLER__
#include <stdint.h>
struct e820_entry {
    uint64_t addr;
    uint64_t size;
    uint32_t type;
} __attribute__((packed));

struct boot_info {
    uint64_t tsc_first;     /* guest TSC at the entry's first instruction */
    uint64_t tsc_ready;     /* guest TSC just before KERNEL_READY */
    uint64_t boot_params;   /* guest-physical address of boot_params */
    uint32_t cmdline_len;   /* bytes copied (may include a NUL) */
    uint32_t e820_n;
    char cmdline[BI_CMDLINE_MAX];
    struct e820_entry e820[128];
};
_Static_assert(__builtin_offsetof(struct boot_info, cmdline) == BI_CMDLINE, "bi");
_Static_assert(__builtin_offsetof(struct boot_info, e820) == BI_E820, "bi");
_Static_assert(sizeof(struct boot_info) == BI_SIZE, "bi");
#endif

#endif
