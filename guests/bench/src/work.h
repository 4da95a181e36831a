#ifndef WORK_H
#define WORK_H
#include <stdint.h>
/* One work unit: WORK_ITERS iterations of an xorshift64 + multiply mix,
 * a serial dependency chain of plain integer ops (~12k cycles). */
#define WORK_ITERS 2048
void work_unit(void);
extern volatile uint64_t work_sink;
#endif
