/* UTF-8 decoding and the code points no terminal or report shows as they
 * are; shared by the text cleaner (dg_text_clean) and the renderers. */
#ifndef DG_UTF8_H
#define DG_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decodes one UTF-8 sequence of at most len bytes at s (len >= 1): returns its
 * length and the code point in *cp, or length 1 and U+FFFD for a malformed,
 * truncated, overlong, surrogate or out-of-range sequence. */
size_t dg_utf8_next(const unsigned char *s, size_t len, uint32_t *cp);
/* True for code points shown as a replacement: C0 and C1 controls, DEL, bidi
 * embeddings, overrides and isolates (they reorder the text around them),
 * and U+FFFD itself. Tab, CR and LF are true too; callers that keep lines
 * test for them first. */
bool dg_cp_unsafe(uint32_t cp);
#endif
