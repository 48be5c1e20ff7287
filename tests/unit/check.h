/* Minimal test harness: CHECK records a failure and goes on; each test file
 * ends with CHECK_DONE(), which prints "N passed, N failed" and sets the exit
 * status. A test that cannot run here calls check_skip (exit 77). */
#ifndef DG_CHECK_H
#define DG_CHECK_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_passed, check_failed;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (cond) {                                                                                \
            check_passed++;                                                                        \
        } else {                                                                                   \
            check_failed++;                                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (cond) {                                                                                \
            check_passed++;                                                                        \
        } else {                                                                                   \
            check_failed++;                                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

#define CHECK_STR(a, b) CHECK_MSG(strcmp((a), (b)) == 0, "\"%s\" != \"%s\"", (a), (b))

#define CHECK_DONE()                                                                               \
    do {                                                                                           \
        printf("%d passed, %d failed\n", check_passed, check_failed);                              \
        return check_failed ? 1 : 0;                                                               \
    } while (0)

static inline void check_skip(const char *why)
{
    printf("skipped: %s\n", why);
    exit(77);
}
#endif
