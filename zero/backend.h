/*
 * zero/backend.h: the functions both engines implement, declared once. The CPU engine
 * (zero/engine_cpu.h, fp32) and the GPU engine (zero/gpu/engine_gpu.cuh, bf16 + fp32 master)
 * define each of them under the same name and role; the shared core parts above them
 * (zero/work_units.h, zero/checkpoint.h) call them through these declarations.
 *
 * Needs: zero/engine.h.
 */
#ifndef ZERO_BACKEND_H
#define ZERO_BACKEND_H
#ifndef ZERO_CUH
#error "include zero.cuh, not this file"
#endif

static void zero_grad_work_finish(ZeroEngine* z, ZeroWorkingUnit* w); // stages 2, 3: reduce-scatter finished, slice into the shard, w free
static ZeroWorkingUnit* zero_param_work_gather(ZeroEngine* z, int unit); // stage 3: gather into a free working unit; NULL: none free

#endif // ZERO_BACKEND_H
