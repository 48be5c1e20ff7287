/* Rules over a supervised program (devgate run): it failed, or its events
 * were lost. */
#include "diagnose/diagnose.h"

#include <string.h>

void dg_judge_program_failed(dg_diag *d, const dg_rule *r)
{
    const dg_view_supervise *s = &d->v->supervise;
    if (!s->present || s->interrupted == 1)
        return; /* an interrupt is the user's, and the record says so */
    cJSON *f;
    if (s->timed_out == 1)
        f = dg_rule_finding(d, r, DG_SEV_FAIL, -1,
                            "the program ran past its timeout; its process tree was killed");
    else if (s->signal)
        f = dg_rule_finding(d, r, DG_SEV_FAIL, -1, "the program was killed by %s", s->signal);
    else if (s->exit_status.valid && s->exit_status.value != 0)
        f = dg_rule_finding(d, r, DG_SEV_FAIL, -1, "the program exited with status %d",
                            dg_rec_int(s->exit_status));
    else
        return;
    dg_ev_metric(d, f, "supervise", NULL, s->exit_status, "exit_status");
    dg_ev_str(d, f, "supervise", s->signal, "signal");
    dg_ev_bool(d, f, "supervise", s->timed_out, "timed_out");
    dg_ev_metric(d, f, "supervise", "s", s->wall, "wall");
}

void dg_judge_events_lost(dg_diag *d, const dg_rule *r)
{
    const dg_view_supervise *s = &d->v->supervise;
    double dropped = s->events_dropped.valid ? s->events_dropped.value : 0;
    double bad = s->events_malformed.valid ? s->events_malformed.value : 0;
    double cut = s->events_overlong.valid ? s->events_overlong.value : 0;
    double lost = dropped + bad + cut;
    if (!(lost > 0))
        return;
    cJSON *f = dg_rule_finding(
        d, r, DG_SEV_WARN, -1,
        "%.0f of the program's event lines were lost: %.0f dropped by the rate limit, "
        "%.0f malformed, %.0f overlong",
        lost, dropped, bad, cut);
    dg_ev_metric(d, f, "supervise", "lines", s->events_dropped, "events.dropped");
    dg_ev_metric(d, f, "supervise", "lines", s->events_malformed, "events.malformed");
    dg_ev_metric(d, f, "supervise", "lines", s->events_overlong, "events.overlong");
    dg_ev_metric(d, f, "supervise", "lines", s->events_lines, "events.lines");
}
