/* ubench entry point: the test table and the subcommands.
 *
 *   ubench run ...            run the suite (runner.c)
 *   ubench list               name unit seconds repeat, one test a line
 *   ubench cmdline KEY [FILE] print KEY's value from a kernel command line
 *   ubench version
 *   ubench execl-step ...     internal: one step of the execl test */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ubench.h"

/* UnixBench's index tests, durations and repeat classes. */
const struct ub_test ub_tests[] = {
    {"dhry2reg", "lps", 10, 1, ub_test_dhry2reg},
    {"whetstone-double", "MWIPS", 10, 1, ub_test_whetstone},
    {"execl", "lps", 30, 0, ub_test_execl},
    {"fstime", "KBps", 30, 0, ub_test_fstime},
    {"fsbuffer", "KBps", 30, 0, ub_test_fsbuffer},
    {"fsdisk", "KBps", 30, 0, ub_test_fsdisk},
    {"pipe", "lps", 10, 1, ub_test_pipe},
    {"context1", "lps", 10, 1, ub_test_context1},
    {"spawn", "lps", 30, 0, ub_test_spawn},
    {"syscall", "lps", 10, 1, ub_test_syscall},
    {"shell1", "lpm", 60, 0, ub_test_shell1},
    {"shell8", "lpm", 60, 0, ub_test_shell8},
};
const int ub_test_count = (int)(sizeof ub_tests / sizeof ub_tests[0]);

const struct ub_test *ub_find_test(const char *name)
{
    for (int i = 0; i < ub_test_count; i++)
        if (strcmp(ub_tests[i].name, name) == 0)
            return &ub_tests[i];
    return NULL;
}

void ub_fail(const char *what)
{
    fprintf(stderr, "ubench: %s\n", what);
}

int ub_write_result(int fd, const struct ub_result *res)
{
    char line[128];
    int n = snprintf(line, sizeof line, "%.6f %.0f %.6f\n", res->score, res->count, res->seconds);
    return write(fd, line, (size_t)n) == n ? 0 : -1;
}

int main(int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : "";
    if (strcmp(cmd, "execl-step") == 0)
        return ub_execl_step(argc, argv);
    if (strcmp(cmd, "run") == 0) {
        char self[4096];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0) {
            fprintf(stderr, "ubench: cannot read /proc/self/exe (is /proc mounted?)\n");
            return 2;
        }
        self[n] = 0;
        return ub_run_main(argc, argv, self);
    }
    if (strcmp(cmd, "list") == 0) {
        for (int i = 0; i < ub_test_count; i++)
            printf("%s %s %g %s\n", ub_tests[i].name, ub_tests[i].unit,
                   ub_tests[i].default_seconds, ub_tests[i].long_repeat ? "long" : "short");
        return 0;
    }
    if (strcmp(cmd, "cmdline") == 0)
        return ub_cmdline_main(argc, argv);
    if (strcmp(cmd, "version") == 0) {
        printf("%s %d\n", UB_SUITE_NAME, UB_SUITE_VERSION);
        return 0;
    }
    fprintf(stderr,
            "ubench: Pacer's UnixBench-style suite (not comparable with published UnixBench "
            "numbers)\nusage: ubench run|list|cmdline|version (ubench run --help)\n");
    return 2;
}
