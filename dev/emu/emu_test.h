/*
 * emu_test.h: the check helpers the emulation's own tests share (test_emu.cu, test_emu_ptx.cu).
 *   check(name, ok, detail)        prints "PASS <EMU_TEST_PREFIX><name>" or "FAIL ...: detail"
 *                                  and counts failures in emu_test_failures.
 *   expect_stop(name, fn, phrase)  runs fn in a forked child with stderr captured; passes if
 *                                  the child exits with 3 (the emulation's stop) and its stderr
 *                                  contains phrase.
 * The including file defines EMU_TEST_PREFIX (a string literal) before including this header,
 * and EMU_TEST_SYNC_AFTER_CASE 1 to synchronize the device in the child after the case, so a
 * stop that surfaces at the synchronize counts (test_emu_ptx); test_emu leaves it 0 (its cases
 * stop inside the case, and a synchronize after a missed stream case is not needed to fail it).
 */
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef EMU_TEST_PREFIX
#error "define EMU_TEST_PREFIX (the PASS/FAIL name prefix) before including emu_test.h"
#endif
#ifndef EMU_TEST_SYNC_AFTER_CASE
#define EMU_TEST_SYNC_AFTER_CASE 0
#endif

static int emu_test_failures = 0;

static void check(const char* name, int ok, const char* detail) {
    if (ok) printf("PASS " EMU_TEST_PREFIX "%s\n", name);
    else { printf("FAIL " EMU_TEST_PREFIX "%s: %s\n", name, detail); emu_test_failures++; }
}

static void expect_stop(const char* name, void (*fn)(void), const char* phrase) {
    int fds[2];
    if (pipe(fds) != 0) { perror("pipe"); exit(1); }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        fn();
        if (EMU_TEST_SYNC_AFTER_CASE) cudaDeviceSynchronize();
        _exit(0); // not stopped: the emulation missed it
    }
    close(fds[1]);
    char text[4096];
    size_t len = 0;
    ssize_t got;
    while (len < sizeof(text) - 1 && (got = read(fds[0], text + len, sizeof(text) - 1 - len)) > 0) len += (size_t)got;
    text[len] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    int ok = WIFEXITED(status) && WEXITSTATUS(status) == 3 && strstr(text, phrase) != NULL;
    char detail[4200];
    snprintf(detail, sizeof(detail), "expected exit 3 and \"%s\"; got status %d, stderr: %s", phrase, status, text);
    check(name, ok, detail);
}
