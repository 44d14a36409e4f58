/*
 * zero/trace/trace_write.h: the timeline's file, Chrome trace-event JSON (complete "X" and
 * metadata "M" events; ts and dur in microseconds; pid the rank, tid 0 compute, tid 1
 * communication; otherData says which run wrote it, ZeroTraceInfo). zero_trace_write_to sorts the
 * events, shows one collective at a time on the communication track, and writes to a temporary
 * name then renames it; the planner (plan/plan.h) writes its predicted timeline with
 * zero_trace_write too. zero_trace_close ends tracing after the last step: GPU events read
 * against the anchor, this rank's file written, every rank agreeing on success.
 * Included by zero/trace/trace.h last (zero_trace_close reads trace_record.h's state).
 */
#ifndef ZERO_TRACE_WRITE_H
#define ZERO_TRACE_WRITE_H
#ifndef ZERO_CUH
#error "zero/trace/trace_write.h is part of the ZeRO engine; include zero.cuh"
#endif

static void zero_trace_unit_label(const ParamLayout* layout, int unit, char* buf, size_t cap) {
    int final_unit = UNIT_FINAL(&layout->config);
    if (unit <= ZERO_TRACE_LM_HEAD && layout->num_wte_units == 1) snprintf(buf, cap, "lm head");
    else if (unit <= ZERO_TRACE_LM_HEAD) snprintf(buf, cap, "lm head %d", ZERO_TRACE_LM_HEAD - unit);
    else if (unit < 0) snprintf(buf, cap, "-");
    else if (unit == UNIT_EMBEDDING) snprintf(buf, cap, "embedding");
    else if (unit == final_unit) snprintf(buf, cap, "final");
    else if (unit > final_unit) snprintf(buf, cap, "wte %d", unit - final_unit); // wte's vocab chunk k = unit - L - 1
    else snprintf(buf, cap, "layer %d", unit - 1);
}

/*
 * A collective's kind as the trace names it: the engine's kind, and for ZeRO++'s quantized ones
 * the code format their label names (zero/zeropp/zeropp.h: "all_gather int8" for qwZ's gather,
 * "all_to_all int4" or "all_to_all int8" for qgZ's); hpZ's is "all_gather (group)", fp32 or bf16.
 */
static const char* zero_trace_kind(int op_kind, const char* what, char* buf, size_t cap) {
    const char* format = what == NULL ? NULL : strstr(what, "int8") ? "int8" : strstr(what, "int4") ? "int4" : NULL;
    if (format) snprintf(buf, cap, "%s %s", zero_op_names[op_kind], format);
    else snprintf(buf, cap, "%s", zero_op_names[op_kind]);
    return buf;
}

static int zero_trace_by_begin(const void* a, const void* b) {
    const ZeroTraceEvent* x = (const ZeroTraceEvent*)a;
    const ZeroTraceEvent* y = (const ZeroTraceEvent*)b;
    if (x->kind != y->kind) return x->kind - y->kind;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

// What a trace file says about the run that wrote it (its otherData).
typedef struct {
    int rank, world_size, first_step, last_step, micro_steps, dropped;
    const char* host;
    const char* build;   // "cpu", "gpu", or "plan" (the planner's predicted timeline)
    int element_bytes;
} ZeroTraceInfo;

/*
 * Write `events` as one Chrome trace-event file at `path` (a temporary name, then renamed).
 * Sorts them; the communication track shows one collective at a time: each from its issue, or
 * from the completion of the one before it, to its completion (the engine's collectives queue).
 * Collectives that completed before the first step span are left out. Returns 0, or -1 after
 * one error line: printed, or with err (cap bytes) put there for the caller to print.
 */
static int zero_trace_write_to(const char* path, ZeroTraceEvent* events, int count, const ParamLayout* layout, int zero_stage,
                               const ZeroTraceInfo* info, char* err, size_t cap) {
    qsort(events, (size_t)count, sizeof(ZeroTraceEvent), zero_trace_by_begin);
    double link_free = -1e30, first_step_begin = 1e30;
    for (int i = 0; i < count; i++) {
        ZeroTraceEvent* e = &events[i];
        if (e->kind == ZERO_TRACE_EV_STEP && e->begin < first_step_begin) first_step_begin = e->begin;
        if (e->kind != ZERO_TRACE_EV_COMM) continue;
        if (e->begin < link_free) e->begin = link_free < e->end ? link_free : e->end;
        if (e->end > link_free) link_free = e->end;
    }
    char tmp[4416]; // path (at most 4300, plan_print; gcc bounds it at 4407 once inlined) + ".tmp"
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE* f = fopen(tmp, "w");
    char line[4700];
    if (f == NULL) {
        snprintf(line, sizeof(line), "error: -tr %s: cannot write the trace (%s); expected a writable path", path, strerror(errno));
        if (err) snprintf(err, cap, "%s", line); else fprintf(stderr, "%s\n", line);
        return -1;
    }
    int r = info->rank;
    fprintf(f, "{\"traceEvents\":[\n");
    fprintf(f, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d (%s)\"}},\n", r, r, info->host);
    fprintf(f, "{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}},\n", r, r);
    fprintf(f, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"compute\"}},\n", r);
    fprintf(f, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":1,\"args\":{\"name\":\"communication\"}}", r);
    for (int i = 0; i < count; i++) {
        const ZeroTraceEvent* e = &events[i];
        if (e->kind < 0 || e->end < e->begin) continue;
        if (e->kind == ZERO_TRACE_EV_COMM && e->end < first_step_begin) continue;
        char name[160], unit[32], kind[48];
        zero_trace_unit_label(layout, e->unit, unit, sizeof(unit));
        double ts = e->begin * 1e6, dur = (e->end - e->begin) * 1e6;
        fprintf(f, ",\n");
        if (e->kind == ZERO_TRACE_EV_STEP) {
            fprintf(f, "{\"ph\":\"X\",\"cat\":\"step\",\"name\":\"step %d\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"dur\":%.3f,"
                    "\"args\":{\"step\":%d}}", e->step, r, ts, dur, e->step);
        } else if (e->kind == ZERO_TRACE_EV_COMPUTE) {
            if (e->phase == ZERO_TRACE_OPTIMIZER) snprintf(name, sizeof(name), "optimizer");
            else snprintf(name, sizeof(name), "%s %s", zero_trace_phase_names[e->phase], unit);
            fprintf(f, "{\"ph\":\"X\",\"cat\":\"%s\",\"name\":\"%s\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"dur\":%.3f,"
                    "\"args\":{\"step\":%d,\"micro_step\":%d,\"unit\":%d}}", zero_trace_phase_names[e->phase], name, r, ts, dur,
                    e->step, e->micro_step, e->unit);
        } else if (e->kind == ZERO_TRACE_EV_WAIT) {
            const char* what = e->op_kind == ZERO_OP_NONE ? "collectives" : zero_trace_kind(e->op_kind, e->what, kind, sizeof(kind));
            snprintf(name, sizeof(name), "wait %s %s", what, e->unit >= 0 ? unit : "");
            fprintf(f, "{\"ph\":\"X\",\"cat\":\"wait\",\"name\":\"%s\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"dur\":%.3f,"
                    "\"args\":{\"step\":%d,\"micro_step\":%d,\"unit\":%d,\"kind\":\"%s\"}}", name, r, ts, dur, e->step,
                    e->micro_step, e->unit, what);
        } else {
            zero_trace_kind(e->op_kind, e->what, kind, sizeof(kind));
            snprintf(name, sizeof(name), "%s %s", kind, e->unit >= 0 ? unit : "");
            fprintf(f, "{\"ph\":\"X\",\"cat\":\"comm\",\"name\":\"%s\",\"pid\":%d,\"tid\":1,\"ts\":%.3f,\"dur\":%.3f,"
                    "\"args\":{\"step\":%d,\"unit\":%d,\"kind\":\"%s\",\"what\":\"%s\",\"elements\":%lld,\"bytes\":%lld,"
                    "\"issued_us\":%.3f,\"queued_us\":%.3f}}", name, r, ts, dur, e->step, e->unit, kind, e->what ? e->what : "",
                    e->elements, e->elements * (long long)info->element_bytes, e->issued * 1e6, (e->begin - e->issued) * 1e6);
        }
    }
    fprintf(f, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"rank\":%d,\"world_size\":%d,\"zero_stage\":%d,\"host\":\"%s\","
            "\"build\":\"%s\",\"element_bytes\":%d,\"first_step\":%d,\"last_step\":%d,\"micro_steps\":%d,\"dropped\":%d}}\n",
            r, info->world_size, zero_stage, info->host, info->build, info->element_bytes, info->first_step, info->last_step,
            info->micro_steps, info->dropped);
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        snprintf(line, sizeof(line), "error: -tr %s: writing the trace failed (%s); expected space on its disk", path, strerror(errno));
        if (err) snprintf(err, cap, "%s", line); else fprintf(stderr, "%s\n", line);
        remove(tmp);
        return -1;
    }
    return 0;
}

static int zero_trace_write(const char* path, ZeroTraceEvent* events, int count, const ParamLayout* layout, int zero_stage,
                            const ZeroTraceInfo* info) {
    return zero_trace_write_to(path, events, count, layout, zero_stage, info, NULL, 0);
}

/*
 * Write this rank's file (every rank calls it after the last step; GPU: the device is
 * synchronized first, outside every step, and each event's time read against the anchor).
 * A failure (a full disk) leaves no file: one error line, the lowest failing rank's, and every
 * rank exits 1; the run's log and checkpoints are written already.
 */
static void zero_trace_close(ZeroEngine* z, int grad_accum_steps) {
    ZeroTrace* t = &zero_trace;
    if (!ZERO_TRACE || !t->on) return;
    t->on = t->recording = 0;
#if ZERO_GPU_BUILD
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < t->count; i++) {
        ZeroTraceEvent* e = &t->events[i];
        float ms = 0.0f;
        if (e->host) continue; // host clock times already
        if (e->ev_begin >= 0) { CUDA_CHECK(cudaEventElapsedTime(&ms, t->anchor, t->pool[e->ev_begin])); e->begin = t->anchor_s + ms / 1e3; }
        if (e->ev_end >= 0) { CUDA_CHECK(cudaEventElapsedTime(&ms, t->anchor, t->pool[e->ev_end])); e->end = t->anchor_s + ms / 1e3; }
        if (e->ev_begin < 0 || e->ev_end < 0) e->kind = -1; // incomplete (pool used up): left out
    }
#endif
    ZeroTraceInfo info = {t->rank, t->world_size, t->first_step, t->last_step, grad_accum_steps, t->dropped, t->host,
                          ZERO_GPU_BUILD ? "gpu" : "cpu", (int)sizeof(ZeroFloat)};
    char err[sizeof(t->path) + 512] = "";
    int written = zero_trace_write_to(t->path, t->events, t->count, z->layout, ZERO_STAGE, &info, err, sizeof(err)) == 0;
    if (t->dropped > 0)
        fprintf(stderr, "warning: -tr: rank %d left %d events out of %s (event pool or memory used up)\n", t->rank, t->dropped, t->path);
    free(t->events);
    free(t->in_flight);
    t->events = NULL;
    t->count = t->capacity = 0;
#if ZERO_GPU_BUILD
    for (int k = 0; k < t->pool_capacity; k++) CUDA_CHECK(cudaEventDestroy(t->pool[k]));
    CUDA_CHECK(cudaEventDestroy(t->anchor));
    free(t->pool);
#endif
    zero_startup_agree(written, err, "writing the trace files");
}

#endif // ZERO_TRACE_WRITE_H
