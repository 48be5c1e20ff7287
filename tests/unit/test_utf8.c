/* UTF-8 at the boundary (src/core/json.c): the sequence check against a
 * reference decoder over every 1-, 2- and 3-byte input and the 4-byte lead
 * ranges, the cleaner's replacement and control rules, cutting at sequence
 * boundaries, string items, in-place repair of parsed trees, and core.c's
 * dg_copy_clean and dg_fail. */
#include "check.h"

#include "core/core.h"
#include "core/json.h"

#include <stdint.h>

/* Reference: the well-formed length at s by decoding the code point and
 * checking the shortest-form, surrogate and range rules (RFC 3629). */
static size_t ref_seq(const unsigned char *s, size_t n)
{
    if (n == 0)
        return 0;
    if (s[0] < 0x80)
        return 1;
    size_t len = (s[0] & 0xe0) == 0xc0   ? 2
                 : (s[0] & 0xf0) == 0xe0 ? 3
                 : (s[0] & 0xf8) == 0xf0 ? 4
                                         : 0;
    if (!len || n < len)
        return 0;
    uint32_t cp = s[0] & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

static bool valid_utf8(const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t k = ref_seq((const unsigned char *)s + i, n - i);
        if (!k)
            return false;
        i += k;
    }
    return true;
}

static void test_seq_exhaustive(void)
{
    size_t bad = 0;
    unsigned char b[4];
    for (unsigned x = 0; x < 256; x++) {
        b[0] = (unsigned char)x;
        bad += dg_utf8_seq((const char *)b, 1) != ref_seq(b, 1);
        for (unsigned y = 0; y < 256; y++) {
            b[1] = (unsigned char)y;
            bad += dg_utf8_seq((const char *)b, 2) != ref_seq(b, 2);
            for (unsigned z = 0; z < 256; z++) {
                b[2] = (unsigned char)z;
                bad += dg_utf8_seq((const char *)b, 3) != ref_seq(b, 3);
            }
        }
    }
    /* 4-byte: every lead and second byte with valid continuations after. */
    for (unsigned x = 0xf0; x < 0x100; x++)
        for (unsigned y = 0; y < 256; y++) {
            unsigned char q[4] = {(unsigned char)x, (unsigned char)y, 0x80, 0xbf};
            bad += dg_utf8_seq((const char *)q, 4) != ref_seq(q, 4);
            q[3] = 0x41;
            bad += dg_utf8_seq((const char *)q, 4) != ref_seq(q, 4);
        }
    CHECK_MSG(bad == 0, "%zu inputs where dg_utf8_seq disagrees with the reference", bad);
}

#define FFFD "\xef\xbf\xbd"

static void expect_clean(const char *in, bool controls, const char *want)
{
    char out[256];
    size_t w = dg_utf8_clean(out, sizeof out, in, strlen(in), controls);
    CHECK_MSG(strcmp(out, want) == 0 && w == strlen(want), "clean(\"%s\") gave \"%s\"", in, out);
    CHECK(valid_utf8(out));
}

static void test_clean(void)
{
    expect_clean("plain ascii", false, "plain ascii");
    expect_clean("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", false,
                 "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    expect_clean("\xff\xfe", false, FFFD FFFD);
    expect_clean("a\x80z", false, "a" FFFD "z");
    expect_clean("\xc0\xaf", false, FFFD FFFD);                   /* overlong '/' */
    expect_clean("\xe0\x80\xaf", false, FFFD FFFD FFFD);          /* overlong 3-byte */
    expect_clean("\xed\xa0\x80", false, FFFD FFFD FFFD);          /* surrogate U+D800 */
    expect_clean("\xf4\x90\x80\x80", false, FFFD FFFD FFFD FFFD); /* above U+10FFFF */
    expect_clean("\xe2\x82", false, FFFD FFFD);                   /* cut short */
    expect_clean("\x9b[2J", false, FFFD "[2J");                   /* 8-bit CSI */
    /* Controls: C0, DEL and C1 become '?' only when asked. */
    expect_clean("\x1b[2J\x7f\t", true, "?[2J??");
    expect_clean("\xc2\x9b"
                 "x\xc2\xa0",
                 true, "?x\xc2\xa0"); /* U+009B out, U+00A0 kept */
    expect_clean("\x1b\xc2\x85", false, "\x1b\xc2\x85");

    /* Never cuts a sequence: what does not fit with its NUL is left out. */
    char out[8];
    CHECK(dg_utf8_clean(out, 3, "\xc3\xa9", 2, false) == 2 && strcmp(out, "\xc3\xa9") == 0);
    CHECK(dg_utf8_clean(out, 2, "\xc3\xa9", 2, false) == 0 && out[0] == '\0');
    CHECK(dg_utf8_clean(out, 4, "a\xff", 2, false) == 1 && strcmp(out, "a") == 0);
    CHECK(dg_utf8_clean(out, 5, "a\xff", 2, false) == 4 && strcmp(out, "a" FFFD) == 0);
    CHECK(dg_utf8_clean(out, 1, "abc", 3, false) == 0 && out[0] == '\0');
    CHECK(dg_utf8_clean(out, sizeof out, NULL, 5, false) == 0 && out[0] == '\0');
    /* An embedded NUL ends the copy. */
    CHECK(dg_utf8_clean(out, sizeof out, "ab\0cd", 5, false) == 2 && strcmp(out, "ab") == 0);

    char *d = dg_utf8_dup("\xff\xff\xff");
    CHECK(d && strcmp(d, FFFD FFFD FFFD) == 0);
    dg_free(d);
    CHECK(dg_utf8_dup(NULL) == NULL);
}

static void test_json(void)
{
    cJSON *o = cJSON_CreateObject();
    CHECK(dg_json_add_str(o, "argv0", "\xff\xfe sleep") != NULL);
    CHECK(dg_json_add_str(o, "none", NULL) != NULL);
    cJSON_AddItemToObject(o, "item", dg_json_string("ok \xc3\xa9"));
    char *txt = cJSON_PrintUnformatted(o);
    CHECK(txt && valid_utf8(txt));
    CHECK(txt && strstr(txt, "\"argv0\":\"" FFFD FFFD " sleep\"") && strstr(txt, "\"none\":null") &&
          strstr(txt, "\"ok \xc3\xa9\""));
    cJSON_free(txt);
    cJSON_Delete(o);

    /* A string that reached a tree raw still leaves dg_json_print as valid
     * UTF-8 JSON, its bad bytes as U+FFFD and its good ones as they were. */
    cJSON *raw = cJSON_CreateObject();
    cJSON_AddStringToObject(raw, "export\xfe", "/tmp/p\xff \xc3\xa9");
    char *rp = dg_json_print(raw);
    CHECK_MSG(rp && valid_utf8(rp), "dg_json_print: %s", rp ? rp : "(null)");
    CHECK(rp && strcmp(rp, "{\"export" FFFD "\":\"/tmp/p" FFFD " \xc3\xa9\"}") == 0);
    dg_string_free(rp);
    cJSON_Delete(raw);

    /* cJSON hands invalid bytes through parsing; the repair fixes names and
     * values at every depth and leaves valid ones alone. */
    cJSON *t = cJSON_Parse(
        "{\"k\xff\":\"v\xfe\",\"a\":[\"x\",{\"d\":\"\xed\xa0\x80\"}],\"ok\":\"\xc3\xa9\"}");
    CHECK(t != NULL);
    char *before = t ? cJSON_PrintUnformatted(t) : NULL;
    CHECK(before && !valid_utf8(before));
    CHECK(dg_json_utf8_fix(t));
    char *after = t ? cJSON_PrintUnformatted(t) : NULL;
    CHECK_MSG(after && valid_utf8(after), "after repair: %s", after ? after : "(null)");
    CHECK(after &&
          strcmp(after, "{\"k" FFFD "\":\"v" FFFD "\",\"a\":[\"x\",{\"d\":\"" FFFD FFFD FFFD
                        "\"}],\"ok\":\"\xc3\xa9\"}") == 0);
    cJSON_free(before);
    cJSON_free(after);
    cJSON_Delete(t);
    CHECK(dg_json_utf8_fix(NULL));
}

static void test_core_users(dg_ctx *ctx)
{
    char buf[16];
    /* dg_copy_clean is the terminal cleaner (dg_text_clean): '?' for all. */
    dg_copy_clean(buf, sizeof buf, "\x1b]0;x\x07\xff");
    CHECK_STR(buf, "?]0;x??");
    /* Cut at a boundary: 4 bytes of room hold "ab" and no half of U+00E9. */
    dg_copy_clean(buf, 4, "ab\xc3\xa9");
    CHECK_STR(buf, "ab");
    dg_fail(ctx, DG_ERR_IO, "cannot read %s", "/data/\xff\xfeimg.png");
    CHECK_STR(dg_errmsg(ctx), "cannot read /data/" FFFD FFFD "img.png");
}

int main(void)
{
    dg_ctx *ctx = dg_ctx_new();
    if (!ctx)
        return 1;
    size_t live0;
    dg_host_mem_stats(&live0, NULL);
    test_seq_exhaustive();
    test_clean();
    test_json();
    test_core_users(ctx);
    size_t live1;
    dg_host_mem_stats(&live1, NULL);
    CHECK_MSG(live1 == live0, "host bytes live: %zu before, %zu after", live0, live1);
    dg_ctx_free(ctx);
    CHECK_DONE();
}
