/* Pacer guest protocol constants (see guests/PROTOCOL.md).
 * The VMM's side lives in devices/src/bench_port.rs; keep them in sync.
 * Usable from C and from assembly (.S). */
#ifndef PACER_ABI_H
#define PACER_ABI_H

/* boot_params ("zero page") offsets read by the guest */
#define BP_E820_ENTRIES   0x1E8   /* u8 */
#define BP_CMD_LINE_PTR   0x228   /* u32 */
#define BP_CMDLINE_SIZE   0x238   /* u32 */
#define BP_E820_TABLE     0x2D0   /* 20-byte entries */
#define BP_E820_MAX       128
#define E820_ENTRY_SIZE   20
#define E820_RAM          1

/* ports */
#define PACER_PORT_COM1     0x3F8
#define PACER_PORT_MARKER   0xE00   /* out, 8 bit */
#define PACER_PORT_RECORD   0xE04   /* out, 32 bit: guest-physical addr of a record */
#define PACER_PORT_EXIT     0xE08   /* out, 32 bit: exit status */

/* markers */
#define PACER_MARKER_FIRST_INSTRUCTION 1
#define PACER_MARKER_KERNEL_READY      2
#define PACER_MARKER_WORKLOAD_START    3
#define PACER_MARKER_WORKLOAD_DONE     4
#define PACER_MARKER_PANIC             0xEE

/* result records */
#define PACER_RECORD_MAGIC    0x52434150u  /* "PACR" */
#define PACER_RECORD_VERSION  1
#define PACER_RECORD_SIZE     64

#define PACER_KIND_WORK_SAMPLE 1
#define PACER_KIND_WORK_DONE   2
#define PACER_KIND_BOOT_TIMES  3
#define PACER_KIND_TEXT        4
#define PACER_KIND_ERROR       5

#define PACER_TEXT_MAX 4096

/* exit status the guest kernel uses for an unexpected exception: 0x100 + vector */
#define PACER_EXIT_PANIC_BASE 0x100

#ifndef __ASSEMBLER__
#include <stdint.h>

struct pacer_record {
    uint32_t magic;
    uint16_t version;
    uint16_t kind;
    uint32_t vcpu;
    uint32_t seq;
    uint64_t tsc;
    uint64_t v[5];
};
_Static_assert(sizeof(struct pacer_record) == PACER_RECORD_SIZE, "record size");
#endif

#endif
