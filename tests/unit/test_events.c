/* The events protocol's pure parts (src/supervise/events.c): the line parser,
 * the line splitter with its cap, and the collector's counting, rate limit
 * and caps. No processes. */
#include "check.h"
#include "supervise/supervise.h"

#include <math.h>

static dg_ev_kind kind_of(const char *s)
{
    cJSON *o = NULL;
    dg_ev_kind k = dg_event_parse(s, strlen(s), &o);
    CHECK((k == DG_EV_MALFORMED) == (o == NULL));
    cJSON_Delete(o);
    return k;
}

static void test_parse(void)
{
    static const struct {
        const char *line;
        dg_ev_kind kind;
    } cases[] = {
        {"{\"v\":1,\"ev\":\"run_start\",\"t\":1,\"framework\":{\"name\":\"torch\",\"version\":\"2."
         "4\"},\"device\":\"mps\","
         "\"batch\":32,\"bucket\":{\"resolution\":224},\"seeds\":{\"torch\":0},\"pid\":12}",
         DG_EV_RUN_START},
        {"{\"v\":1,\"ev\":\"gate\",\"device\":\"mps\",\"built\":true,\"available\":true,\"reason\":"
         "null,"
         "\"matmul\":{\"ok\":true,\"n\":256,\"max_abs_err\":1e-6,\"ms\":0.3}}",
         DG_EV_GATE},
        {"{\"v\":1,\"ev\":\"step\",\"epoch\":0,\"step\":3,\"step_ms\":12.5,\"data_ms\":null,"
         "\"loss\":null,\"synced\":false}",
         DG_EV_STEP},
        {"{\"v\":1,\"ev\":\"epoch_end\",\"epoch\":0,\"allocated\":1,\"reserved\":2,\"max_"
         "allocated\":3,\"driver\":4,"
         "\"footprint\":5,\"cache_emptied\":true,\"validation\":false}",
         DG_EV_EPOCH_END},
        {"{\"v\":1,\"ev\":\"phase\",\"name\":\"validation\",\"epoch\":2}", DG_EV_PHASE},
        {"{\"v\":1,\"ev\":\"fallback\",\"op\":\"aten::x\",\"device\":\"mps\",\"message\":\"w\"}",
         DG_EV_FALLBACK},
        {"{\"v\":1,\"ev\":\"sweep_trial\",\"batch\":64,\"ended\":\"ok\",\"samples_per_s\":100,"
         "\"step_ms\":5,"
         "\"peak_bytes\":1000,\"reason\":null}",
         DG_EV_SWEEP_TRIAL},
        {"{\"v\":1,\"ev\":\"oom\",\"device\":\"cuda:0\",\"batch\":512,\"message\":\"CUDA out of "
         "memory\"}",
         DG_EV_OOM},
        {"{\"v\":1,\"ev\":\"run_end\",\"status\":\"ok\",\"message\":null}", DG_EV_RUN_END},
        {"  {\"ev\":\"run_end\",\"v\":1.0}  \r", DG_EV_RUN_END}, /* whitespace, key order, 1.0 */
        {"{\"v\":1,\"ev\":\"teleport\"}", DG_EV_UNKNOWN},
        {"{\"v\":1,\"ev\":\"\"}", DG_EV_UNKNOWN},
        {"{\"v\":1,\"ev\":\"STEP\"}", DG_EV_UNKNOWN}, /* names are case-sensitive */
        /* malformed */
        {"", DG_EV_MALFORMED},
        {"hello", DG_EV_MALFORMED},
        {"[1,2]", DG_EV_MALFORMED},
        {"\"str\"", DG_EV_MALFORMED},
        {"{\"v\":1,\"ev\":\"step\"", DG_EV_MALFORMED},
        {"{\"v\":1,\"ev\":\"step\"} x", DG_EV_MALFORMED},
        {"{\"v\":1,\"ev\":\"step\"}{}", DG_EV_MALFORMED},
        {"{\"v\":2,\"ev\":\"step\"}", DG_EV_MALFORMED},
        {"{\"v\":\"1\",\"ev\":\"step\"}", DG_EV_MALFORMED},
        {"{\"ev\":\"step\"}", DG_EV_MALFORMED},
        {"{\"v\":1,\"ev\":3}", DG_EV_MALFORMED},
        {"{\"v\":1,\"ev\":null}", DG_EV_MALFORMED},
        {"{\"v\":1}", DG_EV_MALFORMED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK_MSG(kind_of(cases[i].line) == cases[i].kind, "line %zu: %s", i, cases[i].line);

    /* Embedded NUL: malformed even though the bytes before it parse. */
    const char nul[] = "{\"v\":1,\"ev\":\"step\"}\0garbage";
    cJSON *o = NULL;
    CHECK(dg_event_parse(nul, sizeof nul - 1, &o) == DG_EV_MALFORMED && !o);
    const char nul2[] = "{\"v\":1,\"ev\":\"st\0ep\"}";
    CHECK(dg_event_parse(nul2, sizeof nul2 - 1, &o) == DG_EV_MALFORMED && !o);
    /* Invalid UTF-8 (a lone continuation byte, an overlong, a surrogate); valid multi-byte is fine.
     */
    CHECK(kind_of("{\"v\":1,\"ev\":\"fallback\",\"message\":\"\x80\"}") == DG_EV_MALFORMED);
    CHECK(kind_of("{\"v\":1,\"ev\":\"fallback\",\"message\":\"\xc0\xaf\"}") == DG_EV_MALFORMED);
    CHECK(kind_of("{\"v\":1,\"ev\":\"fallback\",\"message\":\"\xed\xa0\x80\"}") == DG_EV_MALFORMED);
    CHECK(kind_of("{\"v\":1,\"ev\":\"fallback\",\"message\":\"\xe2\x82\xac \xf0\x9f\x98\x80\"}") ==
          DG_EV_FALLBACK);
    /* Not parsed past len. */
    const char *two = "{\"v\":1,\"ev\":\"oom\"}{\"v\":1";
    CHECK(dg_event_parse(two, 18, &o) == DG_EV_OOM);
    cJSON_Delete(o);
    /* Deep nesting does not overflow the stack. */
    size_t depth = 100000;
    char *deep = malloc(2 * depth + 40);
    size_t n = (size_t)sprintf(deep, "{\"v\":1,\"ev\":\"step\",\"x\":");
    for (size_t i = 0; i < depth; i++)
        deep[n++] = '[';
    for (size_t i = 0; i < depth; i++)
        deep[n++] = ']';
    deep[n++] = '}';
    CHECK(dg_event_parse(deep, n, &o) == DG_EV_MALFORMED);
    free(deep);
    CHECK_STR(dg_ev_kind_name(DG_EV_EPOCH_END), "epoch_end");
    CHECK_STR(dg_ev_kind_name(DG_EV_MALFORMED), "malformed");
}

/* ---- the splitter ---- */

typedef struct lines {
    int n;
    char last[256];
    size_t last_len;
} lines;

static void got_line(void *user, const char *line, size_t len)
{
    lines *l = user;
    l->n++;
    l->last_len = len;
    memcpy(l->last, line, len < sizeof l->last ? len : sizeof l->last - 1);
    l->last[len < sizeof l->last ? len : sizeof l->last - 1] = '\0';
}

static void test_reader(void)
{
    dg_evreader r = {.max_line = 16};
    lines l = {0};
    /* Lines split across feeds, blank lines skipped. */
    dg_evreader_feed(&r, "ab", 2, got_line, &l);
    CHECK(l.n == 0);
    dg_evreader_feed(&r, "c\n\n  \r\nde", 9, got_line, &l);
    CHECK(l.n == 1 && strcmp(l.last, "abc") == 0);
    dg_evreader_feed(&r, "f\n", 2, got_line, &l);
    CHECK(l.n == 2 && strcmp(l.last, "def") == 0);
    /* Exactly at the cap passes; one more is overlong and its rest discarded across feeds. */
    dg_evreader_feed(&r, "0123456789abcdef\n", 17, got_line, &l);
    CHECK(l.n == 3 && l.last_len == 16);
    dg_evreader_feed(&r, "0123456789", 10, got_line, &l);
    dg_evreader_feed(&r, "abcdefg", 7, got_line, &l);
    dg_evreader_feed(&r, "more more more", 14, got_line, &l);
    CHECK(l.n == 3 && r.overlong == 1);
    dg_evreader_feed(&r, "tail\nok\n", 8, got_line, &l);
    CHECK(l.n == 4 && strcmp(l.last, "ok") == 0 && r.overlong == 1);
    /* An overlong line in one piece. */
    dg_evreader_feed(&r, "0123456789abcdefXYZ\nz\n", 22, got_line, &l);
    CHECK(l.n == 5 && strcmp(l.last, "z") == 0 && r.overlong == 2);
    /* The last line without '\n' comes out at the end. */
    dg_evreader_feed(&r, "end", 3, got_line, &l);
    dg_evreader_finish(&r, got_line, &l);
    CHECK(l.n == 6 && strcmp(l.last, "end") == 0);
    /* Embedded NUL bytes are carried to the parser, not cut. */
    dg_evreader_feed(&r, "a\0b\n", 4, got_line, &l);
    CHECK(l.n == 7 && l.last_len == 3);
    dg_evreader_free(&r);
}

/* ---- the collector ---- */

static void feed(dg_evcollect *c, const char *s, double now)
{
    dg_evcollect_line(c, s, strlen(s), now);
}

/* The probe's note events: devgate's own messages, kept once each, cleaned. */
static void test_notes(void)
{
    dg_evcollect c;
    CHECK(dg_evcollect_init(&c, NULL));
    CHECK(kind_of("{\"v\":1,\"ev\":\"note\",\"message\":\"x\"}") == DG_EV_NOTE);
    CHECK(strcmp(dg_ev_kind_name(DG_EV_NOTE), "note") == 0);
    feed(&c, "{\"v\":1,\"ev\":\"note\",\"message\":\"a hook is off\\u001b[31m\"}", 0);
    feed(&c, "{\"v\":1,\"ev\":\"note\",\"message\":\"a hook is off\\u001b[31m\"}", 0);
    feed(&c, "{\"v\":1,\"ev\":\"note\",\"message\":7}", 0); /* not a string: counted only */
    CHECK(c.by_kind[DG_EV_NOTE] == 3 && c.unknown == 0);
    CHECK(cJSON_GetArraySize(c.notes) == 1);
    const cJSON *n = cJSON_GetArrayItem(c.notes, 0);
    CHECK(n && strcmp(n->valuestring, "a hook is off?[31m") == 0);
    for (int i = 0; i < 40; i++) {
        char line[96];
        snprintf(line, sizeof line, "{\"v\":1,\"ev\":\"note\",\"message\":\"note %d\"}", i);
        feed(&c, line, 0);
    }
    CHECK(cJSON_GetArraySize(c.notes) == 16); /* capped */
    dg_evcollect_free(&c);
}

static void test_collect(void)
{
    dg_evcollect c;
    dg_ev_limits lim = {.rate = 100, .max_steps = 50, .max_epochs = 3, .max_other = 2};
    CHECK(dg_evcollect_init(&c, &lim));
    feed(&c, "{\"v\":1,\"ev\":\"run_start\",\"device\":\"cpu\",\"batch\":4}", 0);
    feed(&c, "{\"v\":1,\"ev\":\"run_start\",\"device\":\"other\"}", 0); /* only the first counts */
    feed(&c, "garbage", 0);
    feed(&c, "{\"v\":1,\"ev\":\"nope\"}", 0);
    /* A flood of steps in one second: 100 kept, the rest dropped. */
    for (int i = 0; i < 1000; i++)
        feed(&c,
             "{\"v\":1,\"ev\":\"step\",\"epoch\":0,\"step\":1,\"step_ms\":2.5,\"loss\":0.5,"
             "\"synced\":true}",
             0.5);
    CHECK(c.nsteps == 50 && c.steps_summarised == 50 && c.dropped == 1 + 900);
    CHECK(c.steps[0].step_ms == 2.5 && c.steps[0].loss == 0.5 && c.steps[0].synced == 1 &&
          isnan(c.steps[0].data_ms));
    CHECK(isnan(c.steps[0].syncs)); /* not reported */
    /* The next window lets steps in again (all summarised now: the store is full). */
    feed(&c, "{\"v\":1,\"ev\":\"step\",\"step_ms\":1}", 1.6);
    CHECK(c.steps_summarised == 51);
    /* Epoch ends are not rate limited but capped. */
    for (int i = 0; i < 5; i++)
        feed(&c,
             i == 1   ? "{\"v\":1,\"ev\":\"epoch_end\",\"epoch\":1,\"gc\":\"young\"}"
             : i == 2 ? "{\"v\":1,\"ev\":\"epoch_end\",\"epoch\":1,\"gc\":\"odd\"}"
                      : "{\"v\":1,\"ev\":\"epoch_end\",\"epoch\":1,\"allocated\":10,"
                        "\"reserved\":\"x\",\"cache_emptied\":true,\"gc\":\"full\"}",
             0.5);
    CHECK(c.nepochs == 3 && c.epochs[0].allocated == 10 && isnan(c.epochs[0].reserved) &&
          c.epochs[0].cache_emptied == 1 && c.epochs[0].validation == -1);
    /* the collection the probe ran before the reading: full, young, or not said */
    CHECK(c.epochs[0].gc_full == 1 && c.epochs[1].gc_full == 0 && c.epochs[2].gc_full == -1);
    /* Gates capped at max_other; fallbacks aggregated by (op, device). */
    for (int i = 0; i < 3; i++)
        feed(&c,
             "{\"v\":1,\"ev\":\"gate\",\"device\":\"cpu\",\"built\":true,\"available\":true,"
             "\"matmul\":{\"ok\":true}}",
             2);
    CHECK(cJSON_GetArraySize(c.gates) == 2);
    feed(&c, "{\"v\":1,\"ev\":\"fallback\",\"op\":\"a\",\"device\":\"mps\",\"message\":\"m1\"}", 3);
    feed(&c, "{\"v\":1,\"ev\":\"fallback\",\"op\":\"a\",\"device\":\"mps\",\"message\":\"m2\"}", 3);
    feed(&c, "{\"v\":1,\"ev\":\"fallback\",\"op\":42}", 3);
    CHECK(c.nfallbacks == 2 && c.fallbacks[0].count == 2 &&
          strcmp(c.fallbacks[0].message, "m1") == 0 && strcmp(c.fallbacks[1].op, "?") == 0);
    CHECK(c.malformed == 1 && c.unknown == 1 && c.by_kind[DG_EV_STEP] == 1001 &&
          c.by_kind[DG_EV_RUN_START] == 2);
    CHECK(c.lines == c.parsed + c.malformed);
    const cJSON *dev = cJSON_GetObjectItem(c.run_start, "device");
    CHECK(cJSON_IsString(dev) && strcmp(dev->valuestring, "cpu") == 0);
    /* A long message is cut at a UTF-8 boundary. */
    char big[2000];
    int n = sprintf(big, "{\"v\":1,\"ev\":\"oom\",\"device\":\"x\",\"message\":\"");
    for (int i = 0; i < 600; i++)
        n += sprintf(big + n, "\xe2\x82\xac");
    sprintf(big + n, "\"}");
    feed(&c, big, 4);
    const cJSON *msg = cJSON_GetObjectItem(cJSON_GetArrayItem(c.ooms, 0), "message");
    CHECK(cJSON_IsString(msg) && strlen(msg->valuestring) < 512 &&
          dg_utf8_valid(msg->valuestring, strlen(msg->valuestring)));
    dg_evcollect_free(&c);
}

/* epoch_end.losses (the zero-code probe reads its losses once an epoch)
 * fill the loss of the epoch's stored steps that reported none. */
static void test_epoch_losses(void)
{
    dg_evcollect c;
    CHECK(dg_evcollect_init(&c, NULL));
    for (int e = 0; e < 2; e++)
        for (int i = 0; i < 4; i++) {
            char line[160];
            snprintf(line, sizeof line,
                     "{\"v\":1,\"ev\":\"step\",\"epoch\":%d,\"step\":%d,\"step_ms\":1%s}", e, i,
                     e == 1 && i == 3 ? ",\"loss\":9" : "");
            feed(&c, line, 0.1 * (e * 4 + i));
        }
    feed(&c,
         "{\"v\":1,\"ev\":\"epoch_end\",\"epoch\":0,\"losses\":[[0,1.5],[2,1.25],[7,3],"
         "[\"x\",1],[3,null]]}",
         1);
    feed(&c, "{\"v\":1,\"ev\":\"epoch_end\",\"epoch\":1,\"losses\":[[1,0.5],[3,0.25]]}", 2);
    CHECK(c.nsteps == 8 && c.nepochs == 2);
    CHECK(c.steps[0].loss == 1.5 && isnan(c.steps[1].loss) && c.steps[2].loss == 1.25 &&
          isnan(c.steps[3].loss));
    CHECK(isnan(c.steps[4].loss) && c.steps[5].loss == 0.5 && isnan(c.steps[6].loss));
    CHECK(c.steps[7].loss == 9); /* the step's own report is kept */
    CHECK(c.malformed == 0);
    dg_evcollect_free(&c);
}

/* The zero-code probe's command lines (src/supervise/probe.c). */
static void test_probe_plan(void)
{
    CHECK(dg_is_python("python") && dg_is_python("python3") && dg_is_python("/usr/bin/python3.11"));
    CHECK(dg_is_python("python3.13t") && dg_is_python("bin/python3d"));
    CHECK(!dg_is_python("python-config") && !dg_is_python("python3.") && !dg_is_python("ipython"));
    CHECK(!dg_is_python("torchrun") && !dg_is_python("sh") && !dg_is_python(NULL));
    struct {
        const char *argv[8];
        int at;
    } cases[] = {
        {{"python3", "train.py", "--batch", "8"}, 1},
        {{"python3", "-u", "-X", "dev", "train.py"}, 4},
        {{"python3", "-Wignore", "-uB", "train.py"}, 3},
        {{"python3", "-W", "ignore", "-m", "pkg.train", "-x"}, 3},
        {{"python3", "-c", "print(1)"}, 1},
        {{"python3", "--", "train.py"}, 2},
        {{"python3"}, -1},                   /* stdin */
        {{"python3", "-"}, -1},              /* stdin */
        {{"python3", "-I", "train.py"}, -1}, /* PYTHONPATH ignored */
        {{"python3", "-sE", "train.py"}, -1},
        {{"python3", "-uc", "print(1)"}, -1},
        {{"python3", "-X"}, -1},
        {{"python3", "--version"}, -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK_MSG(dg_python_program_index(cases[i].argv) == cases[i].at, "case %zu: %d", i,
                  dg_python_program_index(cases[i].argv));

    const char *cmd[] = {"python3", "-u", "train.py", "--epochs", "2", NULL};
    dg_run_opts o = {.argv = cmd, .probe_path = "pkgdir"};
    dg_probe_plan p;
    CHECK(dg_probe_plan_make(&o, &p));
    CHECK(p.how && strcmp(p.how, "argv") == 0 && strcmp(p.mode, "auto") == 0);
    const char *want[] = {"python3", "-u", "-m", "devgate_probe.auto", "train.py", "--epochs", "2"};
    for (size_t i = 0; i < 7; i++)
        CHECK_STR(p.argv[i], want[i]);
    CHECK(p.argv[7] == NULL);
    bool pp = false, cache_off = false;
    for (size_t i = 0; p.env[i]; i++) {
        pp = pp || strncmp(p.env[i], "PYTHONPATH=pkgdir", 17) == 0;
        cache_off = cache_off || strcmp(p.env[i], "DEVGATE_PROBE_EMPTY_CACHE") == 0;
    }
    CHECK(pp && cache_off);
    dg_probe_plan_free(&p);

    const char *launcher[] = {"torchrun", "--nproc-per-node", "2", "train.py", NULL};
    o.argv = launcher;
    o.empty_cache = true;
    CHECK(dg_probe_plan_make(&o, &p));
    CHECK(p.how && strcmp(p.how, "sitecustomize") == 0 && strcmp(p.argv[0], "torchrun") == 0);
    bool site = false, cache_on = false;
    for (size_t i = 0; p.env[i]; i++) {
        site = site || strncmp(p.env[i], "PYTHONPATH=pkgdir/devgate_probe/_site:pkgdir", 44) == 0;
        cache_on = cache_on || strcmp(p.env[i], "DEVGATE_PROBE_EMPTY_CACHE=1") == 0;
    }
    CHECK(site && cache_on);
    dg_probe_plan_free(&p);

    o.argv = cmd;
    o.probe_path = NULL; /* not found: the program runs as given, manual */
    CHECK(dg_probe_plan_make(&o, &p));
    CHECK(p.how == NULL && p.why[0] && strcmp(p.argv[2], "train.py") == 0);
    dg_probe_plan_free(&p);

    o.probe = DG_PROBE_OFF;
    CHECK(dg_probe_plan_make(&o, &p));
    bool no_fd = false;
    for (size_t i = 0; p.env[i]; i++)
        no_fd = no_fd || strcmp(p.env[i], "DEVGATE_EVENTS_FD") == 0;
    CHECK(no_fd && p.how == NULL && strcmp(p.mode, "off") == 0);
    dg_probe_plan_free(&p);
}

/* The lines quoted when a program fails (src/supervise/relay.c). */
static void test_error_lines(void)
{
    dg_error_lines el;
    /* A chained traceback: the last one's exception, not the first's; the
     * lines after it (a multi-line message) up to the cap. */
    const char *chained = "step 1\nTraceback (most recent call last):\n  File \"a.py\", line 3\n"
                          "KeyError: 'x'\n\nDuring handling of the above exception, another "
                          "exception occurred:\n\nTraceback (most recent call last):\n"
                          "  File \"a.py\", line 5, in <module>\n    import torch\n"
                          "    ^^^^^^^^^^^^\r\nModuleNotFoundError: No module named 'torch'\r\n";
    dg_error_lines_find(chained, strlen(chained), &el);
    CHECK(el.traceback && el.n == 1 &&
          strcmp(el.line[0], "ModuleNotFoundError: No module named 'torch'") == 0);
    const char *multi = "Traceback (most recent call last):\n  File \"t.py\", line 9\n"
                        "RuntimeError: shapes differ\nleft: 3\nright: 4\nmore\nand more\n";
    dg_error_lines_find(multi, strlen(multi), &el);
    CHECK(el.traceback && el.n == DG_ERROR_LINES_MAX &&
          strcmp(el.line[0], "RuntimeError: shapes differ") == 0 &&
          strcmp(el.line[3], "more") == 0);
    /* No traceback: the last three non-blank lines, as a terminal leaves them. */
    const char *plain = "one\ntwo\n\n\x1b[1;31mfatal:\x1b[0m no\tdata\n10%\r50%\r100%\n"
                        "\x1b]0;title\x07"
                        "bye\x7f\n   \n";
    dg_error_lines_find(plain, strlen(plain), &el);
    CHECK(!el.traceback && el.n == 3);
    CHECK(strcmp(el.line[0], "fatal: no data") == 0);
    CHECK(strcmp(el.line[1], "100%") == 0);
    CHECK(strcmp(el.line[2], "bye?") == 0);
    /* Bounded: a long line is cut on a character; nothing, no lines. */
    char big[3000];
    memset(big, 'a', sizeof big);
    memcpy(big + 500, "\xc3\xa9", 2);
    dg_error_lines_find(big, sizeof big, &el);
    CHECK(el.n == 1 && strlen(el.line[0]) < DG_ERROR_LINE_LEN);
    dg_error_lines_find("", 0, &el);
    CHECK(el.n == 0 && !el.traceback);
    /* A traceback whose exception line never came (cut off): the last lines. */
    const char *cut = "Traceback (most recent call last):\n  File \"x.py\", line 1\n";
    dg_error_lines_find(cut, strlen(cut), &el);
    CHECK(!el.traceback && el.n == 2);
}

/* J/sample of a run: the mean power the supervisor sampled over the timed
 * steps (after the warm-up) over the headline rate; samples outside the
 * steps (start-up, idle) left out; not reported without power samples. */
static void test_energy(void)
{
    dg_evcollect c;
    dg_ev_limits lim = {.rate = 1000, .max_steps = 100, .max_epochs = 3, .max_other = 2};
    CHECK(dg_evcollect_init(&c, &lim));
    /* 12 steps of 100 ms, 64 samples each, one every 0.1 s from t = 5 s (the
     * first two, warm-up, before t = 5.2). */
    for (int i = 0; i < 12; i++)
        feed(&c, "{\"v\":1,\"ev\":\"step\",\"epoch\":0,\"step\":1,\"step_ms\":100,\"batch\":64}",
             5.1 + 0.1 * i);
    cJSON *root = cJSON_CreateObject();
    cJSON_Delete(dg_run_profile_section(&c, root));
    CHECK(dg_jnum(root, "throughput.samples_per_s.value") == 640);
    /* The devices' power: 50 W idle before and after, 300 W while the steps run. */
    cJSON *ser = cJSON_AddArrayToObject(cJSON_AddObjectToObject(root, "supervise"), "series");
    for (int i = 0; i < 40; i++) {
        double t = 0.5 * i;
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "t", t);
        cJSON_AddNumberToObject(p, "gpu_power", t >= 4.9 && t <= 6.4 ? 300 : 50);
        cJSON_AddItemToArray(ser, p);
    }
    dg_run_energy_add(&c, root);
    CHECK(dg_jbool(root, "throughput.power_mean.valid") == 1 &&
          dg_jnum(root, "throughput.power_mean.value") == 300);
    CHECK_MSG(fabs(dg_jnum(root, "throughput.energy_per_sample.value") -
                   dg_jnum(root, "throughput.power_mean.value") / 640) < 1e-12 &&
                  dg_jbool(root, "throughput.energy_per_sample.valid") == 1,
              "J/sample %g", dg_jnum(root, "throughput.energy_per_sample.value"));
    CHECK(strstr(dg_jstr(root, "throughput.energy_source"), "NVML") != NULL);
    /* No power samples (no NVML): not reported, never 0 J. */
    cJSON_DeleteItemFromObject(root, "supervise");
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(root, "throughput"), "power_mean");
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(root, "throughput"), "energy_per_sample");
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(root, "throughput"), "energy_source");
    dg_run_energy_add(&c, root);
    CHECK(dg_jbool(root, "throughput.energy_per_sample.valid") == 0 &&
          cJSON_IsNull(dg_jpath(root, "throughput.energy_per_sample.value")) &&
          dg_jbool(root, "throughput.power_mean.valid") == 0);
    cJSON_Delete(root);
    dg_evcollect_free(&c);
}

/* A run's timeline (supervise.timeline): the probe's run_start marks and
 * run_end time (wall clock), the steps (devgate's receive times after the
 * collector's origin) and devgate's own marks, all as seconds after the
 * launch; what the run did not pass is not valid. */
static void test_timeline(void)
{
    dg_evcollect c;
    CHECK(dg_evcollect_init(&c, NULL));
    /* launch at wall 1000; the collector's origin 0.25 s later. */
    dg_run_clock k = {
        .launch = 1000, .received = 1000.25, .sampler = 1000.1, .exit = 1009, .gone = 1009.5};
    feed(&c,
         "{\"v\":1,\"ev\":\"run_start\",\"device\":\"cuda:0\",\"marks\":{\"forked\":1000.3,"
         "\"child_ready\":1000.5,\"main\":1000.75,\"torch_imported\":1000.75,"
         "\"device_init\":1001,\"device_ready\":1003}}",
         3.5);
    for (int i = 0; i < 5; i++) /* steps received at 4, 4.5, ... 6 s after the origin */
        feed(&c, "{\"v\":1,\"ev\":\"step\",\"step_ms\":500}", 4 + 0.5 * i);
    feed(&c, "{\"v\":1,\"ev\":\"run_end\",\"status\":\"stopped\",\"t\":1006.5}", 6.3);
    cJSON *t = dg_run_timeline(&c, &k);
    CHECK_STR(dg_jstr(t, "origin"), "launch");
    CHECK(dg_jnum(t, "origin_unix.value") == 1000);
    static const struct {
        const char *mark;
        double at;
    } want[] = {{"sampler_ready", 0.1}, {"forked", 0.3},          {"child_ready", 0.5},
                {"main", 0.75},         {"torch_imported", 0.75}, {"device_init", 1},
                {"device_ready", 3},    {"first_step", 4.25},     {"window_start", 4.75},
                {"window_end", 6.25},   {"loop_end", 6.5},        {"exit", 9},
                {"tree_gone", 9.5}};
    const cJSON *m = dg_jpath(t, "marks");
    CHECK(cJSON_GetArraySize((cJSON *)m) == (int)(sizeof want / sizeof want[0]));
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(m, want[i].mark);
        CHECK_MSG(dg_jbool(x, "valid") == 1 && fabs(dg_jnum(x, "value") - want[i].at) < 1e-9,
                  "%s: %g, want %g", want[i].mark, dg_jnum(x, "value"), want[i].at);
        CHECK_STR(dg_jstr(x, "unit"), "s");
    }
    cJSON_Delete(t);
    dg_evcollect_free(&c);
    /* A plain child on the cpu that took two steps: no fork, no device, no
     * window after the warm-up, no run_end; an unknown launch makes nothing valid. */
    CHECK(dg_evcollect_init(&c, NULL));
    feed(&c, "{\"v\":1,\"ev\":\"run_start\",\"marks\":{\"main\":1000.2,\"x\":\"y\"}}", 1);
    feed(&c, "{\"v\":1,\"ev\":\"step\",\"step_ms\":1}", 1);
    feed(&c, "{\"v\":1,\"ev\":\"step\",\"step_ms\":1}", 1.1);
    t = dg_run_timeline(&c, &k);
    m = dg_jpath(t, "marks");
    static const char *const absent[] = {"forked",       "child_ready",  "device_init",
                                         "device_ready", "window_start", "window_end",
                                         "loop_end"};
    for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++)
        CHECK_MSG(dg_jbool(cJSON_GetObjectItemCaseSensitive(m, absent[i]), "valid") == 0, "%s",
                  absent[i]);
    CHECK(fabs(dg_jnum(m, "main.value") - 0.2) < 1e-9 && dg_jnum(m, "first_step.value") == 1.25);
    cJSON_Delete(t);
    dg_run_clock unknown = {
        .launch = NAN, .received = NAN, .sampler = NAN, .exit = NAN, .gone = NAN};
    t = dg_run_timeline(&c, &unknown);
    CHECK(dg_jbool(t, "origin_unix.valid") == 0 && dg_jbool(t, "marks.main.valid") == 0 &&
          dg_jbool(t, "marks.first_step.valid") == 0);
    cJSON_Delete(t);
    dg_evcollect_free(&c);
}

int main(void)
{
    test_error_lines();
    test_notes();
    test_parse();
    test_reader();
    test_collect();
    test_epoch_losses();
    test_probe_plan();
    test_energy();
    test_timeline();
    CHECK_DONE();
}
