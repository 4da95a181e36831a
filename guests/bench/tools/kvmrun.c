/* kvmrun: dev tool (not part of the product). Boots the bench guest ELF on
 * raw /dev/kvm the way PROTOCOL.md says the VMM does (one vCPU, no in-kernel
 * irqchip) and prints markers (host-timed), records, COM1 output and the
 * exit.  usage: kvmrun [-m MiB] [-t seconds] [-H max_hlts] [-I irq_period_ms] [-V vcpu_index] guest.elf [cmdline]
 * -V n starts the vCPU with RDI = n (vCPU index; n != 0 must park).
 * -I injects vector 32 with KVM_INTERRUPT every period (signal-kicked KVM_RUN). 
 * exit code: guest status, or 100 shutdown, 101 internal error, 102 other. */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include "pacer_abi.h"

#define DIE(...) do { fprintf(stderr, "kvmrun: " __VA_ARGS__); fprintf(stderr, " (%s)\n", strerror(errno)); exit(102); } while (0)

static uint8_t *mem;
static uint64_t mem_size;
static double t_start, t_run;
static uint32_t tsc_khz;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void on_alarm(int s) { (void)s; }

static void load_elf(const char *path, uint64_t *entry)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) DIE("open %s", path);
    struct stat st;
    fstat(fd, &st);
    uint8_t *f = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f == MAP_FAILED) DIE("mmap elf");
    Elf64_Ehdr *eh = (Elf64_Ehdr *)f;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64) { errno = EINVAL; DIE("not ELF64"); }
    for (int i = 0; i < eh->e_phnum; i++) {
        Elf64_Phdr *ph = (Elf64_Phdr *)(f + eh->e_phoff + i * eh->e_phentsize);
        if (ph->p_type != PT_LOAD) continue;
        if (ph->p_paddr + ph->p_memsz > mem_size) { errno = ERANGE; DIE("segment outside RAM"); }
        memcpy(mem + ph->p_paddr, f + ph->p_offset, ph->p_filesz);
        memset(mem + ph->p_paddr + ph->p_filesz, 0, ph->p_memsz - ph->p_filesz);
    }
    *entry = eh->e_entry;
    munmap(f, st.st_size);
    close(fd);
}

static const char *marker_name(int m)
{
    switch (m) {
    case 1: return "FIRST_INSTRUCTION";
    case 2: return "KERNEL_READY";
    case 3: return "WORKLOAD_START";
    case 4: return "WORKLOAD_DONE";
    case 5: return "SMP_START";
    case 6: return "AP_ONLINE";
    case 7: return "SMP_READY";
    case 0xEE: return "PANIC";
    default: return "?";
    }
}

static void print_record(uint32_t addr)
{
    if ((uint64_t)addr + 64 > mem_size) { printf("record: bad address %#x\n", addr); return; }
    struct pacer_record r;
    memcpy(&r, mem + addr, 64);
    if (r.magic != PACER_RECORD_MAGIC || r.version != 1) { printf("record: bad magic/version\n"); return; }
    printf("[%9.3f ms] record kind=%u vcpu=%u seq=%u tsc=%llu v=[%llu %llu %llu %llu %llu]",
           now_ms() - t_run, r.kind, r.vcpu, r.seq, (unsigned long long)r.tsc,
           (unsigned long long)r.v[0], (unsigned long long)r.v[1], (unsigned long long)r.v[2],
           (unsigned long long)r.v[3], (unsigned long long)r.v[4]);
    if (r.kind == PACER_KIND_WORK_DONE && r.v[1])
        printf(" -> units/s(host recomputed)=%.0f", (double)r.v[0] * tsc_khz * 1e3 / r.v[1]);
    if (r.kind == PACER_KIND_BOOT_TIMES)
        printf(" -> first->ready %.1f us (guest TSC)", (double)(r.v[1] - r.v[0]) * 1e3 / tsc_khz);
    if (r.kind == PACER_KIND_TEXT && r.v[0] + r.v[1] <= mem_size && r.v[1] <= 4096)
        printf(" text=\"%.*s\"", (int)r.v[1], (char *)mem + r.v[0]);
    printf("\n");
}

int main(int argc, char **argv)
{
    unsigned mib = 256, timeout = 30, max_hlt = 3, irq_ms = 0, injected = 0, vcpu_index = 0;
    int opt;
    while ((opt = getopt(argc, argv, "m:t:H:I:V:")) != -1) {
        if (opt == 'm') mib = atoi(optarg);
        else if (opt == 't') timeout = atoi(optarg);
        else if (opt == 'H') max_hlt = atoi(optarg);
        else if (opt == 'I') irq_ms = atoi(optarg);
        else if (opt == 'V') vcpu_index = atoi(optarg);
        else { fprintf(stderr, "usage: kvmrun [-m MiB] [-t s] [-H hlts] guest.elf [cmdline]\n"); return 102; }
    }
    if (optind >= argc) { fprintf(stderr, "usage: kvmrun [-m MiB] [-t s] [-H hlts] guest.elf [cmdline]\n"); return 102; }
    const char *elf = argv[optind];
    const char *cmd = optind + 1 < argc ? argv[optind + 1] : "";
    setvbuf(stdout, NULL, _IOLBF, 0);

    t_start = now_ms();
    int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
    if (kvm < 0) DIE("/dev/kvm");
    int vm = ioctl(kvm, KVM_CREATE_VM, 0);
    if (vm < 0) DIE("KVM_CREATE_VM");
    mem_size = (uint64_t)mib << 20;
    if (mem_size > (3ull << 30)) mem_size = 3ull << 30;
    mem = mmap(NULL, mem_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) DIE("mmap ram");
    struct kvm_userspace_memory_region reg = { .slot = 0, .guest_phys_addr = 0, .memory_size = mem_size,
                                                .userspace_addr = (uint64_t)mem };
    if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &reg) < 0) DIE("SET_USER_MEMORY_REGION");
    ioctl(vm, KVM_SET_TSS_ADDR, 0xfffbd000ul); /* VMX needs it; harmless elsewhere */
    int vcpu = ioctl(vm, KVM_CREATE_VCPU, 0);
    if (vcpu < 0) DIE("KVM_CREATE_VCPU");
    int run_sz = ioctl(kvm, KVM_GET_VCPU_MMAP_SIZE, 0);
    struct kvm_run *run = mmap(NULL, run_sz, PROT_READ | PROT_WRITE, MAP_SHARED, vcpu, 0);
    if (run == MAP_FAILED) DIE("mmap kvm_run");

    /* CPUID */
    struct { struct kvm_cpuid2 c; struct kvm_cpuid_entry2 e[256]; } cpuid = { .c.nent = 256 };
    if (ioctl(kvm, KVM_GET_SUPPORTED_CPUID, &cpuid) < 0) DIE("GET_SUPPORTED_CPUID");
    if (ioctl(vcpu, KVM_SET_CPUID2, &cpuid) < 0) DIE("SET_CPUID2");
    int khz = ioctl(vcpu, KVM_GET_TSC_KHZ, 0);
    tsc_khz = khz > 0 ? khz : 0;

    uint64_t entry;
    load_elf(elf, &entry);

    /* boot GDT at 0x500 */
    uint64_t *gdt = (uint64_t *)(mem + 0x500);
    gdt[0] = 0; gdt[1] = 0; gdt[2] = 0x00af9b000000ffffull; gdt[3] = 0x00cf93000000ffffull;
    /* page tables: PML4 0x9000, PDPT 0xA000, PDs 0xB000..: 4 GiB, 2 MiB pages, supervisor */
    uint64_t *pml4 = (uint64_t *)(mem + 0x9000), *pdpt = (uint64_t *)(mem + 0xA000);
    pml4[0] = 0xA000 | 3;
    for (int i = 0; i < 4; i++) {
        pdpt[i] = (0xB000 + i * 0x1000) | 3;
        uint64_t *pd = (uint64_t *)(mem + 0xB000 + i * 0x1000);
        for (int j = 0; j < 512; j++)
            pd[j] = (((uint64_t)i << 30) + ((uint64_t)j << 21)) | 0x83;
    }
    /* boot_params at 0x7000, command line at 0x20000 */
    uint8_t *bp = mem + 0x7000;
    char *cl = (char *)mem + 0x20000;
    snprintf(cl, 4096, "%s%stsc_khz=%u vcpus=1", cmd, *cmd ? " " : "", tsc_khz);
    *(uint32_t *)(bp + BP_CMD_LINE_PTR) = 0x20000;
    *(uint32_t *)(bp + BP_CMDLINE_SIZE) = strlen(cl) + 1;
    struct __attribute__((packed)) { uint64_t a, s; uint32_t t; } e820[3] = {
        { 0, 0xA0000, 1 }, { 0xA0000, 0x60000, 2 }, { 0x100000, mem_size - 0x100000, 1 } };
    memcpy(bp + BP_E820_TABLE, e820, sizeof e820);
    bp[BP_E820_ENTRIES] = 3;

    struct kvm_sregs sr;
    if (ioctl(vcpu, KVM_GET_SREGS, &sr) < 0) DIE("GET_SREGS");
    struct kvm_segment cs = { .base = 0, .limit = 0xffffffff, .selector = 0x10, .type = 0xb, .present = 1,
                              .dpl = 0, .db = 0, .s = 1, .l = 1, .g = 1 };
    struct kvm_segment ds = cs;
    ds.selector = 0x18; ds.type = 3; ds.l = 0; ds.db = 1;
    sr.cs = cs; sr.ds = sr.es = sr.fs = sr.gs = sr.ss = ds;
    sr.gdt.base = 0x500; sr.gdt.limit = 31;
    sr.idt.base = 0; sr.idt.limit = 0;
    sr.cr0 = 0x80050033; sr.cr3 = 0x9000; sr.cr4 = 0x620; sr.efer = 0x501;
    if (ioctl(vcpu, KVM_SET_SREGS, &sr) < 0) DIE("SET_SREGS");
    struct kvm_regs r = { .rip = entry, .rsi = 0x7000, .rsp = 0x8ff0, .rflags = 2, .rdi = vcpu_index };
    if (ioctl(vcpu, KVM_SET_REGS, &r) < 0) DIE("SET_REGS");

    struct sigaction sa = { .sa_handler = on_alarm };
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = { .it_value = { timeout, 0 } };
    if (irq_ms)
        it.it_value = it.it_interval = (struct timeval){ irq_ms / 1000, (irq_ms % 1000) * 1000 };
    setitimer(ITIMER_REAL, &it, NULL);
    printf("kvmrun: setup %.3f ms, cmdline \"%s\"\n", now_ms() - t_start, cl);

    char line[1024];
    unsigned ll = 0, hlts = 0;
    int status = 102;
    t_run = now_ms();
    for (;;) {
        if (ioctl(vcpu, KVM_RUN, 0) < 0) {
            if (errno == EINTR && now_ms() - t_run < timeout * 1e3) {
                if (irq_ms) {
                    struct kvm_sregs s2;
                    ioctl(vcpu, KVM_GET_SREGS, &s2);
                    if (run->ready_for_interrupt_injection || s2.cs.dpl == 3) {
                        struct kvm_interrupt irq = { .irq = 32 };
                        if (ioctl(vcpu, KVM_INTERRUPT, &irq) == 0) injected++;
                    }
                }
                continue;
            }
            if (errno == EINTR) { printf("kvmrun: timeout after %u s\n", timeout); status = 102; break; }
            DIE("KVM_RUN");
        }
        if (run->exit_reason == KVM_EXIT_IO) {
            uint8_t *d = (uint8_t *)run + run->io.data_offset;
            uint16_t port = run->io.port;
            if (run->io.direction == KVM_EXIT_IO_OUT) {
                for (unsigned c = 0; c < run->io.count; c++, d += run->io.size) {
                    if (port == 0x3F8) {
                        if (*d == '\n' || ll == sizeof line - 1) {
                            printf("[%9.3f ms] serial: %.*s\n", now_ms() - t_run, ll, line);
                            ll = 0;
                        } else if (*d != '\r')
                            line[ll++] = *d;
                    } else if (port == PACER_PORT_MARKER) {
                        double t = now_ms();
                        printf("[%9.3f ms] marker %s (since process start %.3f ms)\n", t - t_run,
                               marker_name(*d), t - t_start);
                    } else if (port == PACER_PORT_RECORD && run->io.size == 4) {
                        print_record(*(uint32_t *)d);
                    } else if (port == PACER_PORT_EXIT && run->io.size == 4) {
                        status = *(uint32_t *)d;
                        printf("[%9.3f ms] exit status %u\n", now_ms() - t_run, status);
                        goto out;
                    } else if (port >= 0x3F8 && port <= 0x3FF) {
                    } else {
                        printf("kvmrun: unhandled out port %#x\n", port);
                    }
                }
            } else {
                memset(d, port == 0x3FD ? 0x60 : (port >= 0x3F8 && port <= 0x3FF ? 0 : 0xff),
                       run->io.size * run->io.count);
            }
        } else if (run->exit_reason == KVM_EXIT_HLT) {
            printf("[%9.3f ms] hlt #%u\n", now_ms() - t_run, ++hlts);
            if (hlts >= max_hlt) { status = 0; printf("kvmrun: stopping after %u hlts\n", hlts); break; }
        } else if (run->exit_reason == KVM_EXIT_SHUTDOWN) {
            printf("[%9.3f ms] KVM_EXIT_SHUTDOWN (triple fault)\n", now_ms() - t_run);
            status = 100;
            break;
        } else if (run->exit_reason == KVM_EXIT_INTERNAL_ERROR) {
            printf("KVM_EXIT_INTERNAL_ERROR suberror %u, ndata %u:", run->internal.suberror, run->internal.ndata);
            for (unsigned i = 0; i < run->internal.ndata && i < 16; i++)
                printf(" %#llx", (unsigned long long)run->internal.data[i]);
            printf("\n");
            status = 101;
            break;
        } else {
            printf("kvmrun: exit reason %u\n", run->exit_reason);
            status = 102;
            break;
        }
    }
out:
    if (ll) printf("serial: %.*s\n", ll, line);
    if (status >= 100) {
        ioctl(vcpu, KVM_GET_REGS, &r);
        ioctl(vcpu, KVM_GET_SREGS, &sr);
        printf("rip=%#llx rsp=%#llx rax=%#llx cs=%#x cr2=%#llx cr3=%#llx\n", r.rip, r.rsp, r.rax,
               sr.cs.selector, sr.cr2, sr.cr3);
    }
    if (irq_ms) printf("kvmrun: injected %u interrupts\n", injected);
    printf("kvmrun: total %.3f ms\n", now_ms() - t_start);
    return status;
}
