/*
 * logger.h: the per-step training log, <output dir>/log.jsonl, one JSON object per line:
 *   {"kind":"config", ...}                             once at start
 *   {"kind":"train","step":S,"loss":..,"lr":..,"grad_norm":..,"ms":..,"tokens_per_s":..,
 *    "tokens":cumulative,"batch_tokens":..,"comm_wait_ms":..,"sent_elements":..,
 *    "gns_small_sq":..,"gns_big_sq":..,"gns_g2":..,"gns_trace":..,"b_simple":..}
 *   (gns_small_sq, gns_big_sq: the step's |G_small|^2, |G_big|^2; gns_g2, gns_trace: smoothed
 *   |G|^2 and tr(Sigma); b_simple in tokens; null when the meter is off or a value is not finite)
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
#include <glob.h>
#include <sys/stat.h>

typedef struct { FILE* f; } Logger;

// Create the output dir if needed (mkdir -p). Returns 0, or -1 with one error line (no
// newline) in err when it cannot be created or is not a directory.
static int output_dir_create(const char* dir, char* err, size_t err_cap) {
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
        if (mkdir(dir, 0755) != 0 && !(errno == EEXIST && stat(dir, &st) == 0 && S_ISDIR(st.st_mode))) {
            snprintf(err, err_cap, "error: -o %s: cannot create output dir (%s); expected a writable path", dir, strerror(errno));
            return -1;
        }
    } else if (!S_ISDIR(st.st_mode)) {
        snprintf(err, err_cap, "error: -o %s: exists and is not a directory; expected a directory", dir);
        return -1;
    }
    return 0;
}

// Create the output dir if needed; exits 1 with the error line if it cannot.
static void output_dir_prepare(const char* dir) {
    char err[4400];
    if (output_dir_create(dir, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
}

// Whether dir already holds a run (its log, a model checkpoint, or a rank's state file, which
// is all a node-local dir on another host than rank 0's holds): starting a new run there would
// overwrite the log and mix checkpoints, so the trainer asks for -y 1 or a new dir. Returns the
// name found in `found` (cap bytes), or 0.
static int output_dir_has_run(const char* dir, char* found, size_t cap) {
    char path[4200];
    snprintf(path, sizeof(path), "%s/log.jsonl", dir);
    struct stat st;
    if (stat(path, &st) == 0) { snprintf(found, cap, "log.jsonl"); return 1; }
    const char* patterns[] = {"model_*.bin", "state_*.bin"};
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof(path), "%s/%s", dir, patterns[k]);
        glob_t g;
        int hit = glob(path, 0, NULL, &g) == 0 && g.gl_pathc > 0;
        if (hit) {
            const char* slash = strrchr(g.gl_pathv[0], '/');
            snprintf(found, cap, "%s", slash ? slash + 1 : g.gl_pathv[0]);
        }
        globfree(&g);
        if (hit) return 1;
    }
    return 0;
}

// Copy s into buf as the inside of a JSON string (quotes, backslashes and control bytes escaped).
static const char* json_escape(char* buf, size_t cap, const char* s) {
    size_t j = 0;
    for (; *s && j + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { buf[j++] = '\\'; buf[j++] = (char)c; }
        else if (c < 0x20) j += (size_t)snprintf(buf + j, cap - j, "\\u%04x", c);
        else buf[j++] = (char)c;
    }
    buf[j] = '\0';
    return buf;
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

// A loss, norm or other float for the log: every digit a float has (%.9g round-trips fp32);
// JSON has no NaN/inf: print such values as null.
static const char* json_number(char* buf, size_t cap, double x) {
    if (isfinite(x)) snprintf(buf, cap, "%.9g", x); // 9 digits: a float exactly, so logs compare values
    else snprintf(buf, cap, "null");
    return buf;
}

static void logger_close(Logger* lg) {
    if (lg->f) fclose(lg->f);
    lg->f = NULL;
}

// The step line's ETA: "42s", "3m07s" or "2h05m" (seconds rounded to the nearest second).
static void format_eta(char* buf, size_t cap, double seconds) {
    int s = (int)(seconds + 0.5);
    if (s >= 3600) snprintf(buf, cap, "%dh%02dm", s / 3600, (s / 60) % 60);
    else if (s >= 60) snprintf(buf, cap, "%dm%02ds", s / 60, s % 60);
    else snprintf(buf, cap, "%ds", s);
}

#endif
