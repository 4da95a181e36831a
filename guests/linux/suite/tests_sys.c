/* Kernel-path tests: system calls, pipes, process creation.
 *
 * syscall  - one loop = close(dup(0)), getpid(), getuid(), umask(022):
 *            five cheap system calls (getpid through syscall(2) so no C
 *            library can answer it from a cache); lps.
 * pipe     - one loop = write 512 bytes into a pipe and read them back,
 *            in one process; lps.
 * context1 - two processes pass an increasing counter back and forth
 *            over two pipes; one loop = one round trip, so two context
 *            switches when both share a CPU; the receiver checks every
 *            value; lps.
 * spawn    - one loop = fork(), the child exits at once, the parent
 *            waits for it; lps. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ubench.h"

static int finish(struct ub_result *res, unsigned long loops, double t0)
{
    double el = ub_now() - t0;
    ub_disarm_timer();
    res->count = (double)loops;
    res->seconds = el;
    res->score = (double)loops / el;
    return 0;
}

int ub_test_syscall(const struct ub_opts *o, struct ub_result *res)
{
    unsigned long loops = 0;
    ub_arm_timer(o->seconds);
    double t0 = ub_now();
    while (!ub_stop) {
        close(dup(0));
        syscall(SYS_getpid);
        getuid();
        umask(022);
        loops++;
    }
    return finish(res, loops, t0);
}

static int full_write(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int full_read(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int ub_test_pipe(const struct ub_opts *o, struct ub_result *res)
{
    char buf[512];
    int p[2];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (char)i;
    if (pipe(p) != 0) {
        ub_fail("pipe");
        return -1;
    }
    unsigned long loops = 0;
    ub_arm_timer(o->seconds);
    double t0 = ub_now();
    while (!ub_stop) {
        if (full_write(p[1], buf, sizeof buf) || full_read(p[0], buf, sizeof buf)) {
            ub_disarm_timer();
            ub_fail("pipe write/read");
            return -1;
        }
        loops++;
    }
    finish(res, loops, t0);
    close(p[0]);
    close(p[1]);
    return 0;
}

int ub_test_context1(const struct ub_opts *o, struct ub_result *res)
{
    int to_child[2], to_parent[2];
    if (pipe(to_child) != 0 || pipe(to_parent) != 0) {
        ub_fail("pipe");
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        ub_fail("fork");
        return -1;
    }
    if (pid == 0) {
        /* echo side: read n, check it follows the last one, send it back */
        close(to_child[1]);
        close(to_parent[0]);
        uint64_t expect = 0, v;
        while (full_read(to_child[0], &v, sizeof v) == 0) {
            if (v != expect)
                _exit(3);
            expect++;
            if (full_write(to_parent[1], &v, sizeof v))
                break;
        }
        _exit(0);
    }
    close(to_child[0]);
    close(to_parent[1]);
    uint64_t n = 0, back;
    int bad = 0;
    ub_arm_timer(o->seconds);
    double t0 = ub_now();
    while (!ub_stop) {
        if (full_write(to_child[1], &n, sizeof n) || full_read(to_parent[0], &back, sizeof back) ||
            back != n) {
            bad = 1;
            break;
        }
        n++;
    }
    finish(res, (unsigned long)n, t0);
    close(to_child[1]); /* the echo side sees EOF and exits */
    close(to_parent[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (bad || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        ub_fail("context1: the two processes lost step");
        return -1;
    }
    return 0;
}

int ub_test_spawn(const struct ub_opts *o, struct ub_result *res)
{
    unsigned long loops = 0;
    ub_arm_timer(o->seconds);
    double t0 = ub_now();
    while (!ub_stop) {
        pid_t pid = fork();
        if (pid == 0)
            _exit(0);
        if (pid < 0) {
            ub_disarm_timer();
            ub_fail("fork");
            return -1;
        }
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        loops++;
    }
    return finish(res, loops, t0);
}
