#include "utf8.h"

#include "devgate.h"

#include <string.h>

size_t dg_utf8_next(const unsigned char *s, size_t len, uint32_t *cp)
{
    unsigned c = s[0];
    size_t n;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xe0) == 0xc0) {
        n = 2, v = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        n = 3, v = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
        n = 4, v = c & 0x07, min = 0x10000;
    } else {
        *cp = 0xfffd;
        return 1;
    }
    if (n > len) {
        *cp = 0xfffd;
        return 1;
    }
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            *cp = 0xfffd;
            return 1;
        }
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) {
        *cp = 0xfffd;
        return 1;
    }
    *cp = v;
    return n;
}

bool dg_cp_unsafe(uint32_t cp)
{
    return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) ||
           (cp >= 0x2066 && cp <= 0x2069) || cp == 0xfffd;
}

size_t dg_text_clean(char *dst, size_t n, const char *src, size_t len, bool keep_lines)
{
    if (!n)
        return 0;
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)(src ? src : "");
    if (!src)
        len = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t k = dg_utf8_next(p + i, len - i, &cp);
        const char *put = (const char *)p + i;
        size_t m = k;
        if ((cp == '\n' || cp == '\t') && keep_lines)
            ;
        else if (cp == '\n' || cp == '\t' || cp == '\r')
            put = " ", m = 1;
        else if (dg_cp_unsafe(cp))
            put = "?", m = 1;
        if (o + m + 1 > n)
            break; /* never split a sequence */
        memcpy(dst + o, put, m);
        o += m;
        i += k;
    }
    dst[o] = '\0';
    return o;
}

/* ---- UTF-8 at the boundary (the rule in utf8.h) ---- */

size_t dg_utf8_seq(const char *str, size_t n)
{
    if (n == 0)
        return 0;
    uint32_t cp;
    size_t k = dg_utf8_next((const unsigned char *)str, n, &cp);
    /* dg_utf8_next reports a malformed byte as one byte of U+FFFD. */
    return k == 1 && cp == 0xfffd ? 0 : k;
}

size_t dg_utf8_clean(char *dst, size_t n, const char *src, size_t len, bool controls)
{
    if (n == 0)
        return 0;
    size_t w = 0;
    for (size_t i = 0; src && i < len && src[i];) {
        size_t k = dg_utf8_seq(src + i, len - i);
        const char *put = src + i;
        size_t pn = k;
        unsigned char c = (unsigned char)src[i];
        if (k == 0) {
            put = "\xef\xbf\xbd"; /* U+FFFD */
            pn = 3;
            k = 1;
        } else if (controls && ((k == 1 && (c < 0x20 || c == 0x7f)) ||
                                (k == 2 && c == 0xc2 && (unsigned char)src[i + 1] < 0xa0))) {
            put = "?";
            pn = 1;
        }
        if (w + pn + 1 > n)
            break;
        memcpy(dst + w, put, pn);
        w += pn;
        i += k;
    }
    dst[w] = '\0';
    return w;
}
