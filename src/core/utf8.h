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

/* ---- UTF-8 at the boundary -----------------------------------------------
 * Bytes from the outside world (command lines, paths, device and driver
 * names, environment values, hostnames, library messages) pass through these
 * before they reach a record, so every record is valid JSON text. The rule:
 * each byte that does not start a well-formed UTF-8 sequence (stray
 * continuation bytes, overlong forms, surrogates, code points above
 * U+10FFFF, sequences cut short) becomes U+FFFD; well-formed text passes
 * unchanged. docs/schema/env.md ("Text from the system") states it. */

/* Length of the well-formed UTF-8 sequence at s (at most n bytes), 0 if none. */
size_t dg_utf8_seq(const char *s, size_t n);
/* Copies len bytes of src into dst (capacity n, always NUL-terminated when
 * n > 0) by the rule above, never cutting a sequence; with controls, C0
 * controls, DEL and C1 controls (U+0080..U+009F) become '?'. NUL bytes in
 * src end the copy. Returns the bytes written (without the NUL). */
size_t dg_utf8_clean(char *dst, size_t n, const char *src, size_t len, bool controls);
#endif
