#ifndef WORK_H
#define WORK_H
#include <stdint.h>
/* One work unit: WORK_ITERS iterations of an xorshift64 + multiply mix,
 * a serial dependency chain of plain integer ops (~12k cycles). The state
 * is the caller's (one per CPU: no shared cache line between vCPUs). */
#define WORK_ITERS 2048
#define WORK_STATE_INIT 0x9E3779B97F4A7C15ull
/* `iters` iterations on *state; returns the mix (store it somewhere the
 * compiler cannot drop). */
uint64_t work_iters(uint64_t *state, unsigned iters);
static inline uint64_t work_unit(uint64_t *state) { return work_iters(state, WORK_ITERS); }
#endif
