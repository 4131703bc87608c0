/* A minimal test harness: CHECK records a failure with file and line and the
 * test goes on; the program exits non-zero if any check failed, and also if no
 * check ran at all (a test that checks nothing is a failing test). */
#ifndef FP4_TEST_CHECK_H
#define FP4_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

static int check_failures;
static long check_count;

#define CHECK(cond)                                                              \
    do {                                                                         \
        check_count++;                                                           \
        if (!(cond)) {                                                           \
            check_failures++;                                                    \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                        \
    } while (0)

#define CHECK_MSG(cond, ...)                                                     \
    do {                                                                         \
        check_count++;                                                           \
        if (!(cond)) {                                                           \
            check_failures++;                                                    \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                        \
            fputc('\n', stderr);                                                 \
        }                                                                        \
    } while (0)

static inline int check_finish(const char *name)
{
    if (check_count == 0) {
        fprintf(stderr, "%s: no checks ran\n", name);
        return 1;
    }
    printf("%s: %ld checks, %d failed\n", name, check_count, check_failures);
    return check_failures ? 1 : 0;
}

#endif
