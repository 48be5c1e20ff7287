/* The signals that end a measurement: INT (Ctrl-C), TERM, and HUP (a closed
 * terminal or a dropped ssh session). The verbs that measure or run programs
 * catch all three for as long as a record can still be kept: the first one
 * caught is stored in the caller's flag (the library's steps see it and stop,
 * `run` forwards it to the program's tree) and decides the exit status (130);
 * later ones are counted and otherwise ignored, so a storm of TERMs or a
 * hang-up after a Ctrl-C cannot cut the pack and the ledger entry short. */
#include "cli/cli.h"

#include <signal.h>
#include <string.h>

static const int caught[] = {SIGINT, SIGTERM, SIGHUP};
enum { NCAUGHT = sizeof caught / sizeof caught[0] };

static volatile sig_atomic_t *flag_of;
static volatile sig_atomic_t extra;

static void on_signal(int sig)
{
    if (flag_of && !*flag_of)
        *flag_of = sig;
    else
        extra = extra + 1;
}

void cli_signals_catch(cli_signals *s, volatile sig_atomic_t *flag)
{
    memset(s, 0, sizeof *s);
    flag_of = flag;
    extra = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < NCAUGHT; i++)
        sigaddset(&sa.sa_mask, caught[i]);
    for (int i = 0; i < NCAUGHT; i++)
        sigaction(caught[i], &sa, &s->old[i]);
    s->armed = true;
}

void cli_signals_release(cli_signals *s)
{
    if (!s->armed)
        return;
    /* Once one was caught the verb is on its way out with 130: more of them
     * until the exit are ignored rather than ending it with 128 + N. */
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    bool caught_one = flag_of && *flag_of;
    for (int i = 0; i < NCAUGHT; i++)
        sigaction(caught[i], caught_one ? &ign : &s->old[i], NULL);
    s->armed = false;
    flag_of = NULL;
}

bool cli_signals_armed(void)
{
    return flag_of != NULL;
}
