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

#endif // ZERO_BACKEND_H
