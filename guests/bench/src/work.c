/* The unit of CPU work, shared verbatim by the guest's ring-3 workloads
 * and the host program host_work (same compiler flags), so that
 * guest units/s divided by host units/s is the guest's CPU efficiency. */
#include "work.h"

uint64_t work_iters(uint64_t *state, unsigned iters)
{
    uint64_t x = *state, acc = 0;
    for (unsigned i = 0; i < iters; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        acc += x * 0x2545F4914F6CDD1Dull;
        acc ^= acc >> 29;
    }
    *state = x;
    return acc;
}
