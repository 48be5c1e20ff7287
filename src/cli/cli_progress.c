/* The progress of a measuring verb (docs/cli.md "Progress"), from the
 * library's dg_progress reports: on a terminal one line at the bottom of
 * stderr (the step, the trial, the program's steps, the time elapsed and the
 * ETA by the tier's plan), kept below the supervised program's output, which
 * reaches the terminal through cli_progress_output; off a terminal (or with
 * --progress plain) one line on stderr per step, per trial and per epoch.
 * --quiet (or --progress off) shows none; --json keeps it on stderr. */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

const char *cli_progress_opt(const cli_opt *opt, const char *v, void *field)
{
    (void)opt;
    static const char *const names[] = {"auto", "bar", "plain", "off"};
    for (int i = 0; i < 4; i++)
        if (strcmp(v, names[i]) == 0) {
            *(int *)field = i;
            return NULL;
        }
    return "auto, bar, plain or off";
}

/* "1:05", "1:02:03" */
static const char *clock_text(char *buf, size_t n, double s)
{
    long t = isfinite(s) && s > 0 ? (long)(s + 0.5) : 0;
    if (t >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
    return buf;
}

void cli_progress_start(cli_progress *p, const cli *c, const char *verb)
{
    memset(p, 0, sizeof *p);
    p->verb = verb;
    const char *term = getenv("TERM");
    bool tty = isatty(STDERR_FILENO) && !(term && strcmp(term, "dumb") == 0);
    int m = c->progress;
    p->mode = c->quiet || m == CLI_PROGRESS_OFF                          ? CLI_PROGRESS_OFF
              : m == CLI_PROGRESS_BAR || (m == CLI_PROGRESS_AUTO && tty) ? CLI_PROGRESS_BAR
                                                                         : CLI_PROGRESS_PLAIN;
    p->epoch = p->steps = NAN;
    p->verbose = !c->quiet && getenv("DEVGATE_VERBOSE");
}

/* "[3/6 sweep]", with the trial "[3/6 sweep] trial 2/~6 (batch 64 on cuda)", into buf. */
static void where(const cli_progress *p, char *buf, size_t n, bool trial)
{
    size_t off = 0;
    if (p->total > 1)
        off = (size_t)snprintf(buf, n, "[%d/%d %s]", p->index + 1, p->total, p->step);
    else
        off = (size_t)snprintf(buf, n, "[%s]", p->step);
    if (!trial || p->trial <= 0 || off >= n)
        return;
    if (p->trials > 0)
        off += (size_t)snprintf(buf + off, n - off, " trial %d/%s%d", p->trial,
                                p->trials_guess ? "~" : "", p->trials);
    else
        off += (size_t)snprintf(buf + off, n - off, " trial %d", p->trial);
    if (p->what[0] && off < n)
        snprintf(buf + off, n - off, " (%s)", p->what);
}

/* " · 0:48 elapsed · ETA ~1:30" */
static void times(const cli_progress *p, char *buf, size_t n)
{
    char e[24], t[24];
    if (isfinite(p->eta))
        snprintf(buf, n, " · %s elapsed · ETA ~%s", clock_text(e, sizeof e, p->elapsed),
                 clock_text(t, sizeof t, p->eta));
    else
        snprintf(buf, n, " · %s elapsed", clock_text(e, sizeof e, p->elapsed));
}

/* The terminal's width (80 when it cannot be told). */
static int width(void)
{
    struct winsize ws;
    return ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 10 ? ws.ws_col : 80;
}

/* Draws the bar (the cursor is at the start of an empty line, or on the bar). */
static void draw(cli_progress *p)
{
    if (p->mode != CLI_PROGRESS_BAR || p->line_open || !p->step[0])
        return;
    char w[192], prog[64] = "", text[400];
    where(p, w, sizeof w, true);
    if (isfinite(p->steps) && isfinite(p->epoch) && p->trial_running)
        snprintf(prog, sizeof prog, " · epoch %.0f, step %.0f", p->epoch + 1, p->steps);
    else if (isfinite(p->steps) && p->trial_running)
        snprintf(prog, sizeof prog, " · step %.0f", p->steps);
    char tm[64];
    times(p, tm, sizeof tm);
    snprintf(text, sizeof text, "devgate %s %s%s%s", p->verb, w, prog, tm);
    /* Cleaned (a step name or a trial's words come from the library), then
     * cut to the width so the line never wraps: "\r\033[K" clears one row. */
    char clean[400], line[480];
    size_t n = dg_text_clean(clean, sizeof clean, text, strlen(text), false);
    int cols = width() - 1;
    size_t cut = 0, chars = 0;
    while (cut < n && (int)chars < cols) {
        cut++;
        while (cut < n && ((unsigned char)clean[cut] & 0xc0) == 0x80)
            cut++;
        chars++;
    }
    clean[cut] = '\0';
    snprintf(line, sizeof line, "\r\033[K\033[2m%s\033[0m", clean);
    cli_term_raw(line);
    p->drawn = true;
}

/* Clears the bar from its row, the cursor left at the row's start. */
static void clear(cli_progress *p)
{
    if (p->drawn)
        cli_term_raw("\r\033[K");
    p->drawn = false;
}

/* One plain line on stderr: where, then text (may be NULL), then the times. */
static void plain(cli_progress *p, bool trial, const char *text)
{
    char w[192], tm[64];
    where(p, w, sizeof w, trial);
    times(p, tm, sizeof tm);
    fprintf(stderr, "devgate: %s%s%s%s\n", w, text ? " " : "", text ? text : "", tm);
}

void cli_progress_report(void *user, const dg_progress *r)
{
    cli_progress *p = user;
    if (p->mode == CLI_PROGRESS_OFF)
        return;
    /* A verb that is one step (train, soak) reports without a step name. */
    snprintf(p->step, sizeof p->step, "%s", r->step ? r->step : p->verb);
    p->index = r->index;
    p->total = r->total;
    p->elapsed = r->elapsed_s;
    p->eta = r->eta_s;
    if (r->kind == DG_PROGRESS_STEP || r->kind == DG_PROGRESS_STEP_END) {
        p->trial = 0;
        p->trials = 0;
        p->what[0] = '\0';
        p->trial_running = false;
        p->steps = p->epoch = NAN;
    } else {
        p->trial = r->trial;
        p->trials = r->trials;
        p->trials_guess = strcmp(p->step, "sweep") == 0;
        snprintf(p->what, sizeof p->what, "%s", r->what ? r->what : "");
    }
    switch (r->kind) {
    case DG_PROGRESS_TRIAL:
        p->trial_running = true;
        p->steps = p->epoch = NAN;
        break;
    case DG_PROGRESS_TRIAL_END: p->trial_running = false; break;
    case DG_PROGRESS_EPOCH:
    case DG_PROGRESS_TICK:
        p->trial_running = true; /* a supervised run: its steps belong on the line */
        p->epoch = r->epoch;
        p->steps = r->steps;
        break;
    default: break;
    }
    if (p->mode == CLI_PROGRESS_BAR) {
        draw(p);
        return;
    }
    char text[512];
    const char *res = r->result ? r->result : "ended", *d = r->detail;
    switch (r->kind) {
    case DG_PROGRESS_STEP: plain(p, false, "started"); break;
    case DG_PROGRESS_STEP_END:
    case DG_PROGRESS_TRIAL_END:
        snprintf(text, sizeof text, "%s%s%s", res, d ? ": " : "", d ? d : "");
        plain(p, r->kind == DG_PROGRESS_TRIAL_END, text);
        break;
    case DG_PROGRESS_EPOCH:
        /* The epochs of a long run (run's program, accept's soak); a sweep
         * trial's or a compare run's few steps get their one line at the end. */
        if (strcmp(p->step, "supervise") != 0 && strcmp(p->step, "soak") != 0 &&
            strcmp(p->step, "train") != 0)
            break;
        snprintf(text, sizeof text, "epoch %.0f ended at step %.0f%s%s", r->epoch + 1, r->steps,
                 d ? ": " : "", d ? d : "");
        plain(p, true, text);
        break;
    default: break;
    }
}

void cli_progress_output(void *user, int fd, const char *buf, size_t n)
{
    cli_progress *p = user;
    if (!n)
        return;
    clear(p);
    cli_term_raw_fd(fd, buf, n);
    /* A line the program has not finished stays as it is (a progress bar
     * of its own redrawn with CR): the bar comes back once it ends. */
    p->line_open = buf[n - 1] != '\n';
    draw(p);
}

void cli_progress_log(dg_log_level level, const char *msg, void *user)
{
    cli_progress *p = user;
    if (level >= DG_LOG_WARN || p->verbose)
        cli_progress_note(p, msg);
}

void cli_progress_note(cli_progress *p, const char *msg)
{
    bool bar = p->mode == CLI_PROGRESS_BAR;
    if (bar) {
        clear(p);
        if (p->line_open)
            cli_term_raw("\n");
        p->line_open = false;
    }
    fprintf(stderr, "devgate: %s\n", msg);
    fflush(stderr);
    if (bar)
        draw(p);
}

void cli_progress_end(cli_progress *p)
{
    clear(p);
    if (p->line_open)
        cli_term_raw("\n");
    p->line_open = false;
    p->mode = CLI_PROGRESS_OFF;
}
