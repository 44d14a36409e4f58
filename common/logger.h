/*
 * logger.h: the per-step training log, <output dir>/log.jsonl, one JSON object per line:
 *   {"kind":"config", ...}                             once at start
 *   {"kind":"train","step":S,"loss":..,"lr":..,"grad_norm":..,"ms":..,"tokens_per_s":..,
 *    "tokens":cumulative,"batch_tokens":..,"gns_g2":..,"gns_trace":..,"b_simple":..}
 *   {"kind":"val","step":S,"loss":..,"tokens":..}
 * Read by scripts/plot_log.py and scripts/plot_sweep.py. Only rank 0 writes. With no output
 * dir, logging is off. Lines are flushed as written so a killed run keeps its log.
 */
#ifndef COMMON_LOGGER_H
#define COMMON_LOGGER_H
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>

typedef struct { FILE* f; } Logger;

// Create the output dir if needed and open log.jsonl (append when resuming). Exits 1 if the
// directory cannot be created or written.
static void output_dir_prepare(const char* dir) {
    struct stat st;
    if (stat(dir, &st) != 0) {
        // mkdir -p: create the missing parents first.
        char partial[4096];
        snprintf(partial, sizeof(partial), "%s", dir);
        for (char* p = partial + 1; *p; p++) {
            if (*p != '/') continue;
            *p = '\0';
            if (stat(partial, &st) != 0) mkdir(partial, 0755);
            *p = '/';
        }
        if (mkdir(dir, 0755) != 0) {
            fprintf(stderr, "error: -o %s: cannot create output dir (%s); expected a writable path\n", dir, strerror(errno));
            exit(1);
        }
    } else if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "error: -o %s: exists and is not a directory; expected a directory\n", dir);
        exit(1);
    }
}

static void logger_init(Logger* lg, const char* dir, int append) {
    lg->f = NULL;
    if (dir == NULL) return;
    output_dir_prepare(dir);
    char path[4096];
    snprintf(path, sizeof(path), "%s/log.jsonl", dir);
    lg->f = fopen(path, append ? "a" : "w");
    if (lg->f == NULL) {
        fprintf(stderr, "error: -o %s: cannot write %s (%s); expected a writable directory\n", dir, path, strerror(errno));
        exit(1);
    }
}

// Append one record; fmt holds the fields after "kind" (e.g. "\"step\":%d,\"loss\":%.6f").
static void logger_record(Logger* lg, const char* kind, const char* fmt, ...) {
    if (lg->f == NULL) return;
    fprintf(lg->f, "{\"kind\":\"%s\",", kind);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(lg->f, fmt, ap);
    va_end(ap);
    fprintf(lg->f, "}\n");
    fflush(lg->f);
}

// JSON has no NaN/inf: print such values as null.
static const char* json_number(char* buf, size_t cap, double x) {
    if (isfinite(x)) snprintf(buf, cap, "%.6g", x);
    else snprintf(buf, cap, "null");
    return buf;
}

static void logger_close(Logger* lg) {
    if (lg->f) fclose(lg->f);
    lg->f = NULL;
}

#endif
