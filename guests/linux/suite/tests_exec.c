/* Tests that start programs.
 *
 * execl  - the worker replaces itself with this binary (`ubench
 *          execl-step`) over and over until the duration has passed; the
 *          count and the start time travel in the arguments, and the last
 *          step writes the result; one loop = one execl(); lps.
 * shell1 - one loop = run a fixed shell script (sort, uniq, od, grep, tee,
 * shell8   wc, tr, cut over a generated text file) to completion: 1 copy
 *          of the script for shell1, 8 concurrent copies for shell8; loops
 *          per minute (lpm). The script runs under busybox sh (in the guest
 *          image /bin/sh is busybox; on the host the runner is given the
 *          same busybox binary), whose applets serve every command, so the
 *          guest and the host run the same tools. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ubench.h"

/* ---- execl --------------------------------------------------------------- */

static void exec_step(const char *self, int fd, double t_end, unsigned long count, double t0)
{
    char fd_s[16], end_s[40], count_s[32], t0_s[40];
    snprintf(fd_s, sizeof fd_s, "%d", fd);
    snprintf(end_s, sizeof end_s, "%.9f", t_end);
    snprintf(count_s, sizeof count_s, "%lu", count);
    snprintf(t0_s, sizeof t0_s, "%.9f", t0);
    execl(self, self, "execl-step", fd_s, end_s, count_s, t0_s, (char *)NULL);
    ub_fail("execl");
    _exit(1);
}

int ub_test_execl(const struct ub_opts *o, struct ub_result *res)
{
    (void)res; /* the last step reports through o->result_fd */
    double t0 = ub_now();
    exec_step(o->self, o->result_fd, t0 + o->seconds, 0, t0);
    return -1;
}

/* argv: ubench execl-step FD T_END COUNT T0 */
int ub_execl_step(int argc, char **argv)
{
    if (argc != 6) {
        ub_fail("execl-step: bad arguments");
        return 2;
    }
    int fd = atoi(argv[2]);
    double t_end = strtod(argv[3], NULL);
    unsigned long count = strtoul(argv[4], NULL, 10) + 1;
    double t0 = strtod(argv[5], NULL);
    double now = ub_now();
    if (now < t_end) {
        char self[4096];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0) {
            ub_fail("execl-step: /proc/self/exe");
            return 1;
        }
        self[n] = 0;
        exec_step(self, fd, t_end, count, t0);
    }
    struct ub_result res = {
        .score = (double)count / (now - t0), .count = (double)count, .seconds = now - t0};
    return ub_write_result(fd, &res) == 0 ? 0 : 1;
}

/* ---- shell1 / shell8 ----------------------------------------------------- */

static const char shell_script[] =
    "# ubench shell test: one loop = this small text-processing job\n"
    "in=$1/input.txt\n"
    "w=$2\n"
    "mkdir -p \"$w\" || exit 1\n"
    "sort \"$in\" > \"$w/sorted\"\n"
    "sort -r -k 2 \"$in\" | uniq > \"$w/rsorted\"\n"
    "od -An -c \"$w/sorted\" | sort -n > \"$w/dump\"\n"
    "grep -i ka \"$w/sorted\" | tee \"$w/ka\" | wc -l > \"$w/count\"\n"
    "tr a-z A-Z < \"$w/ka\" | cut -c 1-12 | sort -u > \"$w/upper\"\n"
    "wc -c \"$w/dump\" \"$w/upper\" > \"$w/sizes\"\n"
    "[ -s \"$w/count\" ] && [ -s \"$w/rsorted\" ] || exit 1\n"
    "rm -f \"$w/sorted\" \"$w/rsorted\" \"$w/dump\" \"$w/ka\" \"$w/count\" \"$w/upper\" "
    "\"$w/sizes\"\n";

static int write_file(const char *path, const char *data, size_t len, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (fd < 0)
        return -1;
    int rc = write(fd, data, len) == (ssize_t)len ? 0 : -1;
    return close(fd) == 0 ? rc : -1;
}

/* A deterministic text of 600 lines of 3-6 pseudo-random syllable words. */
static int write_input(const char *path)
{
    static const char *syl[] = {"ka", "lo", "mi", "ne", "ru", "so", "ta", "vi",
                                "ba", "de", "fu", "go", "hi", "jo", "pe", "zu"};
    static char text[64 * 1024];
    size_t len = 0;
    uint32_t x = 12345;
    for (int line = 0; line < 600; line++) {
        int words = 3 + line % 4;
        for (int w = 0; w < words; w++) {
            int syls = 1 + (int)((x >> 7) % 3);
            for (int s = 0; s < syls; s++) {
                x = x * 1103515245u + 12345u;
                const char *p = syl[(x >> 16) & 15];
                text[len++] = p[0];
                text[len++] = p[1];
            }
            text[len++] = w + 1 < words ? ' ' : '\n';
        }
    }
    return write_file(path, text, len, 0644);
}

static void remove_tree(const char *dir)
{
    char path[4200];
    static const char *names[] = {"sorted", "rsorted", "dump", "ka", "count", "upper", "sizes"};
    for (int k = 0; k < 64; k++) {
        snprintf(path, sizeof path, "%s/w%d", dir, k);
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            char f[4300];
            snprintf(f, sizeof f, "%s/%s", path, names[i]);
            unlink(f);
        }
        rmdir(path);
    }
    snprintf(path, sizeof path, "%s/input.txt", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/loop.sh", dir);
    unlink(path);
    rmdir(dir);
}

static pid_t start_script(const struct ub_opts *o, const char *dir, int k)
{
    char script[4200], work[4200];
    snprintf(script, sizeof script, "%s/loop.sh", dir);
    snprintf(work, sizeof work, "%s/w%d", dir, k);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) {
        dup2(null, 1);
        close(null);
    }
    if (o->result_fd > 2)
        close(o->result_fd);
    if (o->busybox)
        execl(o->busybox, "sh", script, dir, work, (char *)NULL);
    else
        execl("/bin/sh", "sh", script, dir, work, (char *)NULL);
    _exit(127);
}

static int shell_test(const struct ub_opts *o, struct ub_result *res, int concurrent)
{
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/ub-shell-%d", o->tmpdir, (int)getpid());
    if (mkdir(dir, 0755) != 0) {
        ub_fail("shell: mkdir in tmpdir");
        return -1;
    }
    snprintf(path, sizeof path, "%s/loop.sh", dir);
    int rc = write_file(path, shell_script, sizeof shell_script - 1, 0755);
    snprintf(path, sizeof path, "%s/input.txt", dir);
    if (rc != 0 || write_input(path) != 0) {
        ub_fail("shell: cannot write the script or its input");
        remove_tree(dir);
        return -1;
    }

    unsigned long loops = 0;
    int failed = 0;
    pid_t pids[64];
    ub_arm_timer(o->seconds);
    double t0 = ub_now();
    while (!ub_stop && !failed) {
        for (int k = 0; k < concurrent; k++)
            pids[k] = start_script(o, dir, k);
        for (int k = 0; k < concurrent; k++) {
            int status = 0;
            if (pids[k] < 0) {
                failed = 1;
                continue;
            }
            while (waitpid(pids[k], &status, 0) < 0 && errno == EINTR)
                ;
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                failed = 1;
        }
        loops++;
    }
    double el = ub_now() - t0;
    ub_disarm_timer();
    remove_tree(dir);
    if (failed) {
        ub_fail("shell: the script failed (is busybox sh with its applets there?)");
        return -1;
    }
    res->count = (double)loops;
    res->seconds = el;
    res->score = (double)loops * 60.0 / el;
    return 0;
}

int ub_test_shell1(const struct ub_opts *o, struct ub_result *res)
{
    return shell_test(o, res, 1);
}

int ub_test_shell8(const struct ub_opts *o, struct ub_result *res)
{
    return shell_test(o, res, 8);
}
