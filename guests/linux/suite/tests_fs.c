/* File copy tests (fstime, fsbuffer, fsdisk).
 *
 * A source file of MAXBLOCKS blocks of BUFSIZE bytes is written first
 * (not timed); then, for the duration, blocks are read from it and written
 * to a second file, both files rewound together after the last block, so
 * the working set stays BUFSIZE x MAXBLOCKS bytes. The rate is the bytes
 * copied in KiB per second (KBps). Sizes as UnixBench's index tests:
 *   fstime   1024 B x 2000 blocks (2000 KiB)
 *   fsbuffer  256 B x  500 blocks  (125 KiB)
 *   fsdisk   4096 B x 8000 blocks (32000 KiB)
 * The files live in the tmpdir (a tmpfs in the guest image). */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ubench.h"

static int copy_test(const struct ub_opts *o, struct ub_result *res, size_t bufsize,
                     long maxblocks)
{
    char src[4096], dst[4096], buf[4096];
    snprintf(src, sizeof src, "%s/ub-fs-%d.src", o->tmpdir, (int)getpid());
    snprintf(dst, sizeof dst, "%s/ub-fs-%d.dst", o->tmpdir, (int)getpid());
    for (size_t i = 0; i < bufsize; i++)
        buf[i] = (char)('a' + i % 26);

    int in = -1, out = -1, rc = -1;
    int wfd = open(src, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (wfd < 0) {
        ub_fail("fs: cannot create the source file in tmpdir");
        return -1;
    }
    for (long b = 0; b < maxblocks; b++)
        if (write(wfd, buf, bufsize) != (ssize_t)bufsize) {
            close(wfd);
            ub_fail("fs: writing the source file");
            goto out;
        }
    close(wfd);
    in = open(src, O_RDONLY);
    out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (in < 0 || out < 0) {
        ub_fail("fs: opening the files");
        goto out;
    }

    double bytes = 0;
    long block = 0;
    ub_arm_timer(o->seconds);
    double t0 = ub_now();
    while (!ub_stop) {
        if (block == maxblocks) {
            lseek(in, 0, SEEK_SET);
            lseek(out, 0, SEEK_SET);
            block = 0;
        }
        ssize_t n = read(in, buf, bufsize);
        if (n != (ssize_t)bufsize || write(out, buf, bufsize) != (ssize_t)bufsize) {
            ub_disarm_timer();
            ub_fail("fs: copy read/write");
            goto out;
        }
        bytes += (double)bufsize;
        block++;
    }
    double el = ub_now() - t0;
    ub_disarm_timer();
    res->count = bytes;
    res->seconds = el;
    res->score = bytes / 1024.0 / el;
    rc = 0;
out:
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    unlink(src);
    unlink(dst);
    return rc;
}

int ub_test_fstime(const struct ub_opts *o, struct ub_result *res)
{
    return copy_test(o, res, 1024, 2000);
}

int ub_test_fsbuffer(const struct ub_opts *o, struct ub_result *res)
{
    return copy_test(o, res, 256, 500);
}

int ub_test_fsdisk(const struct ub_opts *o, struct ub_result *res)
{
    return copy_test(o, res, 4096, 8000);
}
