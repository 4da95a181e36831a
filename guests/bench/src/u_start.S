/* Ring-3 entries. The kernel IRETQs to user_start (boot CPU, RDI =
 * &boot_info) or user_ap_start (an AP, RDI = its index), each on the CPU's
 * own stack in user_stacks (CPU i's stack ends at user_stacks + (i + 1) *
 * USTACK_SIZE). */
#include "guest.h"
        .text
        .globl user_start, user_ap_start
user_start:
        xor     %ebp, %ebp
        call    umain           /* umain(struct boot_info *) never returns */
        ud2
user_ap_start:
        xor     %ebp, %ebp
        call    uap_main        /* uap_main(index) never returns */
        ud2

        .bss
        .globl boot_info, user_stacks
        .balign 4096
boot_info:
        .skip BI_SIZE
        .balign 4096
user_stacks:
        .skip MAX_CPUS * USTACK_SIZE

        .section .note.GNU-stack, "", @progbits
