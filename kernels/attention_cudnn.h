/*
 * attention_cudnn.h: causal multi-head self-attention through cuDNN's fused attention (SDPA), the
 * build-time alternative (USE_CUDNN=1) to the own flash kernels of kernels/attention.cuh, with
 * the same shapes and outputs: qkv (B,T,3C) bf16 in, out (B,T,C) bf16, lse (B,NH,T) fp32 (the
 * natural-log logsumexp of each row's scaled scores, cuDNN's softmax "Stats"), and the backward
 * writes (does not accumulate) dqkv (B,T,3C) bf16 from dout (B,T,C). Head sizes: as cuDNN allows
 * (a multiple of 8 up to 128; the trainer checks 16 or 64 first). A graph that cannot be built
 * falls back (see below); an error executing a built graph is one line naming the call, exit 1.
 * Implemented in kernels/attention_cudnn.cpp, a host-only C++ translation unit compiled once by
 * the host compiler and linked into the USE_CUDNN=1 binaries: the cuDNN frontend's headers are
 * heavy to compile (minutes), so no .cu file includes them.
 */
#ifndef KERNELS_ATTENTION_CUDNN_H
#define KERNELS_ATTENTION_CUDNN_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>

// Return 1 when cuDNN ran the call, 0 when the caller must run the project's kernels instead:
// the shape is not one cuDNN is used for (B = 1 or T < 64: kernels/attention_cudnn_steps.h) or
// building its graph failed (one line on stderr, once per shape and direction).
int attention_forward_cudnn(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T, int C, int NH,
                            cudaStream_t stream);
int attention_backward_cudnn(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                             const __nv_bfloat16* out, const float* lse, int B, int T, int C, int NH,
                             cudaStream_t stream);

#endif // KERNELS_ATTENTION_CUDNN_H
