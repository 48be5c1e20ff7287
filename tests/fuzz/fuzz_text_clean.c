/* libFuzzer harness for dg_text_clean, the one cleaner every terminal printer
 * uses: whatever the bytes, the output is valid UTF-8 without a control, C1 or
 * bidi code point (tab and newline only when kept), never longer than the
 * input, NUL-terminated within the buffer, and never split mid-sequence. */
#include "core/utf8.h"
#include "devgate.h"
#include "fuzz.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check(const char *out, size_t len, bool keep)
{
    const unsigned char *p = (const unsigned char *)out;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t k = dg_utf8_next(p + i, len - i, &cp);
        /* U+FFFD (a bad sequence, or one in the input) is unsafe: never kept. */
        bool line = keep && (cp == '\n' || cp == '\t');
        if (!line && dg_cp_unsafe(cp))
            abort();
        i += k;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t caps[] = {1, 2, 3, 4, 7, 64, size + 1};
    char *out = malloc(size + 1);
    if (!out)
        return 0;
    for (int keep = 0; keep < 2; keep++)
        for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
            size_t cap = caps[c] < size + 1 ? caps[c] : size + 1;
            memset(out, 'x', size + 1);
            size_t n = dg_text_clean(out, cap, (const char *)data, size, keep);
            if (n >= cap || out[n] != '\0' || strlen(out) != n || n > size)
                abort();
            check(out, n, keep);
        }
    free(out);
    return 0;
}
