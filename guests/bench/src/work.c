/* The unit of CPU work, shared verbatim by the guest's ring-3 cpu workload
 * and the host program host_work (same compiler flags), so that
 * guest units/s divided by host units/s is the guest's CPU efficiency. */
#include "work.h"

volatile uint64_t work_sink;
static uint64_t work_state = 0x9E3779B97F4A7C15ull;

void work_unit(void)
{
    uint64_t x = work_state, acc = 0;
    for (int i = 0; i < WORK_ITERS; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        acc += x * 0x2545F4914F6CDD1Dull;
        acc ^= acc >> 29;
    }
    work_state = x;
    work_sink = acc;
}
