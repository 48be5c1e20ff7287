/* The C probe (clients/c/devgate_probe.h): every event through a pipe, read
 * back and parsed with cJSON; hostile strings; NAN and negative counts as null;
 * long strings cut into a valid line; a pipe without reader (SIGPIPE left at
 * its default action, then ignored); bad descriptors; no variable = silence. */
#define DEVGATE_PROBE_IMPLEMENTATION
#include "../../clients/c/devgate_probe.h"

#include "check.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int rd = -1, wr = -1;
static char line[2 * DGP_LINE_MAX];

static void open_pipe(void)
{
    int fds[2];
    if (pipe(fds) != 0) {
        perror("pipe");
        exit(2);
    }
    rd = fds[0];
    wr = fds[1];
    fcntl(rd, F_SETFL, fcntl(rd, F_GETFL) | O_NONBLOCK);
    char num[16];
    snprintf(num, sizeof num, "%d", wr);
    setenv("DEVGATE_EVENTS_FD", num, 1);
    unsetenv("DEVGATE_EVENTS_FILE");
}

static void close_pipe(void)
{
    if (rd >= 0)
        close(rd);
    if (wr >= 0)
        close(wr);
    rd = wr = -1;
}

/* Reads everything waiting on the pipe (an event is written whole before the
 * call returns); returns the byte count, 0 when nothing is there. */
static size_t drain(void)
{
    size_t n = 0;
    for (;;) {
        ssize_t r = read(rd, line + n, sizeof line - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    line[n] = 0;
    return n;
}

/* Reads the one line the last call sent and parses it; checks the envelope. */
static cJSON *next_event(const char *ev)
{
    size_t n = drain();
    CHECK_MSG(n > 0 && line[n - 1] == '\n', "no complete line for %s", ev);
    CHECK_MSG(strchr(line, '\n') == line + n - 1, "more than one line: %s", line);
    CHECK_MSG(n <= DGP_LINE_MAX, "line of %zu bytes", n);
    size_t raw_controls = 0;
    for (size_t i = 0; i + 1 < n; i++)
        raw_controls += (unsigned char)line[i] < 0x20;
    CHECK_MSG(raw_controls == 0, "%zu raw control bytes in %s", raw_controls, line);
    cJSON *j = cJSON_Parse(line);
    CHECK_MSG(j != NULL, "not JSON: %s", line);
    if (!j)
        return NULL;
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "v")) == 1);
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "ev"));
    CHECK_STR(name ? name : "", ev);
    double t = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "t"));
    CHECK_MSG(fabs(t - (double)time(NULL)) < 600, "t = %f", t);
    return j;
}

static const cJSON *get(const cJSON *j, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(j, key);
}
static double num(const cJSON *j, const char *key)
{
    return cJSON_GetNumberValue(get(j, key));
}
static const char *str(const cJSON *j, const char *key)
{
    const char *s = cJSON_GetStringValue(get(j, key));
    return s ? s : "(not a string)";
}
static int is_null(const cJSON *j, const char *key)
{
    return cJSON_IsNull(get(j, key));
}
static int is_true(const cJSON *j, const char *key)
{
    return cJSON_IsTrue(get(j, key));
}
static int is_false(const cJSON *j, const char *key)
{
    return cJSON_IsFalse(get(j, key));
}

/* A strict UTF-8 check of the raw line. */
static int valid_utf8(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t n = dgp_i_utf8(p, strlen((const char *)p));
        if (!n)
            return 0;
        p += n;
    }
    return 1;
}

static void test_every_event(void)
{
    open_pipe();
    CHECK(dgp_open() == 1);
    CHECK(dgp_enabled());
    cJSON *j;

    dgp_run_start("cuda:0", 64);
    j = next_event("run_start");
    CHECK_STR(str(j, "device"), "cuda:0");
    CHECK(num(j, "batch") == 64);
    CHECK(num(j, "pid") == (double)getpid());
    CHECK(is_null(j, "framework") && is_null(j, "bucket") && is_null(j, "seeds"));
    CHECK(get(j, "label") == NULL);
    cJSON_Delete(j);

    dgp_run_start_ex("cpu", 0, "devgate-c", "0.1", "lbl");
    j = next_event("run_start");
    CHECK_STR(str(get(j, "framework"), "name"), "devgate-c");
    CHECK_STR(str(get(j, "framework"), "version"), "0.1");
    CHECK(is_null(j, "batch"));
    CHECK_STR(str(j, "label"), "lbl");
    cJSON_Delete(j);

    dgp_gate("cpu", 1, 1, 1, 1.5e-5, 0.25);
    j = next_event("gate");
    CHECK_STR(str(j, "device"), "cpu");
    CHECK(is_true(j, "built") && is_true(j, "available") && is_null(j, "reason"));
    CHECK(is_true(get(j, "matmul"), "ok"));
    CHECK(num(get(j, "matmul"), "max_abs_err") == 1.5e-5);
    CHECK(num(get(j, "matmul"), "ms") == 0.25);
    CHECK(is_null(get(j, "matmul"), "n"));
    cJSON_Delete(j);

    dgp_gate_ex("cuda", 0, 0, "built without CUDA", 256, 0, NAN, NAN);
    j = next_event("gate");
    CHECK(is_false(j, "built") && is_false(j, "available"));
    CHECK_STR(str(j, "reason"), "built without CUDA");
    CHECK(is_null(j, "matmul"));
    cJSON_Delete(j);

    dgp_gate_ex("cuda:1", 1, 1, "matmul: 3 elements outside", 512, 0, 0.1, 1.0 / 3.0);
    j = next_event("gate");
    CHECK(is_false(get(j, "matmul"), "ok"));
    CHECK(num(get(j, "matmul"), "n") == 512);
    CHECK(num(get(j, "matmul"), "ms") == 1.0 / 3.0); /* %.17g round-trips */
    cJSON_Delete(j);

    dgp_step(2, 17, 12.5, NAN, NAN, 0);
    j = next_event("step");
    CHECK(num(j, "epoch") == 2 && num(j, "step") == 17 && num(j, "step_ms") == 12.5);
    CHECK(is_null(j, "data_ms") && is_null(j, "loss") && is_false(j, "synced"));
    cJSON_Delete(j);

    dgp_step(0, 0, INFINITY, 3.25, 0.6931471805599453, 1);
    j = next_event("step");
    CHECK(is_null(j, "step_ms"));
    CHECK(num(j, "data_ms") == 3.25 && num(j, "loss") == 0.6931471805599453 &&
          is_true(j, "synced"));
    cJSON_Delete(j);

    dgp_step(0, 1, 1.0, -INFINITY, -NAN, 1);
    j = next_event("step");
    CHECK(is_null(j, "data_ms") && is_null(j, "loss"));
    cJSON_Delete(j);

    dgp_epoch_end(9, 1024, -1, 4096, -1, 123456789012LL, 1, 0);
    j = next_event("epoch_end");
    CHECK(num(j, "epoch") == 9 && num(j, "allocated") == 1024 && num(j, "max_allocated") == 4096);
    CHECK(is_null(j, "reserved") && is_null(j, "driver"));
    CHECK(num(j, "footprint") == 123456789012.0);
    CHECK(is_true(j, "cache_emptied") && is_false(j, "validation"));
    cJSON_Delete(j);

    dgp_phase("validation", 3);
    j = next_event("phase");
    CHECK_STR(str(j, "name"), "validation");
    CHECK(num(j, "epoch") == 3);
    cJSON_Delete(j);
    dgp_phase("sweep", -1);
    j = next_event("phase");
    CHECK(is_null(j, "epoch"));
    cJSON_Delete(j);

    dgp_fallback("aten::nonzero", "mps", "The operator 'aten::nonzero' is not currently supported");
    j = next_event("fallback");
    CHECK_STR(str(j, "op"), "aten::nonzero");
    CHECK_STR(str(j, "device"), "mps");
    CHECK_STR(str(j, "message"), "The operator 'aten::nonzero' is not currently supported");
    cJSON_Delete(j);

    dgp_sweep_trial(128, "device-oom", NAN, NAN, -1, "CUDA out of memory");
    j = next_event("sweep_trial");
    CHECK(num(j, "batch") == 128);
    CHECK_STR(str(j, "ended"), "device-oom");
    CHECK(is_null(j, "samples_per_s") && is_null(j, "step_ms") && is_null(j, "peak_bytes"));
    CHECK_STR(str(j, "reason"), "CUDA out of memory");
    cJSON_Delete(j);
    dgp_sweep_trial(64, "ok", 5120.5, 12.5, 1LL << 33, NULL);
    j = next_event("sweep_trial");
    CHECK(num(j, "samples_per_s") == 5120.5 && num(j, "peak_bytes") == (double)(1LL << 33));
    CHECK(is_null(j, "reason"));
    cJSON_Delete(j);

    dgp_oom("cuda:0", 256, "CUDA out of memory. Tried to allocate 2.00 GiB");
    j = next_event("oom");
    CHECK_STR(str(j, "device"), "cuda:0");
    CHECK(num(j, "batch") == 256);
    CHECK_STR(str(j, "message"), "CUDA out of memory. Tried to allocate 2.00 GiB");
    cJSON_Delete(j);

    dgp_run_end("error", NULL);
    j = next_event("run_end");
    CHECK_STR(str(j, "status"), "error");
    CHECK(is_null(j, "message"));
    cJSON_Delete(j);

    dgp_close();
    CHECK(!dgp_enabled());
    dgp_phase("after close", 1);
    CHECK(drain() == 0);
    close_pipe();
}

static void test_hostile_strings(void)
{
    open_pipe();
    CHECK(dgp_open() == 1);
    const char *hostile =
        "q\"uote b\\ack nl\n cr\r tab\t bell\x07 esc\x1b del\x7f us\x1f e\xc3\xa9 \xe6\x97\xa5 "
        "bad\xff\xc3 end\"}\n{\"ev\":\"fake\"}";
    const char *expect =
        "q\"uote b\\ack nl\n cr\r tab\t bell\x07 esc\x1b del\x7f us\x1f e\xc3\xa9 \xe6\x97\xa5 "
        "bad\xef\xbf\xbd\xef\xbf\xbd end\"}\n{\"ev\":\"fake\"}";
    dgp_fallback(hostile, "mps\"\\", hostile);
    cJSON *j = next_event("fallback");
    CHECK(strstr(line, "\\u0007") && strstr(line, "\\u001b") && strstr(line, "\\u007f") &&
          strstr(line, "\\u001f"));
    CHECK(strstr(line, "\\n") && strstr(line, "\\\"") && strstr(line, "\\\\"));
    CHECK(valid_utf8(line));
    CHECK_STR(str(j, "op"), expect);
    CHECK_STR(str(j, "message"), expect);
    CHECK_STR(str(j, "device"), "mps\"\\");
    CHECK(get(j, "ev") && strcmp(str(j, "ev"), "fallback") == 0);
    cJSON_Delete(j);

    /* Long strings are cut at a character boundary and the line stays valid. */
    size_t big = 3 * DGP_LINE_MAX;
    char *s = malloc(big + 1);
    for (size_t i = 0; i + 3 <= big; i += 3)
        memcpy(s + i, "\xe6\x97\xa5", 3); /* U+65E5, three bytes */
    s[big] = 0;
    dgp_fallback(s, s, s);
    j = next_event("fallback");
    CHECK(valid_utf8(line));
    CHECK(strlen(str(j, "message")) > 1000 && strlen(str(j, "message")) % 3 == 0);
    CHECK(strlen(str(j, "op")) % 3 == 0 && strlen(str(j, "op")) <= 256);
    cJSON_Delete(j);
    memset(s, '"', big); /* every byte doubles when escaped */
    dgp_run_end(s, s);
    j = next_event("run_end");
    CHECK(strlen(line) <= DGP_LINE_MAX);
    CHECK(strspn(str(j, "message"), "\"") == strlen(str(j, "message")) &&
          strlen(str(j, "message")) > 500);
    cJSON_Delete(j);
    memset(s, 1, big); /* every byte becomes \u0001 */
    dgp_oom(s, 1, s);
    j = next_event("oom");
    CHECK(strlen(str(j, "message")) > 100 &&
          strspn(str(j, "message"), "\x01") == strlen(str(j, "message")));
    cJSON_Delete(j);
    free(s);
    dgp_close();
    close_pipe();
}

static void test_broken_pipe(int ignore)
{
    struct sigaction sa = {0}, old;
    sa.sa_handler = ignore ? SIG_IGN : SIG_DFL;
    sigaction(SIGPIPE, &sa, &old);
    open_pipe();
    CHECK(dgp_open() == 1);
    close(rd);
    rd = -1;
    dgp_run_start("cpu", 1); /* EPIPE: with SIG_DFL the guard keeps the process alive */
    CHECK(!dgp_enabled());
    for (int i = 0; i < 10; i++)
        dgp_step(0, i, 1.0, NAN, NAN, 0);
    dgp_run_end("ok", NULL);
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    CHECK(sigismember(&pending, SIGPIPE) == 0); /* consumed, not left pending */
    sigset_t mask;
    pthread_sigmask(SIG_SETMASK, NULL, &mask);
    CHECK(sigismember(&mask, SIGPIPE) == 0); /* the mask is restored */
    dgp_close();
    close_pipe();
    sigaction(SIGPIPE, &old, NULL);
    CHECK(1); /* still running */
}

static void test_bad_descriptors(void)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    char num[16];
    const char *junk[] = {"", "abc", "12x", "-1", "99999999999999"};
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
        setenv("DEVGATE_EVENTS_FD", junk[i], 1);
        unsetenv("DEVGATE_EVENTS_FILE");
        CHECK_MSG(dgp_open() == 0, "DEVGATE_EVENTS_FD=\"%s\"", junk[i]);
        dgp_phase("x", 0);
    }
    snprintf(num, sizeof num, "%d", fds[0]); /* read-only */
    setenv("DEVGATE_EVENTS_FD", num, 1);
    CHECK(dgp_open() == 0);
    dgp_phase("x", 0);
    close(fds[0]);
    close(fds[1]);
    setenv("DEVGATE_EVENTS_FD", num, 1); /* closed now */
    CHECK(dgp_open() == 0);
    dgp_run_end("ok", "nothing");
    /* A descriptor closed under the probe: EBADF turns it silent. */
    open_pipe();
    CHECK(dgp_open() == 1);
    close(wr);
    wr = -1;
    dgp_phase("x", 0);
    CHECK(!dgp_enabled());
    close_pipe();
    unsetenv("DEVGATE_EVENTS_FD");
}

static void test_silent_and_file(void)
{
    unsetenv("DEVGATE_EVENTS_FD");
    unsetenv("DEVGATE_EVENTS_FILE");
    CHECK(dgp_open() == 0);
    CHECK(!dgp_enabled());
    dgp_run_start("cpu", 1);
    dgp_step(0, 0, 1, 1, 1, 1);
    dgp_run_end("ok", NULL);

    char path[] = "dgp_probe_events_XXXXXX"; /* in the working directory */
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK(write(fd, "first\n", 6) == 6);
    close(fd);
    setenv("DEVGATE_EVENTS_FILE", path, 1);
    CHECK(dgp_open() == 1);
    dgp_phase("train", 0);
    dgp_run_end("ok", "done");
    dgp_close();
    unsetenv("DEVGATE_EVENTS_FILE");
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (f) {
        char buf[512];
        int lines = 0;
        CHECK(fgets(buf, sizeof buf, f) &&
              strcmp(buf, "first\n") == 0); /* appended, not replaced */
        while (fgets(buf, sizeof buf, f)) {
            cJSON *j = cJSON_Parse(buf);
            CHECK(j != NULL);
            lines++;
            cJSON_Delete(j);
        }
        CHECK(lines == 2);
        fclose(f);
    }
    unlink(path);
    CHECK(dgp_footprint() > 0);
}

int main(void)
{
    test_every_event();
    test_hostile_strings();
    test_broken_pipe(0);
    test_broken_pipe(1);
    test_bad_descriptors();
    test_silent_and_file();
    CHECK_DONE();
}
