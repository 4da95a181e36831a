/* Host twin of the guest's cpu workload: the same work_unit() (work.c, same
 * flags) in the same loop shape (one RDTSC per unit), for N ms.
 * usage: host_work [duration_ms]   (default 1000)
 * prints: units=<n> seconds=<s> units_per_s=<u> */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>
#include "work.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    long ms = argc > 1 ? atol(argv[1]) : 1000;
    /* calibrate the TSC against the monotonic clock (50 ms) */
    double c0 = now_s();
    uint64_t k0 = __rdtsc();
    while (now_s() - c0 < 0.05)
        ;
    double tsc_hz = (__rdtsc() - k0) / (now_s() - c0);

    uint64_t ticks = (uint64_t)(tsc_hz * ms / 1000.0);
    uint64_t units = 0, state = WORK_STATE_INIT;
    volatile uint64_t sink;
    double t0 = now_s();
    uint64_t s = __rdtsc(), end = s + ticks, now;
    do {
        sink = work_unit(&state);
        units++;
        now = __rdtsc();
    } while (now < end);
    double el = now_s() - t0;
    (void)sink;
    printf("units=%llu seconds=%.6f units_per_s=%.0f tsc_khz=%.0f\n",
           (unsigned long long)units, el, units / el, tsc_hz / 1000.0);
    return 0;
}
