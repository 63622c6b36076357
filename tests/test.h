/* test.h - the smallest test harness that does the job.

   TEST_CASE("name") names the case that the following checks belong to; CHECK(cond, fmt, ...)
   counts a pass or prints the case, the place and the message of a failure; test_summary() prints
   "N passed, N failed" as the last line and returns the process exit status (non-zero on any
   failure). Everything is static: include it in one file per test program. */
#ifndef FORGE_TEST_H
#define FORGE_TEST_H

#include <stdarg.h>
#include <stdio.h>

#if defined(__GNUC__) || defined(__clang__)
#define TEST__PRINTF_LIKE(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define TEST__PRINTF_LIKE(fmt_index, first_arg)
#endif

typedef struct test_state {
    int passed;
    int failed;
    int cases;
    const char *current_case;
} test_state;

static test_state test__state = {0, 0, 0, "(no case)"};

static void test_case(const char *name) {
    test__state.current_case = name;
    test__state.cases++;
}

TEST__PRINTF_LIKE(5, 6)
static int test_check(int ok, const char *file, int line, const char *expression, const char *fmt, ...) {
    va_list args;
    if (ok) {
        test__state.passed++;
        return 1;
    }
    test__state.failed++;
    printf("FAIL [%s] %s:%d: %s: ", test__state.current_case, file, line, expression);
    va_start(args, fmt);
    vprintf(fmt, args);
    va_end(args);
    printf("\n");
    fflush(stdout);
    return 0;
}

/* The format is part of __VA_ARGS__ so that a message without arguments is still strict C99. */
#define TEST_CASE(name) test_case(name)
#define CHECK(cond, ...) test_check((cond) ? 1 : 0, __FILE__, __LINE__, #cond, __VA_ARGS__)

static int test_summary(void) {
    printf("%d cases\n", test__state.cases);
    printf("%d passed, %d failed\n", test__state.passed, test__state.failed);
    fflush(stdout);
    return test__state.failed ? 1 : 0;
}

#endif /* FORGE_TEST_H */
