/* Rules over a supervised program (devgate run): it failed, or its events
 * were lost. */
#include "diagnose/diagnose.h"

#include <string.h>

void dg_judge_program_failed(dg_diag *d, const dg_rule *r)
{
    const cJSON *s = d->supervise;
    if (!s || dg_jbool(s, "interrupted") == 1)
        return; /* an interrupt is the user's, and the record says so */
    bool timed_out = dg_jbool(s, "timed_out") == 1;
    const char *sig = dg_jstr(s, "signal");
    double code = dg_jnum(s, "exit_status");
    cJSON *f;
    if (timed_out)
        f = dg_rule_finding(d, r, DG_SEV_FAIL, -1,
                            "the program ran past its timeout; its process tree was killed");
    else if (sig)
        f = dg_rule_finding(d, r, DG_SEV_FAIL, -1, "the program was killed by %s", sig);
    else if (isfinite(code) && code != 0)
        f = dg_rule_finding(d, r, DG_SEV_FAIL, -1, "the program exited with status %d",
                            diag_int(code));
    else
        return;
    dg_ev_path(d, f, "supervise", s, NULL, "exit_status");
    dg_ev_path(d, f, "supervise", s, NULL, "signal");
    dg_ev_path(d, f, "supervise", s, NULL, "timed_out");
    dg_ev_path(d, f, "supervise", s, "s", "wall");
}

void dg_judge_events_lost(dg_diag *d, const dg_rule *r)
{
    const cJSON *e = dg_jpath(d->supervise, "events");
    double dropped = dg_jnum(e, "dropped"), bad = dg_jnum(e, "malformed"),
           cut = dg_jnum(e, "overlong");
    double lost =
        (isfinite(dropped) ? dropped : 0) + (isfinite(bad) ? bad : 0) + (isfinite(cut) ? cut : 0);
    if (!(lost > 0))
        return;
    cJSON *f = dg_rule_finding(
        d, r, DG_SEV_WARN, -1,
        "%.0f of the program's event lines were lost: %.0f dropped by the rate limit, "
        "%.0f malformed, %.0f overlong",
        lost, isfinite(dropped) ? dropped : 0, isfinite(bad) ? bad : 0, isfinite(cut) ? cut : 0);
    dg_ev_path(d, f, "supervise", d->supervise, "lines", "events.dropped");
    dg_ev_path(d, f, "supervise", d->supervise, "lines", "events.malformed");
    dg_ev_path(d, f, "supervise", d->supervise, "lines", "events.overlong");
    dg_ev_path(d, f, "supervise", d->supervise, "lines", "events.lines");
}
