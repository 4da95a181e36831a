/* Ring-3 entry. The kernel IRETQs here with RDI = &boot_info and RSP =
 * user_stack_top. */
#include "guest.h"
        .text
        .globl user_start
user_start:
        xor     %ebp, %ebp
        call    umain           /* umain(struct boot_info *) never returns */
        ud2

        .bss
        .globl boot_info
        .balign 4096
boot_info:
        .skip BI_SIZE
        .balign 4096
        .skip 65536
        .globl user_stack_top
user_stack_top:

        .section .note.GNU-stack, "", @progbits
