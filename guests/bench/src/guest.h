/* Bench-guest internal ABI between its kernel (ring 0) and its workloads
 * (ring 3). Not part of the VMM protocol. Usable from C and assembly. */
#ifndef GUEST_H
#define GUEST_H

/* selectors of the guest's own GDT (same as the VMM's boot GDT for 0x10/0x18) */
#define SEL_KCODE   0x10
#define SEL_KDATA   0x18
#define SEL_UCODE32 0x23   /* placeholder, STAR[63:48] base */
#define SEL_UDATA   0x2B
#define SEL_UCODE   0x33
#define SEL_TSS     0x38

/* fixed kernel layout (linker.ld asserts these) */
#define KERNEL_BASE 0x100000   /* 256 ISR stubs x 16 bytes */
#define STUB_SIZE   16
#define TSS_ADDR    0x101000
#define USER_BASE   0x200000   /* first user (U=1) 2 MiB page */
#define MAP_LIMIT   0x40000000 /* identity map of the first 1 GiB */

/* system calls: `ud2` from ring 3 (the #UD handler treats it as a system
 * call and resumes after it); nr in RAX, args in RDI, RSI, RDX; result in
 * RAX. RCX, R11, RDI, RSI, RDX, R8, R9, R10 are clobbered. (SYSCALL stays
 * at CPL 3 on the PVM KVM, so it is configured but not used.) */
#define SYS_WRITE        0   /* (buf, len) -> COM1 */
#define SYS_MARKER       1   /* (value) -> port 0xE00 */
#define SYS_RECORD       2   /* (struct pacer_record *) -> copied, addr -> port 0xE04 */
#define SYS_EXIT         3   /* (status) -> port 0xE08; never returns */
#define SYS_INFO         4   /* () -> struct boot_info * */
#define SYS_TRIPLE_FAULT 5   /* () -> triple fault (KVM_EXIT_SHUTDOWN) */
#define SYS_IDLE         6   /* () -> cli; hlt forever */
#define SYS_IRQ_COUNT    7   /* () -> number of interrupts (vector >= 32) seen */

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
