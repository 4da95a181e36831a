/* The runner: `ubench run`.
 *
 * For each copy count, for each test, for each pass: fork one worker per
 * copy (each in its own process group), release them together through a
 * pipe that the runner closes, collect each worker's rate from its result
 * pipe, and print one line with the sum of the rates:
 *
 *   UB begin suite=pacer-ubench-style version=1 cpus=2 copies=1 passes=10,3 seconds=default tests=dhry2reg,...
 *   UB test=dhry2reg copies=1 pass=1 score=12345678.9 unit=lps seconds=10.000 count=123456789
 *   UB error test=execl copies=1 pass=2 msg=worker-failed
 *   UB end copies=1 status=ok seconds=1234.5
 *
 * These lines are the contract with the host-side scorer
 * (vmm/src/unixbench/parse.rs): one line each, `key=value` fields, values
 * without spaces. A worker that hangs is killed (with its process group)
 * after three times its duration plus 30 s, and its pass is an error. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ubench.h"

#define MAX_COPIES 256
#define MAX_TESTS 32

struct run_config {
    const struct ub_test *tests[MAX_TESTS];
    int ntests;
    int copies[8];
    int ncopies;
    int passes_long, passes_short;
    double seconds; /* 0: each test's default */
    struct ub_opts opts;
};

static int online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static int parse_tests(struct run_config *c, const char *list)
{
    c->ntests = 0;
    if (strcmp(list, "all") == 0 || list[0] == 0) {
        for (int i = 0; i < ub_test_count && i < MAX_TESTS; i++)
            c->tests[c->ntests++] = &ub_tests[i];
        return 0;
    }
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        const struct ub_test *test = ub_find_test(t);
        if (!test) {
            fprintf(stderr, "ubench: unknown test '%s' (ubench list shows them)\n", t);
            return -1;
        }
        if (c->ntests < MAX_TESTS)
            c->tests[c->ntests++] = test;
    }
    return c->ntests > 0 ? 0 : -1;
}

static int parse_copies(struct run_config *c, const char *list)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    c->ncopies = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int n = (strcmp(t, "N") == 0 || strcmp(t, "n") == 0) ? online_cpus() : atoi(t);
        if (n < 1 || n > MAX_COPIES) {
            fprintf(stderr, "ubench: bad copy count '%s' (1..%d or N)\n", t, MAX_COPIES);
            return -1;
        }
        int dup = 0;
        for (int i = 0; i < c->ncopies; i++)
            dup |= c->copies[i] == n;
        if (!dup && c->ncopies < 8)
            c->copies[c->ncopies++] = n;
    }
    return c->ncopies > 0 ? 0 : -1;
}

static int parse_passes(struct run_config *c, const char *s)
{
    int l, sh;
    if (sscanf(s, "%d,%d", &l, &sh) == 2) {
    } else if (sscanf(s, "%d", &l) == 1) {
        sh = l;
    } else {
        return -1;
    }
    if (l < 1 || sh < 1 || l > 1000 || sh > 1000)
        return -1;
    c->passes_long = l;
    c->passes_short = sh;
    return 0;
}

/* The worker: wait for the start signal, run, report. Never returns. */
static void worker(const struct ub_test *t, struct ub_opts o, int go_fd, int res_fd)
{
    setpgid(0, 0);
    char c;
    while (read(go_fd, &c, 1) < 0 && errno == EINTR)
        ;
    close(go_fd);
    o.result_fd = res_fd;
    struct ub_result r = {0};
    if (t->run(&o, &r) != 0)
        _exit(1);
    _exit(ub_write_result(res_fd, &r) == 0 ? 0 : 1);
}

struct pass_result {
    double score, count, seconds;
    const char *error;
};

static struct pass_result run_pass(const struct run_config *c, const struct ub_test *t, int copies)
{
    struct pass_result pr = {0};
    struct ub_opts o = c->opts;
    o.seconds = c->seconds > 0 ? c->seconds : t->default_seconds;
    int go[2];
    int res_fd[MAX_COPIES];
    pid_t pids[MAX_COPIES];
    char text[MAX_COPIES][128];
    size_t got[MAX_COPIES];
    int started = 0;

    fflush(stdout);
    fflush(stderr);
    if (pipe(go) != 0) {
        pr.error = "pipe";
        return pr;
    }
    for (int i = 0; i < copies; i++) {
        int p[2];
        if (pipe(p) != 0) {
            pr.error = "pipe";
            break;
        }
        pid_t pid = fork();
        if (pid < 0) {
            close(p[0]);
            close(p[1]);
            pr.error = "fork";
            break;
        }
        if (pid == 0) {
            close(go[1]);
            close(p[0]);
            for (int k = 0; k < started; k++)
                close(res_fd[k]);
            worker(t, o, go[0], p[1]);
        }
        setpgid(pid, pid);
        close(p[1]);
        res_fd[started] = p[0];
        pids[started] = pid;
        got[started] = 0;
        text[started][0] = 0;
        started++;
    }
    close(go[0]);
    close(go[1]); /* release the workers together */

    double deadline = ub_now() + o.seconds * 3 + 30;
    int open_fds = started;
    int is_open[MAX_COPIES];
    for (int i = 0; i < started; i++)
        is_open[i] = 1;
    while (open_fds > 0) {
        struct pollfd pfd[MAX_COPIES];
        int map[MAX_COPIES], n = 0;
        for (int i = 0; i < started; i++)
            if (is_open[i]) {
                pfd[n].fd = res_fd[i];
                pfd[n].events = POLLIN;
                map[n++] = i;
            }
        int left_ms = (int)((deadline - ub_now()) * 1000);
        if (left_ms <= 0) {
            pr.error = "timeout";
            break;
        }
        int r = poll(pfd, (nfds_t)n, left_ms);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            continue;
        for (int k = 0; k < n; k++) {
            if (!(pfd[k].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            int i = map[k];
            ssize_t m = read(res_fd[i], text[i] + got[i], sizeof text[i] - 1 - got[i]);
            if (m > 0) {
                got[i] += (size_t)m;
                text[i][got[i]] = 0;
            }
            if (m <= 0 || got[i] >= sizeof text[i] - 1) {
                is_open[i] = 0;
                open_fds--;
            }
        }
    }
    for (int i = 0; i < started; i++) {
        if (pr.error)
            kill(-pids[i], SIGKILL);
        close(res_fd[i]);
        int status = 0;
        while (waitpid(pids[i], &status, 0) < 0 && errno == EINTR)
            ;
        if (pr.error)
            continue;
        double s, n, sec;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
            sscanf(text[i], "%lf %lf %lf", &s, &n, &sec) != 3 || !(s > 0)) {
            pr.error = "worker-failed";
            continue;
        }
        pr.score += s;
        pr.count += n;
        if (sec > pr.seconds)
            pr.seconds = sec;
    }
    if (!pr.error && started < copies)
        pr.error = "fork";
    return pr;
}

static int run_copies(const struct run_config *c, int copies)
{
    char names[1024] = "";
    for (int i = 0; i < c->ntests; i++) {
        if (i)
            strncat(names, ",", sizeof names - strlen(names) - 1);
        strncat(names, c->tests[i]->name, sizeof names - strlen(names) - 1);
    }
    char secs[32] = "default";
    if (c->seconds > 0)
        snprintf(secs, sizeof secs, "%g", c->seconds);
    printf("UB begin suite=%s version=%d cpus=%d copies=%d passes=%d,%d seconds=%s tests=%s\n",
           UB_SUITE_NAME, UB_SUITE_VERSION, online_cpus(), copies, c->passes_long,
           c->passes_short, secs, names);
    fflush(stdout);
    double t0 = ub_now();
    int errors = 0;
    for (int i = 0; i < c->ntests; i++) {
        const struct ub_test *t = c->tests[i];
        int passes = t->long_repeat ? c->passes_long : c->passes_short;
        for (int p = 1; p <= passes; p++) {
            struct pass_result r = run_pass(c, t, copies);
            if (r.error) {
                errors++;
                printf("UB error test=%s copies=%d pass=%d msg=%s\n", t->name, copies, p, r.error);
            } else {
                printf("UB test=%s copies=%d pass=%d score=%.3f unit=%s seconds=%.3f count=%.0f\n",
                       t->name, copies, p, r.score, t->unit, r.seconds, r.count);
            }
            fflush(stdout);
        }
    }
    printf("UB end copies=%d status=%s errors=%d seconds=%.1f\n", copies, errors ? "errors" : "ok",
           errors, ub_now() - t0);
    fflush(stdout);
    return errors ? 1 : 0;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: ubench run [--tests all|a,b,..] [--copies 1,N] [--passes P|L,S]\n"
            "                  [--seconds S] [--tmpdir DIR] [--busybox PATH]\n"
            "  --copies   copy counts to run, N = online CPUs (default 1,N)\n"
            "  --passes   passes for long,short tests (default 10,3 as UnixBench)\n"
            "  --seconds  run every test this long (default: each test's own)\n"
            "  --busybox  busybox binary whose sh runs the shell tests (default /bin/sh)\n");
}

int ub_run_main(int argc, char **argv, const char *self)
{
    struct run_config c;
    memset(&c, 0, sizeof c);
    c.passes_long = 10;
    c.passes_short = 3;
    c.opts.tmpdir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    c.opts.self = self;
    parse_tests(&c, "all");
    parse_copies(&c, "1,N");
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            usage();
            return 2;
        }
        i++;
        int bad = 0;
        if (strcmp(a, "--tests") == 0)
            bad = parse_tests(&c, v);
        else if (strcmp(a, "--copies") == 0)
            bad = parse_copies(&c, v);
        else if (strcmp(a, "--passes") == 0)
            bad = parse_passes(&c, v);
        else if (strcmp(a, "--seconds") == 0)
            bad = !((c.seconds = strtod(v, NULL)) > 0);
        else if (strcmp(a, "--tmpdir") == 0)
            c.opts.tmpdir = v;
        else if (strcmp(a, "--busybox") == 0)
            c.opts.busybox = v;
        else
            bad = 1;
        if (bad) {
            fprintf(stderr, "ubench: bad option %s %s\n", a, v);
            usage();
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    int rc = 0;
    for (int i = 0; i < c.ncopies; i++)
        rc |= run_copies(&c, c.copies[i]);
    return rc;
}
