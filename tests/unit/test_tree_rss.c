/* The run sampler's tree memory (dg_tree_rss): members that hold no memory
 * (a process exiting: its memory is released before it becomes a zombie) add
 * nothing, and a sample where no member holds any is not reported (NAN), never
 * a footprint of 0. */
#include "check.h"

#include "supervise/supervise.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
    dg_proc_entry m[3] = {{.pid = 10, .state = 'R', .rss = 0},
                          {.pid = 11, .state = 'S', .rss = 4096.0 * 100},
                          {.pid = 12, .state = 'S', .rss = 4096.0 * 20}};
    CHECK(isnan(dg_tree_rss(m, 1)));              /* the last member exiting */
    CHECK(isnan(dg_tree_rss(m, 0)));              /* no member at all */
    CHECK(dg_tree_rss(m, 2) == 4096.0 * 100);     /* the exiting one adds nothing */
    CHECK(dg_tree_rss(m + 1, 2) == 4096.0 * 120); /* a sum over the members */

    /* A running process that touched memory holds some: a child of ours. (A
     * process not yet run after fork may read 0 too: the kernel folds its
     * per-cpu memory counters lazily; that sample is not reported either.) */
    int p[2];
    CHECK(pipe(p) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        size_t n = (size_t)16 << 20;
        volatile char *buf = malloc(n);
        for (size_t i = 0; buf && i < n; i += 4096)
            buf[i] = 1;
        char c = 'r';
        if (write(p[1], &c, 1) != 1)
            _exit(1);
        pause();
        _exit(0);
    }
    char c = 0;
    CHECK(pid > 0 && read(p[0], &c, 1) == 1 && c == 'r');
    dg_proc_entry e = {0};
    CHECK(pid > 0 && dg_proc_stat(pid, &e));
    CHECK_MSG(e.rss >= (double)(8 << 20) && dg_tree_rss(&e, 1) == e.rss, "rss %.0f", e.rss);
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    CHECK_DONE();
}
