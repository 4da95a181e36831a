/* Timing for the tests: a one-shot interval timer raises SIGALRM after the
 * test's duration and the handler sets ub_stop, which every test loop
 * polls (a plain volatile read per iteration, far cheaper than reading the
 * clock). Elapsed time is measured separately with CLOCK_MONOTONIC, so a
 * late signal costs accuracy of nothing but the loop count. SA_RESTART
 * keeps blocking calls (read, waitpid) from failing when the alarm lands. */
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "ubench.h"

volatile sig_atomic_t ub_stop;

static void on_alarm(int sig)
{
    (void)sig;
    ub_stop = 1;
}

void ub_arm_timer(double seconds)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);

    if (seconds < 0.001)
        seconds = 0.001;
    struct itimerval it;
    memset(&it, 0, sizeof it);
    it.it_value.tv_sec = (time_t)seconds;
    it.it_value.tv_usec = (suseconds_t)((seconds - (double)it.it_value.tv_sec) * 1e6);
    ub_stop = 0;
    setitimer(ITIMER_REAL, &it, NULL);
}

void ub_disarm_timer(void)
{
    struct itimerval it;
    memset(&it, 0, sizeof it);
    setitimer(ITIMER_REAL, &it, NULL);
}

double ub_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
