/* Bench guest kernel, C part: system calls, COM1 output, panic.
 * Ring 0: compiled with -mgeneral-regs-only (no SSE; emulated on PVM). */
#include <stdint.h>
#include "pacer_abi.h"
#include "guest.h"

extern uint64_t irq_count;
extern char boot_info[];
void k_triple_fault(void) __attribute__((noreturn));

struct regs {
    uint64_t r15, r14, r13, r12, r11, r10, r9, r8;
    uint64_t rbp, rdi, rsi, rdx, rcx, rbx, rax;
    uint64_t vec, err, rip, cs, rflags, rsp, ss;
};

static inline void outb(uint16_t port, uint8_t v) { __asm__ volatile("outb %0, %1" :: "a"(v), "Nd"(port)); }
static inline void outl(uint16_t port, uint32_t v) { __asm__ volatile("outl %0, %1" :: "a"(v), "Nd"(port)); }
static inline uint8_t inb(uint16_t port) { uint8_t v; __asm__ volatile("inb %1, %0" : "=a"(v) : "Nd"(port)); return v; }

static __attribute__((noreturn)) void halt_forever(void)
{
    for (;;)
        __asm__ volatile("cli; hlt");
}

static int fifo_on;
static struct pacer_record krec __attribute__((aligned(64)));

/* Polled 16550 output. FIFOs are enabled once; THRE (LSR bit 5) then means
 * the 16-byte transmit FIFO is empty, so one LSR poll per 16 bytes. */
static void serial_write(const char *s, uint64_t n)
{
    if (!fifo_on) {
        outb(PACER_PORT_COM1 + 2, 0x07);
        fifo_on = 1;
    }
    while (n) {
        for (unsigned spin = 0; spin < 100000; spin++)
            if (inb(PACER_PORT_COM1 + 5) & 0x20)
                break;
        uint64_t chunk = n < 16 ? n : 16;
        for (uint64_t i = 0; i < chunk; i++)
            outb(PACER_PORT_COM1, (uint8_t)s[i]);
        s += chunk;
        n -= chunk;
    }
}

long k_syscall(uint64_t a0, uint64_t a1, uint64_t a2, uint64_t nr)
{
    (void)a2;
    switch (nr) {
    case SYS_WRITE:
        serial_write((const char *)a0, a1);
        return (long)a1;
    case SYS_MARKER:
        outb(PACER_PORT_MARKER, (uint8_t)a0);
        return 0;
    case SYS_RECORD: {
        const uint64_t *src = (const uint64_t *)a0;
        uint64_t *dst = (uint64_t *)&krec;
        uint64_t cnt = 8;
        __asm__ volatile("rep movsq" : "+S"(src), "+D"(dst), "+c"(cnt) :: "memory");
        outl(PACER_PORT_RECORD, (uint32_t)(uintptr_t)&krec);
        return 0;
    }
    case SYS_EXIT:
        outl(PACER_PORT_EXIT, (uint32_t)a0);
        halt_forever();
    case SYS_INFO:
        return (long)boot_info;
    case SYS_TRIPLE_FAULT:
        k_triple_fault();
    case SYS_IDLE:
        halt_forever();
    case SYS_IRQ_COUNT:
        return (long)irq_count;
    default:
        return -1;
    }
}

static char *put_str(char *p, const char *s)
{
    while (*s)
        *p++ = *s++;
    return p;
}

static char *put_hex(char *p, uint64_t v)
{
    *p++ = '0';
    *p++ = 'x';
    for (int sh = 60; sh >= 0; sh -= 4)
        *p++ = "0123456789abcdef"[(v >> sh) & 0xf];
    return p;
}

static const char *const exc_names[32] = {
    "#DE", "#DB", "NMI", "#BP", "#OF", "#BR", "#UD", "#NM", "#DF", "CSO", "#TS", "#NP",
    "#SS", "#GP", "#PF", "?15", "#MF", "#AC", "#MC", "#XM", "#VE", "#CP", "?22", "?23",
    "?24", "?25", "?26", "?27", "#HV", "#VC", "#SX", "?31",
};

void __attribute__((noreturn)) k_exception(struct regs *r)
{
    char buf[256], *p = buf;
    uint64_t cr2;
    __asm__ volatile("mov %%cr2, %0" : "=r"(cr2));
    p = put_str(p, "\r\nPANIC: exception ");
    p = put_str(p, exc_names[r->vec & 31]);
    p = put_str(p, " vector=");
    p = put_hex(p, r->vec);
    p = put_str(p, " err=");
    p = put_hex(p, r->err);
    p = put_str(p, " rip=");
    p = put_hex(p, r->rip);
    p = put_str(p, " cs=");
    p = put_hex(p, r->cs);
    p = put_str(p, "\r\n  cr2=");
    p = put_hex(p, cr2);
    p = put_str(p, " rsp=");
    p = put_hex(p, r->rsp);
    p = put_str(p, " rflags=");
    p = put_hex(p, r->rflags);
    p = put_str(p, "\r\n");
    serial_write(buf, (uint64_t)(p - buf));
    outb(PACER_PORT_MARKER, PACER_MARKER_PANIC);
    outl(PACER_PORT_EXIT, PACER_EXIT_PANIC_BASE + (uint32_t)r->vec);
    halt_forever();
}
