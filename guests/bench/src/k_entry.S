/* Bench guest kernel: BSP and AP entries, the AP real-mode trampoline,
 * interrupt stubs and handlers, the `ud2` system-call trap, and all static
 * descriptor tables. Ring 0 code here is emulated on the PVM-style KVM
 * (~0.5 us per instruction), so the boot paths are straight-line and the
 * GDT (one TSS descriptor per possible CPU), IDT and page tables are
 * link-time data: no loops at boot. Per-CPU state lives in fixed 4 KiB
 * blocks (guest.h, PC_*) whose top is the CPU's kernel stack, so handlers
 * find their block with RSP & ~0xFFF. */
#include "pacer_abi.h"
#include "guest.h"

#define MSR_APIC_BASE   0x1B
#define MSR_EFER        0xC0000080
#define X2APIC_ID       0x802
#define X2APIC_EOI      0x80B
#define XAPIC_MMIO      0xFEE00000
#define APIC_MODE_XAPIC  1      /* values of apic_mode (k_smp.c) */
#define APIC_MODE_X2APIC 2

/* From flat 32-bit protected mode (our GDT loaded): PAE paging on the
 * guest's own tables, EFER.LME, then a far jump to 64-bit code at `target`.
 * Clobbers EAX, ECX, EDX. */
        .macro PM32_TO_LONG_MODE target
        mov     $SEL_KDATA, %eax
        mov     %eax, %ds
        mov     %eax, %es
        mov     %eax, %ss
        xor     %eax, %eax
        mov     %eax, %fs
        mov     %eax, %gs
        mov     $0x620, %eax            /* PAE, OSFXSR, OSXMMEXCPT (as the BSP) */
        mov     %eax, %cr4
        mov     $pml4, %eax
        mov     %eax, %cr3
        mov     $MSR_EFER, %ecx
        mov     $0x100, %eax            /* LME */
        xor     %edx, %edx
        wrmsr
        mov     $0x80050033, %eax       /* PG, AM, WP, NE, ET, MP, PE (as the BSP) */
        mov     %eax, %cr0
        ljmp    $SEL_KCODE, $\target
        .endm

        .code64

/* ---- 256 interrupt stubs, 16 bytes each, at KERNEL_BASE ---------------- */
        .section .kstubs, "ax"
        .set vec, 0
        .rept 256
        .balign STUB_SIZE
        .if vec == 6
        jmp     ud_entry                /* #UD: system call trap (ud2) */
        .elseif vec == VEC_TIMER
        jmp     irq_timer
        .elseif vec == VEC_IPI
        jmp     irq_ipi
        .elseif vec == VEC_SPURIOUS
        jmp     irq_spurious
        .else
        .if (vec == 8) || ((vec >= 10) && (vec <= 14)) || (vec == 17) || (vec == 21) || (vec == 29) || (vec == 30)
        .else
        pushq   $0                      /* uniform frame: fake error code */
        .endif
        pushq   $vec
        jmp     isr_common
        .endif
        .set vec, vec + 1
        .endr

/* ---- AP real-mode trampoline ---------------------------------------------
 * Copied to TRAMPOLINE (below 1 MiB) by SYS_APIC_INIT; an AP starts here
 * after INIT + SIPI (vector TRAMPOLINE >> 12) in real mode with CS base =
 * TRAMPOLINE, IP = 0. It loads the kernel's GDT (32-bit base) and jumps to
 * ap_pm32 in the kernel image; everything else happens there. */
        .section .ktramp, "ax"
        .code16
        .globl ap_tramp, ap_tramp_end
ap_tramp:
        cli
        lgdtl   %cs:ap_tramp_gdtr - ap_tramp
        mov     %cr0, %eax
        or      $1, %al                 /* PE */
        mov     %eax, %cr0
        ljmpl   $SEL_KCODE32, $ap_pm32
        .balign 8
ap_tramp_gdtr:
        .word   gdt_end - gdt - 1
        .long   gdt
        .balign 8
ap_tramp_end:

/* ---- BSP entry ----------------------------------------------------------- */
        .text
        .code64
        .globl _start
_start:
        /* RSI = boot_params, RDI = vCPU index (PROTOCOL.md). A VMM that
         * starts every vCPU here (no INIT/SIPI) gives the APs RDI != 0:
         * they park (cli; hlt) before touching shared state. */
        test    %edi, %edi
        jnz     ap_park
        rdtsc
        mov     %eax, %r8d
        mov     %edx, %r9d
        mov     $PACER_MARKER_FIRST_INSTRUCTION, %al
        mov     $PACER_PORT_MARKER, %dx
        outb    %al, %dx
        mov     $(PERCPU_BASE + PC_STACK_TOP), %esp   /* CPU 0's block */
        shl     $32, %r9
        or      %r8, %r9
        lea     boot_info(%rip), %r10   /* user memory, U=1 */
        mov     %r9, BI_TSC_FIRST(%r10)
        mov     %rsi, BI_BOOT_PARAMS(%r10)
        mov     %rsi, %rbx
        /* Copy the command line and e820 map while the VMM's page tables
         * (first 4 GiB) are still active. */
        movl    BP_CMD_LINE_PTR(%rbx), %esi
        movl    BP_CMDLINE_SIZE(%rbx), %ecx
        test    %esi, %esi
        jz      1f
        mov     $BI_CMDLINE_MAX - 1, %eax
        cmp     %eax, %ecx
        cmova   %eax, %ecx
        mov     %ecx, BI_CMDLINE_LEN(%r10)
        lea     BI_CMDLINE(%r10), %rdi
        add     $7, %ecx                /* whole qwords: each rep iteration */
        shr     $3, %ecx                /* is emulated (~1 us), so movsq */
        rep movsq
1:      movzbl  BP_E820_ENTRIES(%rbx), %ecx
        mov     $BP_E820_MAX, %eax
        cmp     %eax, %ecx
        cmova   %eax, %ecx
        mov     %ecx, BI_E820_N(%r10)
        imul    $E820_ENTRY_SIZE, %ecx, %ecx
        add     $7, %ecx
        shr     $3, %ecx
        lea     BP_E820_TABLE(%rbx), %rsi
        lea     BI_E820(%r10), %rdi
        rep movsq

        /* descriptor tables (R10 = &boot_info, RSP = CPU 0's stack) */
bsp_tables:
        lgdt    gdt_ptr(%rip)
        lidt    idt_ptr(%rip)
        pushq   $SEL_KCODE
        lea     2f(%rip), %rax
        pushq   %rax
        lretq
2:      mov     $SEL_KDATA, %eax
        mov     %eax, %ds
        mov     %eax, %es
        mov     %eax, %ss
        xor     %eax, %eax
        mov     %eax, %fs
        mov     %eax, %gs
        xor     %ebx, %ebx              /* CPU 0 */
        call    cpu_tables
        lea     pml4(%rip), %rax
        mov     %rax, %cr3

        rdtsc
        shl     $32, %rdx
        or      %rax, %rdx
        mov     %rdx, BI_TSC_READY(%r10)
        mov     $PACER_MARKER_KERNEL_READY, %al
        mov     $PACER_PORT_MARKER, %dx
        outb    %al, %dx
        mov     %r10, %rdi              /* user_start(&boot_info) */
        mov     $user_start, %r11
        /* IF=0 until SYS_APIC_INIT has masked LINT0: firmware may have left
         * the 8259 and a timer running, with LINT0 in ExtINT mode. */
        mov     $0x2, %eax
        jmp     enter_user

/* ---- PVH entry (Xen PVH boot protocol: QEMU -kernel, for one) -----------
 * 32-bit protected mode, paging off, flat CS/DS/ES/SS, IF=0, no stack,
 * EBX = physical address of struct hvm_start_info. Only the boot CPU comes
 * here. It copies the command line (NUL-terminated) and the memory map
 * (24-byte entries) into boot_info and joins the direct entry's path. */
#define HVM_START_MAGIC   0x336ec578
#define HVM_SI_VERSION    4
#define HVM_SI_CMDLINE    24
#define HVM_SI_MEMMAP     40
#define HVM_SI_MEMMAP_N   48
#define HVM_MEMMAP_ENTRY  24
        .code32
        .globl pvh_start32
pvh_start32:
        cli
        lgdt    ap_tramp_gdtr           /* our GDT, 32-bit base */
        ljmp    $SEL_KCODE32, $1f
1:      PM32_TO_LONG_MODE pvh_lm64

        .code64
pvh_lm64:
        rdtsc
        mov     %eax, %r8d
        mov     %edx, %r9d
        mov     $PACER_MARKER_FIRST_INSTRUCTION, %al
        mov     $PACER_PORT_MARKER, %dx
        outb    %al, %dx
        mov     $(PERCPU_BASE + PC_STACK_TOP), %esp
        shl     $32, %r9
        or      %r8, %r9
        lea     boot_info(%rip), %r10
        mov     %r9, BI_TSC_FIRST(%r10)
        mov     %ebx, %ebx
        mov     %rbx, BI_BOOT_PARAMS(%r10)
        /* everything it points to must be inside our 1 GiB identity map */
        mov     $(MAP_LIMIT - 0x1000), %r11
        cmp     %r11, %rbx
        jae     bsp_tables
        cmpl    $HVM_START_MAGIC, (%rbx)
        jne     bsp_tables
        mov     HVM_SI_CMDLINE(%rbx), %rsi
        test    %rsi, %rsi
        jz      2f
        cmp     %r11, %rsi
        jae     2f
        lea     BI_CMDLINE(%r10), %rdi
        xor     %ecx, %ecx
3:      movzbl  (%rsi, %rcx), %eax      /* bytewise: its length is not given */
        test    %al, %al
        jz      4f
        mov     %al, (%rdi, %rcx)
        inc     %ecx
        cmp     $BI_CMDLINE_MAX - 1, %ecx
        jb      3b
4:      mov     %ecx, BI_CMDLINE_LEN(%r10)
2:      cmpl    $1, HVM_SI_VERSION(%rbx)   /* the memory map came with version 1 */
        jb      bsp_tables
        mov     HVM_SI_MEMMAP(%rbx), %rsi
        cmp     %r11, %rsi
        jae     bsp_tables
        mov     HVM_SI_MEMMAP_N(%rbx), %ecx
        mov     $BP_E820_MAX, %eax
        cmp     %eax, %ecx
        cmova   %eax, %ecx
        mov     %ecx, BI_E820_N(%r10)
        lea     BI_E820(%r10), %rdi
        test    %ecx, %ecx
        jz      bsp_tables
5:      mov     (%rsi), %rax            /* addr */
        mov     %rax, (%rdi)
        mov     8(%rsi), %rax           /* size */
        mov     %rax, 8(%rdi)
        mov     16(%rsi), %eax          /* type: the e820 numbering */
        mov     %eax, 16(%rdi)
        add     $HVM_MEMMAP_ENTRY, %rsi
        add     $E820_ENTRY_SIZE, %rdi
        dec     %ecx
        jnz     5b
        jmp     bsp_tables

/* The Xen ELF note that names the PVH entry (XEN_ELFNOTE_PHYS32_ENTRY). */
        .section .note.Xen, "a", @note
        .balign 4
        .long   4                       /* name size ("Xen\0") */
        .long   4                       /* descriptor size */
        .long   18                      /* XEN_ELFNOTE_PHYS32_ENTRY */
        .asciz  "Xen"
        .balign 4
        .long   pvh_start32
        .balign 4
        .text

/* ---- AP entry: from the trampoline, 32-bit protected mode, flat ---------- */
        .code32
ap_pm32:
        PM32_TO_LONG_MODE ap_lm64

        .code64
ap_lm64:
        lgdt    gdt_ptr(%rip)           /* the same GDT, now with a 64-bit base */
        lidt    idt_ptr(%rip)
        /* Who am I? The APIC id (= vCPU index), in the mode the BSP chose. */
        cmpb    $APIC_MODE_X2APIC, apic_mode(%rip)
        jne     1f
        mov     $MSR_APIC_BASE, %ecx
        rdmsr
        or      $0xC00, %eax            /* EN | EXTD: x2APIC mode */
        wrmsr
        mov     $X2APIC_ID, %ecx
        rdmsr
        mov     %eax, %ebx
        jmp     2f
1:      mov     $(XAPIC_MMIO + 0x20), %eax
        mov     (%rax), %ebx
        shr     $24, %ebx
2:      cmp     cpu_limit(%rip), %ebx   /* an index we have no block for: park */
        jae     ap_park
        mov     %ebx, %esp
        shl     $12, %esp               /* PERCPU_SIZE */
        add     $(PERCPU_BASE + PC_STACK_TOP), %esp
        call    cpu_tables
        call    apic_setup              /* C (k_smp.c); preserves RBX */
        mov     $PACER_MARKER_AP_ONLINE, %al
        mov     $PACER_PORT_MARKER, %dx
        outb    %al, %dx
        mov     %ebx, %edi              /* user_ap_start(index) */
        mov     $user_ap_start, %r11
        mov     $0x202, %eax            /* IF=1: LINT0 is masked */
        /* fall through */

/* Enter ring 3 at R11 with RDI as argument and RFLAGS = RAX, on CPU RBX's
 * user stack. */
enter_user:
        lea     1(%rbx), %rcx
        shl     $14, %rcx               /* USTACK_SIZE */
        add     $user_stacks, %rcx
        pushq   $SEL_UDATA
        pushq   %rcx
        pushq   %rax
        pushq   $SEL_UCODE
        pushq   %r11
        iretq

/* Fill the TSS of CPU RBX (RSP0, IST1, no I/O bitmap), record its index
 * and load TR. RSP is already in the CPU's block. Clobbers RAX, RCX. */
cpu_tables:
        mov     %rsp, %rcx
        and     $-PERCPU_SIZE, %rcx
        mov     %ebx, PC_INDEX(%rcx)
        lea     PC_STACK_TOP(%rcx), %rax
        mov     %rax, PC_TSS + 4(%rcx)  /* RSP0 */
        lea     PC_IST_TOP(%rcx), %rax
        mov     %rax, PC_TSS + 36(%rcx) /* IST1 */
        movw    $104, PC_TSS + 102(%rcx) /* I/O map base beyond the limit */
        mov     %ebx, %eax
        shl     $4, %eax
        add     $SEL_TSS0, %eax
        ltr     %ax
        ret

/* ---- system call trap ---------------------------------------------------
 * Ring 3 enters the kernel with `ud2` (RAX = nr, RDI/RSI/RDX = args).
 * SYSCALL cannot be used on this PVM KVM: it jumps to LSTAR but stays at
 * CPL 3 (measured: #PF U=1 fetching the LSTAR handler). Exceptions from
 * ring 3 are delivered through the IDT at CPL 0 on PVM and hardware alike. */
ud_entry:
        testb   $3, 8(%rsp)             /* from ring 3? */
        jz      5f
        mov     (%rsp), %rcx
        cmpw    $0x0b0f, (%rcx)         /* exactly a ud2 */
        jne     5f
        addq    $2, (%rsp)              /* resume after the ud2 */
        sub     $8, %rsp                /* 16-byte alignment for the call */
        mov     %rax, %rcx
        lea     8(%rsp), %r8            /* the IRET frame */
        call    k_syscall               /* (a0, a1, a2, nr, frame) */
        add     $8, %rsp
        iretq
5:      pushq   $0                      /* a real #UD: panic */
        pushq   $6
        jmp     isr_common

/* ---- interrupts (vector >= 32): count in the CPU's block, then EOI ------ */
irq_timer:
        pushq   %rax
        mov     %rsp, %rax
        and     $-PERCPU_SIZE, %rax
        incq    PC_TIMER(%rax)
        popq    %rax
        jmp     apic_eoi_iret
irq_ipi:
        pushq   %rax
        mov     %rsp, %rax
        and     $-PERCPU_SIZE, %rax
        incq    PC_IPI(%rax)
        popq    %rax
        jmp     apic_eoi_iret
irq_spurious:                           /* the SDM: no EOI for the spurious vector */
        pushq   %rax
        mov     %rsp, %rax
        and     $-PERCPU_SIZE, %rax
        incq    PC_SPURIOUS(%rax)
        popq    %rax
        iretq

/* EOI to the local APIC in the mode in use (none before SYS_APIC_INIT or
 * without a LAPIC: an injected vector is then just counted), then IRETQ. */
apic_eoi_iret:
        cmpb    $0, pv_eoi_on(%rip)     /* KVM PV EOI: ended by clearing the */
        je      3f                      /* flag the hypervisor set, if set */
        pushq   %rax
        mov     %rsp, %rax
        and     $-PERCPU_SIZE, %rax
        lock btrl $0, PC_PV_EOI(%rax)
        popq    %rax
        jc      2f
3:      cmpb    $APIC_MODE_X2APIC, apic_mode(%rip)
        jne     1f
        pushq   %rax
        pushq   %rcx
        pushq   %rdx
        mov     $X2APIC_EOI, %ecx
        xor     %eax, %eax
        xor     %edx, %edx
        wrmsr
        popq    %rdx
        popq    %rcx
        popq    %rax
        iretq
1:      cmpb    $APIC_MODE_XAPIC, apic_mode(%rip)
        jne     2f
        pushq   %rax
        mov     $(XAPIC_MMIO + 0xB0), %eax
        movl    $0, (%rax)
        popq    %rax
2:      iretq

/* ---- common ISR path ----------------------------------------------------- */
isr_common:
        cmpq    $32, (%rsp)
        jae     3f
        cmpq    $13, (%rsp)             /* #GP at the probing RDMSR? */
        jne     6f
        pushq   %rax
        lea     msr_probe_insn(%rip), %rax
        cmp     %rax, 24(%rsp)          /* RAX, vector, error code, RIP */
        jne     7f
        lea     msr_probe_fail(%rip), %rax
        mov     %rax, 24(%rsp)
        popq    %rax
        add     $16, %rsp
        iretq
7:      popq    %rax
6:      /* exception: save all GPRs and panic (never returns) */
        pushq   %rax
        pushq   %rbx
        pushq   %rcx
        pushq   %rdx
        pushq   %rsi
        pushq   %rdi
        pushq   %rbp
        pushq   %r8
        pushq   %r9
        pushq   %r10
        pushq   %r11
        pushq   %r12
        pushq   %r13
        pushq   %r14
        pushq   %r15
        mov     %rsp, %rdi
        and     $-16, %rsp
        call    k_exception
4:      cli
        hlt
        jmp     4b
3:      /* another interrupt: count it, EOI if a LAPIC is in use */
        add     $16, %rsp
        pushq   %rax
        mov     %rsp, %rax
        and     $-PERCPU_SIZE, %rax
        incq    PC_OTHER(%rax)
        popq    %rax
        jmp     apic_eoi_iret

/* int rdmsr_safe(uint32_t msr, uint64_t *val): 0, or -1 if RDMSR raised
 * #GP (isr_common resumes at msr_probe_fail). Probes for a LAPIC. */
        .globl rdmsr_safe
rdmsr_safe:
        mov     %edi, %ecx
msr_probe_insn:
        rdmsr
        shl     $32, %rdx
        mov     %eax, %eax
        or      %rdx, %rax
        mov     %rax, (%rsi)
        xor     %eax, %eax
        ret
msr_probe_fail:
        mov     $-1, %eax
        ret

ap_park:
        cli
        hlt
        jmp     ap_park

        .globl k_triple_fault
k_triple_fault:
        lidt    idt_null(%rip)
        ud2                             /* #UD -> #GP -> #DF -> shutdown */
        jmp     k_triple_fault

/* ---- static data -------------------------------------------------------- */
        .data
        .balign 16
        .globl gdt, gdt_end
gdt:    .quad 0                         /* 0x00 */
        .quad 0x00cf9b000000ffff        /* 0x08 kernel code, 32-bit (AP trampoline) */
        .quad 0x00af9b000000ffff        /* 0x10 kernel code, L=1 */
        .quad 0x00cf93000000ffff        /* 0x18 kernel data */
        .quad 0x00cffb000000ffff        /* 0x20 user code 32 (unused) */
        .quad 0x00cff3000000ffff        /* 0x28 user data */
        .quad 0x00affb000000ffff        /* 0x30 user code, L=1 */
        /* 0x38 + 16 * i: CPU i's TSS (available 64-bit TSS, type 9). Each
         * CPU has its own: LTR marks the descriptor busy. */
        .set i, 0
        .rept MAX_CPUS
        .set t, PERCPU_BASE + i * PERCPU_SIZE + PC_TSS
        .word 103
        .word t & 0xffff
        .byte (t >> 16) & 0xff
        .byte 0x89
        .byte 0
        .byte (t >> 24) & 0xff
        .long 0
        .long 0
        .set i, i + 1
        .endr
gdt_end:
        .balign 16
        .word 0, 0, 0
gdt_ptr: .word gdt_end - gdt - 1
        .quad gdt
        .word 0, 0, 0
idt_ptr: .word 256 * 16 - 1
        .quad idt
        .word 0, 0, 0
idt_null: .word 0
        .quad 0

        /* IDT: 64-bit interrupt gates (type 0xE, DPL 0) to the fixed stubs */
        .balign 4096
idt:
        .set vec, 0
        .rept 256
        .set h, KERNEL_BASE + vec * STUB_SIZE
        .word h & 0xffff
        .word SEL_KCODE
        .if (vec == 2) || (vec == 8) || (vec == 18)
        .byte 1                         /* IST1 */
        .else
        .byte 0
        .endif
        .byte 0x8E
        .word (h >> 16) & 0xffff
        .long 0                         /* h >> 32 */
        .long 0
        .set vec, vec + 1
        .endr

        /* Page tables: identity map of the first 1 GiB with 2 MiB pages.
         * 0-4 MiB (kernel, per-CPU blocks, boot data) supervisor-only; the
         * rest U=1. Plus the local APIC's page (0xFEE00000, 2 MiB page,
         * uncached: PCD | PWT) for xAPIC mode. */
        .balign 4096
pml4:   .quad pdpt + 0x7
        .fill 511, 8, 0
pdpt:   .quad pd + 0x7
        .quad 0, 0
        .quad pd_apic + 0x3
        .fill 508, 8, 0
pd:     .quad 0x0 + 0x83                /* P, RW, PS */
        .quad 0x200000 + 0x83
        .set i, 2
        .rept 510
        .quad (i << 21) + 0x87          /* P, RW, U, PS */
        .set i, i + 1
        .endr
pd_apic:
        .fill (XAPIC_MMIO >> 21) & 511, 8, 0
        .quad XAPIC_MMIO + 0x9B         /* P, RW, PWT, PCD, PS */
        .fill 511 - ((XAPIC_MMIO >> 21) & 511), 8, 0

        /* Per-CPU kernel blocks (zero at boot: bss), at PERCPU_BASE. */
        .section .kpercpu, "aw", @nobits
        .globl percpu_area
percpu_area:
        .skip MAX_CPUS * PERCPU_SIZE

        .section .note.GNU-stack, "", @progbits
