/* Bench guest kernel: entry, ISR stubs, SYSCALL entry and all static
 * descriptor tables. Ring 0 code here is emulated on the PVM-style KVM
 * (~0.5 us per instruction), so the boot path is straight-line and the GDT,
 * IDT, TSS and page tables are link-time data: no loops at boot. */
#include "pacer_abi.h"
#include "guest.h"

        .code64

/* ---- 256 interrupt stubs, 16 bytes each, at KERNEL_BASE ---------------- */
        .section .kstubs, "ax"
        .set vec, 0
        .rept 256
        .balign STUB_SIZE
        .if vec == 6
        jmp     ud_entry                /* #UD: system call trap (ud2) */
        .elseif (vec == 8) || ((vec >= 10) && (vec <= 14)) || (vec == 17) || (vec == 21) || (vec == 29) || (vec == 30)
        .else
        pushq $0                        /* uniform frame: fake error code */
        .endif
        pushq $vec
        jmp isr_common
        .set vec, vec + 1
        .endr

/* ---- TSS at TSS_ADDR (fixed so the GDT descriptor is a constant) ------- */
        .section .ktss, "aw"
        .globl tss
tss:    .long 0
        .quad kstack_top                /* RSP0 */
        .quad 0, 0                      /* RSP1, RSP2 */
        .quad 0
        .quad dfstack_top               /* IST1: #DF, #NMI, #MC */
        .quad 0, 0, 0, 0, 0, 0          /* IST2-7 */
        .quad 0
        .word 0
        .word 104                       /* I/O map base beyond limit: no bitmap */
tss_end:

/* ---- entry ------------------------------------------------------------- */
        .text
        .globl _start
_start:
        /* RSI = boot_params, RDI = vCPU index (PROTOCOL.md). No stack use
         * until our own. This version runs on vCPU 0 only: any other vCPU
         * started here parks (cli; hlt) before touching shared state. */
        test    %edi, %edi
        jnz     ap_park
        rdtsc
        mov     %eax, %r8d
        mov     %edx, %r9d
        mov     $PACER_MARKER_FIRST_INSTRUCTION, %al
        mov     $PACER_PORT_MARKER, %dx
        outb    %al, %dx
        lea     kstack_top(%rip), %rsp
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

        /* descriptor tables */
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
        mov     $SEL_TSS, %eax
        ltr     %ax
        lea     pml4(%rip), %rax
        mov     %rax, %cr3

        /* SYSCALL: STAR, LSTAR, SFMASK, EFER.SCE */
        mov     $0xC0000081, %ecx
        xor     %eax, %eax
        mov     $((SEL_UCODE32 << 16) | SEL_KCODE), %edx
        wrmsr
        mov     $0xC0000082, %ecx
        mov     $syscall_entry, %eax
        xor     %edx, %edx
        wrmsr
        mov     $0xC0000084, %ecx
        mov     $0x47700, %eax          /* TF, IF, DF, IOPL, NT, AC */
        wrmsr
        mov     $0xC0000080, %ecx
        rdmsr
        or      $1, %eax
        wrmsr

        rdtsc
        shl     $32, %rdx
        or      %rax, %rdx
        mov     %rdx, BI_TSC_READY(%r10)
        mov     $PACER_MARKER_KERNEL_READY, %al
        mov     $PACER_PORT_MARKER, %dx
        outb    %al, %dx

        /* drop to ring 3: user_start(&boot_info) */
        mov     %r10, %rdi
        pushq   $SEL_UDATA
        pushq   $user_stack_top
        pushq   $0x202
        pushq   $SEL_UCODE
        pushq   $user_start
        iretq

/* ---- SYSCALL entry (single vCPU: IF is masked, one kernel stack) ------- */
        .globl syscall_entry
syscall_entry:
        mov     %rsp, user_rsp(%rip)
        lea     kstack_top(%rip), %rsp
        pushq   %rcx                    /* user RIP */
        pushq   %r11                    /* user RFLAGS */
        mov     %rax, %rcx
        call    k_syscall               /* (a0, a1, a2, nr) */
        popq    %r11
        popq    %rcx
        pushq   $SEL_UDATA              /* SYSRET is #UD on PVM: IRETQ */
        pushq   user_rsp(%rip)
        pushq   %r11
        pushq   $SEL_UCODE
        pushq   %rcx
        iretq

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
        call    k_syscall               /* (a0, a1, a2, nr) */
        add     $8, %rsp
        iretq
5:      pushq   $0                      /* a real #UD: panic */
        pushq   $6
        jmp     isr_common

/* ---- common ISR path --------------------------------------------------- */
isr_common:
        cmpq    $32, (%rsp)
        jae     3f
        /* exception: save all GPRs and panic (never returns) */
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
3:      /* external interrupt (vector >= 32): count and ignore */
        incq    irq_count(%rip)
        add     $16, %rsp
        iretq

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
gdt:    .quad 0                         /* 0x00 */
        .quad 0                         /* 0x08 */
        .quad 0x00af9b000000ffff        /* 0x10 kernel code, L=1 */
        .quad 0x00cf93000000ffff        /* 0x18 kernel data */
        .quad 0x00cffb000000ffff        /* 0x20 user code 32 (unused) */
        .quad 0x00cff3000000ffff        /* 0x28 user data */
        .quad 0x00affb000000ffff        /* 0x30 user code, L=1 */
        /* 0x38 TSS (available 64-bit TSS, type 9), base TSS_ADDR */
        .word 103
        .word TSS_ADDR & 0xffff
        .byte (TSS_ADDR >> 16) & 0xff
        .byte 0x89
        .byte 0
        .byte (TSS_ADDR >> 24) & 0xff
        .long 0
        .long 0
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
         * 0-2 MiB (kernel, boot data) supervisor-only; the rest U=1.
         * U=1 on the upper levels. */
        .balign 4096
pml4:   .quad pdpt + 0x7
        .fill 511, 8, 0
pdpt:   .quad pd + 0x7
        .fill 511, 8, 0
pd:     .quad 0x0 + 0x83                /* P, RW, PS */
        .set i, 1
        .rept 511
        .quad (i << 21) + 0x87          /* P, RW, U, PS */
        .set i, i + 1
        .endr

        .bss
        .balign 16
        .globl irq_count
irq_count: .quad 0
user_rsp:  .quad 0
        .balign 4096
        .skip 16384
kstack_top:
        .skip 4096
dfstack_top:

        .section .note.GNU-stack, "", @progbits
