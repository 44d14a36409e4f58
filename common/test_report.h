/*
 * test_report.h: one PASS/FAIL line per check for the C/CUDA test programs (test_gpt2.c,
 * test_gpt2.cu), with the measured value and its tolerance, as tests/run_all.sh counts them.
 */
#ifndef COMMON_TEST_REPORT_H
#define COMMON_TEST_REPORT_H
#include <stdio.h>

static int test_failures = 0;

// fmt formats (measured, tolerance), e.g. "max abs err %.3g, tolerance %.2g".
static void report(const char* name, int ok, const char* fmt, double measured, double tolerance) {
    if (ok) printf("PASS %s (", name);
    else { printf("FAIL %s: ", name); test_failures++; }
    printf(fmt, measured, tolerance);
    printf(ok ? ")\n" : "\n");
}

#endif
