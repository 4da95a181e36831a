/* Bench guest kernel, C part: system calls, polled COM1 output, panic.
 * Ring 0: compiled with -mgeneral-regs-only (no SSE; emulated on PVM).
 * Every call acts on the calling CPU (its block, found from RSP). */
#include "k.h"

extern char boot_info[];
void k_triple_fault(void) __attribute__((noreturn));

struct regs {
    uint64_t r15, r14, r13, r12, r11, r10, r9, r8;
    uint64_t rbp, rdi, rsi, rdx, rcx, rbx, rax;
    uint64_t vec, err, rip, cs, rflags, rsp, ss;
};

static __attribute__((noreturn)) void halt_forever(void)
{
    for (;;)
        __asm__ volatile("cli; hlt");
}

static int fifo_on;
static volatile uint32_t serial_lock;

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

/* One writer at a time, so that each SYS_WRITE (a whole line) stays whole.
 * IF=0 in the kernel: the holder is never interrupted on its own CPU. */
static void serial_write_locked(const char *s, uint64_t n)
{
    while (__atomic_exchange_n(&serial_lock, 1, __ATOMIC_ACQUIRE))
        while (serial_lock)
            ;
    serial_write(s, n);
    __atomic_store_n(&serial_lock, 0, __ATOMIC_RELEASE);
}

static uint64_t irq_count(uint64_t which)
{
    struct percpu *pc = this_cpu();
    switch (which) {
    case IRQ_TIMER: return pc->timer;
    case IRQ_IPI: return pc->ipi;
    case IRQ_SPURIOUS: return pc->spurious;
    case IRQ_OTHER: return pc->other;
    default: return pc->timer + pc->ipi + pc->spurious + pc->other;
    }
}

/* Ports SYS_FLOOD_PORTS leaves alone: those that would end the run early
 * (i8042 reset, PCI config/reset, isa-debug-exit, ACPI power-off, Pacer's
 * exit port), state the VMM does not own (PIC, PIT, RTC) and what the other
 * floods cover (COM1, Pacer's ports). */
static int port_spared(uint32_t p)
{
    return (p >= 0x20 && p <= 0x21) || (p >= 0x40 && p <= 0x43) || (p >= 0x60 && p <= 0x6f)
        || (p >= 0x70 && p <= 0x71) || (p >= 0xa0 && p <= 0xa1) || p == 0xf4
        || (p >= 0x3f8 && p <= 0x3ff) || (p >= 0x600 && p <= 0x63f)
        || (p >= 0xcf8 && p <= 0xcff) || (p >= PACER_PORT_MARKER && p <= PACER_PORT_YIELD + 3);
}

/* The IRET frame a system call returns through. */
struct iret_frame {
    uint64_t rip, cs, rflags, rsp, ss;
};

long k_syscall(uint64_t a0, uint64_t a1, uint64_t a2, uint64_t nr, struct iret_frame *frame)
{
    switch (nr) {
    case SYS_WRITE:
        serial_write_locked((const char *)a0, a1);
        return (long)a1;
    case SYS_MARKER:
        outb(PACER_PORT_MARKER, (uint8_t)a0);
        return 0;
    case SYS_RECORD: {
        const uint64_t *src = (const uint64_t *)a0;
        uint64_t *dst = (uint64_t *)&this_cpu()->record;
        uint64_t *rec = dst;
        uint64_t cnt = 8;
        __asm__ volatile("rep movsq" : "+S"(src), "+D"(dst), "+c"(cnt) :: "memory");
        outl(PACER_PORT_RECORD, (uint32_t)(uintptr_t)rec);
        return 0;
    }
    case SYS_EXIT:
        outl(PACER_PORT_EXIT, (uint32_t)a0);
        halt_forever();
    case SYS_INFO:
        return (long)boot_info;
    case SYS_TRIPLE_FAULT:
        k_triple_fault();
    case SYS_FLOOD_SERIAL: {
        const uint8_t *p = (const uint8_t *)a0;
        for (uint64_t r = 0; r < a2; r++)
            for (uint64_t i = 0; i < a1; i++)
                outb(PACER_PORT_COM1, p[i]);
        return 0;
    }
    case SYS_FLOOD_RECORDS: {
        struct pacer_record *rec = (struct pacer_record *)&this_cpu()->record;
        const uint64_t *src = (const uint64_t *)a0;
        uint64_t *dst = (uint64_t *)rec;
        for (int i = 0; i < 8; i++)
            dst[i] = src[i];
        uint32_t magic = rec->magic;
        for (uint64_t n = 0; n < a1; n++) {
            rec->magic = (n % 8 == 7) ? 0xbad0bad0u : magic;
            rec->seq++;
            rec->v[1] = n + 1;      /* 0 units in n + 1 ticks: no figure to speak of */
            outl(PACER_PORT_RECORD, (uint32_t)(uintptr_t)rec);
        }
        return 0;
    }
    case SYS_FLOOD_PORTS: {
        uint64_t x = a0 | 1;
        for (uint64_t n = 0; n < a1; n++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if (!port_spared((uint32_t)(x & 0xffff)))
                outb((uint16_t)(x & 0xffff), (uint8_t)(x >> 16));
        }
        return 0;
    }
    case SYS_IDLE:
        halt_forever();
    case SYS_IRQ_COUNT:
        return (long)irq_count(a0);
    case SYS_APIC_INIT: {
        long r = k_apic_init(a0, a1, a2);
        /* The boot CPU's ring 3 ran with IF=0 so far (k_entry.S); LINT0 is
         * masked now, or there is no LAPIC to deliver anything through. */
        frame->rflags |= 0x200;
        return r;
    }
    case SYS_AP_START:
        return k_ap_start(a0);
    case SYS_CPU_ID:
        return this_cpu()->index;
    case SYS_CPU_COUNT:
        return cpu_limit;
    case SYS_SLEEP_UNTIL:
        return (long)k_sleep_until(a0);
    case SYS_IPI:
        return k_ipi(a0);
    case SYS_WAIT_IPI:
        return (long)k_wait_ipi(a0);
    case SYS_YIELD:
        outb(PACER_PORT_YIELD, 0);
        return 0;
    case SYS_STEAL_INIT:
        return k_steal_init(a0);
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
    char buf[320], *p = buf;
    uint64_t cr2;
    __asm__ volatile("mov %%cr2, %0" : "=r"(cr2));
    p = put_str(p, "\r\nPANIC: exception ");
    p = put_str(p, exc_names[r->vec & 31]);
    p = put_str(p, " vector=");
    p = put_hex(p, r->vec);
    p = put_str(p, " cpu=");
    p = put_hex(p, this_cpu()->index);
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
    /* no lock: the panicking CPU may hold it */
    serial_write(buf, (uint64_t)(p - buf));
    outb(PACER_PORT_MARKER, PACER_MARKER_PANIC);
    outl(PACER_PORT_EXIT, PACER_EXIT_PANIC_BASE + (uint32_t)r->vec);
    halt_forever();
}
