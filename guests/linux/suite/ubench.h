/* ubench: Pacer's UnixBench-style suite (one static multi-call binary).
 *
 * The twelve tests of UnixBench's System Benchmarks Index, written for this
 * project from their published descriptions (what each test exercises and
 * in which unit it reports). Same test names, units, durations and pass
 * counts as UnixBench, but different code: the numbers are NOT comparable
 * with published UnixBench results; compare a guest with the host running
 * this same binary instead.
 *
 * Structure: the runner (runner.c) forks one worker per copy for every
 * pass, releases them together, and sums their rates into one result line
 * per pass (the line format is the contract with the host-side scorer in
 * vmm/src/unixbench/). Each worker runs one test function for a duration
 * and returns a rate (tests_*.c). */
#ifndef UBENCH_H
#define UBENCH_H

#include <signal.h>
#include <stdint.h>

#define UB_SUITE_NAME "pacer-ubench-style"
#define UB_SUITE_VERSION 1

/* What a test reports: its rate in the test's unit, and the raw count of
 * iterations (loops, bytes, ...) behind it, for the record. */
struct ub_result {
    double score;
    double count;
    double seconds;
};

/* Options every test receives. */
struct ub_opts {
    double seconds;      /* how long to run */
    const char *tmpdir;  /* where file and shell tests write */
    const char *busybox; /* busybox binary for the shell tests, or NULL: /bin/sh */
    const char *self;    /* path of this binary (execl re-executes it) */
    int result_fd;       /* where the worker reports (execl's last step writes it) */
};

typedef int (*ub_test_fn)(const struct ub_opts *, struct ub_result *);

struct ub_test {
    const char *name;
    const char *unit;
    double default_seconds; /* UnixBench's duration for the test */
    int long_repeat;        /* 1: "long" pass count (10), 0: "short" (3) */
    ub_test_fn run;
};

extern const struct ub_test ub_tests[];
extern const int ub_test_count;
const struct ub_test *ub_find_test(const char *name);

/* timing.c: a SIGALRM-driven stop flag and a monotonic clock */
extern volatile sig_atomic_t ub_stop;
void ub_arm_timer(double seconds);
void ub_disarm_timer(void);
double ub_now(void);

/* runner.c */
int ub_run_main(int argc, char **argv, const char *self);
/* cmdline.c: value of KEY in a kernel command line (quotes honoured) */
int ub_cmdline_main(int argc, char **argv);

/* tests */
int ub_test_dhry2reg(const struct ub_opts *, struct ub_result *);
int ub_test_whetstone(const struct ub_opts *, struct ub_result *);
int ub_test_execl(const struct ub_opts *, struct ub_result *);
int ub_execl_step(int argc, char **argv);
int ub_test_fstime(const struct ub_opts *, struct ub_result *);
int ub_test_fsbuffer(const struct ub_opts *, struct ub_result *);
int ub_test_fsdisk(const struct ub_opts *, struct ub_result *);
int ub_test_pipe(const struct ub_opts *, struct ub_result *);
int ub_test_context1(const struct ub_opts *, struct ub_result *);
int ub_test_spawn(const struct ub_opts *, struct ub_result *);
int ub_test_syscall(const struct ub_opts *, struct ub_result *);
int ub_test_shell1(const struct ub_opts *, struct ub_result *);
int ub_test_shell8(const struct ub_opts *, struct ub_result *);

/* Write a worker's result to fd as one line "score count seconds". */
int ub_write_result(int fd, const struct ub_result *res);

/* Report a failure of the current test on stderr (the runner turns a
 * worker's non-zero exit into an `UB error` line). */
void ub_fail(const char *what);

#endif
