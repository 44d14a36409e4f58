/*
 * attention_cudnn.cpp: attention through cuDNN's fused attention (SDPA, "scaled dot product
 * attention" in the cuDNN frontend's graph API); interface and shapes in attention_cudnn.h.
 * Host-only C++ (compiled by the host compiler, cuda.mk), linked into the USE_CUDNN=1 builds.
 * cuDNN reads q, k, v in place through strides (no transposes): head h of q at (b, t) is at
 * qkv + (b T + t) 3C + h HS, i.e. dims (B, NH, T, HS), strides (3 C T, HS, 3 C, 1).
 * Source: NVIDIA cuDNN frontend, "Scaled Dot Product Attention" (docs/operations/Attention.md of
 * the frontend, version 1.x) and the cuDNN graph API; headers from PyPI's nvidia-cudnn-frontend
 * (scripts/cudnn_frontend.sh), library libcudnn 9.
 * The backward asks for cuDNN's deterministic algorithm (the project's runs are bit-reproducible);
 * where this cuDNN has none for the shape, it says so once on stderr and takes the default.
 * Every graph-building step may fail (kernels/attention_cudnn_steps.h: validate ... workspace);
 * then one line on stderr and the shape runs the project's flash kernels (the functions return
 * 0 and kernels/attention.cuh calls those). Sampling (B = 1) and T < 64 never use cuDNN.
 * One graph per (B, T, NH, HS) and direction, built on first use and cached; one workspace
 * buffer, grown on demand (cudaMalloc, its size printed when it grows).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>

#include <cudnn_frontend.h>

#include "attention_cudnn.h"
#include "attention_cudnn_steps.h"

typedef __nv_bfloat16 bf16;

// (common/cuda_utils.cuh holds device code the host compiler cannot take; the check it is.)
#define CUDA_CHECK(call)                                                                            \
    do {                                                                                            \
        cudaError_t cuda_check_err_ = (call);                                                       \
        if (cuda_check_err_ != cudaSuccess) {                                                       \
            fprintf(stderr, "error: CUDA call %s failed at %s:%d: %s\n", #call, __FILE__, __LINE__, \
                    cudaGetErrorString(cuda_check_err_));                                           \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

namespace cudnn_fe = cudnn_frontend;

#define CUDNN_CHECK(call)                                                                            \
    do {                                                                                             \
        cudnnStatus_t cudnn_check_status_ = (call);                                                  \
        if (cudnn_check_status_ != CUDNN_STATUS_SUCCESS) {                                           \
            fprintf(stderr, "error: cuDNN call %s failed at %s:%d: %s\n", #call, __FILE__, __LINE__, \
                    cudnnGetErrorString(cudnn_check_status_));                                       \
            exit(1);                                                                                 \
        }                                                                                            \
    } while (0)

#define CUDNN_FE_CHECK(call)                                                                                   \
    do {                                                                                                       \
        cudnn_fe::error_t cudnn_fe_check_err_ = (call);                                                        \
        if (cudnn_fe_check_err_.is_bad()) {                                                                    \
            fprintf(stderr, "error: cuDNN frontend call %s failed at %s:%d: %s\n", #call, __FILE__, __LINE__, \
                    cudnn_fe_check_err_.get_message().c_str());                                                \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)

// Tensor ids in the graphs' variant packs.
enum { ATTENTION_UID_Q = 1, ATTENTION_UID_K, ATTENTION_UID_V, ATTENTION_UID_O, ATTENTION_UID_STATS,
       ATTENTION_UID_DO, ATTENTION_UID_DQ, ATTENTION_UID_DK, ATTENTION_UID_DV };

typedef std::tuple<int, int, int, int> AttentionCudnnShape; // B, T, NH, HS
typedef std::shared_ptr<cudnn_fe::graph::Graph> AttentionCudnnGraph;

static cudnnHandle_t attention_cudnn_handle(void) {
    static cudnnHandle_t handle = NULL;
    if (handle == NULL) CUDNN_CHECK(cudnnCreate(&handle));
    return handle;
}

// A device workspace of at least `bytes` (one buffer for every graph; calls are stream-ordered).
// NULL when it cannot grow to that (the graph-building step "workspace" then fails: fallback).
static void* attention_cudnn_workspace(int64_t bytes) {
    static void* workspace = NULL;
    static int64_t capacity = 0;
    if (bytes > capacity) {
        void* grown = NULL;
        if (cudaMalloc(&grown, (size_t)bytes) != cudaSuccess) {
            cudaGetLastError(); // clear the failed allocation's error
            return NULL;
        }
        if (workspace != NULL) CUDA_CHECK(cudaFree(workspace));
        workspace = grown;
        capacity = bytes;
        fprintf(stderr, "attention (cuDNN): workspace %.1f MiB\n", (double)bytes / (1 << 20));
    }
    return bytes > 0 ? workspace : NULL;
}

static std::shared_ptr<cudnn_fe::graph::Tensor_attributes> attention_cudnn_tensor(AttentionCudnnGraph& graph,
                                                                                   const char* name, int uid,
                                                                                   std::vector<int64_t> dims,
                                                                                   std::vector<int64_t> strides) {
    return graph->tensor(cudnn_fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(strides));
}

// One graph-building step (kernels/attention_cudnn_steps.h's order) on the graph in ctx.
static int attention_cudnn_step(void* ctx, int step, char* why, size_t cap) {
    cudnn_fe::graph::Graph* graph = (cudnn_fe::graph::Graph*)ctx;
    cudnnHandle_t handle = attention_cudnn_handle();
    cudnn_fe::error_t e;
    switch (step) {
    case ATTENTION_CUDNN_VALIDATE: e = graph->validate(); break;
    case ATTENTION_CUDNN_BUILD_OPERATION_GRAPH: e = graph->build_operation_graph(handle); break;
    case ATTENTION_CUDNN_CREATE_EXECUTION_PLANS: e = graph->create_execution_plans({cudnn_fe::HeurMode_t::A}); break;
    case ATTENTION_CUDNN_CHECK_SUPPORT: e = graph->check_support(handle); break;
    case ATTENTION_CUDNN_BUILD_PLANS: e = graph->build_plans(handle); break;
    case ATTENTION_CUDNN_WORKSPACE: {
        int64_t bytes = 0;
        e = graph->get_workspace_size(bytes);
        if (e.is_good() && bytes > 0 && attention_cudnn_workspace(bytes) == NULL) {
            snprintf(why, cap, "cudaMalloc of a %.1f MiB workspace failed", (double)bytes / (1 << 20));
            return 1;
        }
        break;
    }
    default: snprintf(why, cap, "unknown step %d", step); return 1;
    }
    if (e.is_good()) return 0;
    snprintf(why, cap, "%s", e.get_message().c_str());
    return 1;
}

// Builds the graph's plans and its workspace; false (with the failing step and cuDNN's reason
// in *step, why) if any step fails.
static bool attention_cudnn_build(AttentionCudnnGraph& graph, int* step, char* why, size_t cap) {
    *step = attention_cudnn_run_steps(attention_cudnn_step, graph.get(), why, cap);
    return *step < 0;
}

static AttentionCudnnGraph attention_cudnn_forward_graph(int B, int T, int NH, int HS) {
    static std::map<AttentionCudnnShape, AttentionCudnnGraph> cache;
    AttentionCudnnShape key(B, T, NH, HS);
    auto found = cache.find(key);
    if (found != cache.end()) return found->second;

    const int64_t C = (int64_t)NH * HS;
    std::vector<int64_t> dims = {B, NH, T, HS}, qkv_strides = {3 * C * T, HS, 3 * C, 1}, out_strides = {C * T, HS, C, 1};
    auto graph = std::make_shared<cudnn_fe::graph::Graph>();
    graph->set_io_data_type(cudnn_fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(cudnn_fe::DataType_t::FLOAT)
        .set_compute_data_type(cudnn_fe::DataType_t::FLOAT);
    auto q = attention_cudnn_tensor(graph, "Q", ATTENTION_UID_Q, dims, qkv_strides);
    auto k = attention_cudnn_tensor(graph, "K", ATTENTION_UID_K, dims, qkv_strides);
    auto v = attention_cudnn_tensor(graph, "V", ATTENTION_UID_V, dims, qkv_strides);
    auto options = cudnn_fe::graph::SDPA_attributes()
                       .set_name("attention_forward")
                       .set_generate_stats(true) // training: keep the logsumexp for the backward
                       .set_causal_mask(true)
                       .set_attn_scale(1.0f / sqrtf((float)HS));
    auto outputs = graph->sdpa(q, k, v, options);
    outputs[0]->set_output(true).set_uid(ATTENTION_UID_O).set_dim(dims).set_stride(out_strides);
    outputs[1]->set_output(true).set_uid(ATTENTION_UID_STATS).set_data_type(cudnn_fe::DataType_t::FLOAT)
        .set_dim({B, NH, T, 1}).set_stride({(int64_t)NH * T, T, 1, 1});
    int step;
    char why[512], what[96];
    if (!attention_cudnn_build(graph, &step, why, sizeof(why))) {
        snprintf(what, sizeof(what), "forward B %d T %d NH %d HS %d", B, T, NH, HS);
        attention_cudnn_report_fallback(stderr, what, step, why);
        graph = nullptr; // this shape runs the project's kernels from now on
    }
    cache[key] = graph;
    return graph;
}

static AttentionCudnnGraph attention_cudnn_backward_graph(int B, int T, int NH, int HS) {
    static std::map<AttentionCudnnShape, AttentionCudnnGraph> cache;
    AttentionCudnnShape key(B, T, NH, HS);
    auto found = cache.find(key);
    if (found != cache.end()) return found->second;

    const int64_t C = (int64_t)NH * HS;
    std::vector<int64_t> dims = {B, NH, T, HS}, qkv_strides = {3 * C * T, HS, 3 * C, 1}, out_strides = {C * T, HS, C, 1};
    AttentionCudnnGraph graph;
    for (int deterministic = 1; deterministic >= 0; deterministic--) {
        graph = std::make_shared<cudnn_fe::graph::Graph>();
        graph->set_io_data_type(cudnn_fe::DataType_t::BFLOAT16)
            .set_intermediate_data_type(cudnn_fe::DataType_t::FLOAT)
            .set_compute_data_type(cudnn_fe::DataType_t::FLOAT);
        auto q = attention_cudnn_tensor(graph, "Q", ATTENTION_UID_Q, dims, qkv_strides);
        auto k = attention_cudnn_tensor(graph, "K", ATTENTION_UID_K, dims, qkv_strides);
        auto v = attention_cudnn_tensor(graph, "V", ATTENTION_UID_V, dims, qkv_strides);
        auto o = attention_cudnn_tensor(graph, "O", ATTENTION_UID_O, dims, out_strides);
        auto d_o = attention_cudnn_tensor(graph, "dO", ATTENTION_UID_DO, dims, out_strides);
        auto stats = attention_cudnn_tensor(graph, "Stats", ATTENTION_UID_STATS, {B, NH, T, 1}, {(int64_t)NH * T, T, 1, 1});
        stats->set_data_type(cudnn_fe::DataType_t::FLOAT);
        auto options = cudnn_fe::graph::SDPA_backward_attributes()
                           .set_name("attention_backward")
                           .set_causal_mask(true)
                           .set_attn_scale(1.0f / sqrtf((float)HS))
                           .set_deterministic_algorithm(deterministic == 1);
        auto grads = graph->sdpa_backward(q, k, v, o, d_o, stats, options);
        grads[0]->set_output(true).set_uid(ATTENTION_UID_DQ).set_dim(dims).set_stride(qkv_strides);
        grads[1]->set_output(true).set_uid(ATTENTION_UID_DK).set_dim(dims).set_stride(qkv_strides);
        grads[2]->set_output(true).set_uid(ATTENTION_UID_DV).set_dim(dims).set_stride(qkv_strides);
        int step;
        char why[512], what[96];
        if (attention_cudnn_build(graph, &step, why, sizeof(why))) break;
        if (deterministic == 1) {
            fprintf(stderr, "attention (cuDNN): no deterministic backward for B %d T %d NH %d HS %d (%s failed: %s); "
                    "trying the default (not bit-reproducible)\n", B, T, NH, HS, attention_cudnn_step_names[step], why);
        } else {
            snprintf(what, sizeof(what), "backward B %d T %d NH %d HS %d", B, T, NH, HS);
            attention_cudnn_report_fallback(stderr, what, step, why);
            graph = nullptr;
        }
    }
    cache[key] = graph;
    return graph;
}

static void attention_cudnn_execute(const AttentionCudnnGraph& graph, std::unordered_map<int64_t, void*>& pack,
                                    cudaStream_t stream) {
    cudnnHandle_t handle = attention_cudnn_handle();
    CUDNN_CHECK(cudnnSetStream(handle, stream));
    int64_t bytes = 0;
    CUDNN_FE_CHECK(graph->get_workspace_size(bytes));
    CUDNN_FE_CHECK(graph->execute(handle, pack, attention_cudnn_workspace(bytes)));
}

int attention_forward_cudnn(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH, cudaStream_t stream) {
    if (!attention_cudnn_shape_wanted(B, T)) return 0;
    AttentionCudnnGraph graph = attention_cudnn_forward_graph(B, T, NH, C / NH);
    if (graph == nullptr) return 0;
    bf16* q = (bf16*)qkv; // cuDNN's variant pack takes void*; it only reads q, k, v
    std::unordered_map<int64_t, void*> pack = {{ATTENTION_UID_Q, q}, {ATTENTION_UID_K, q + C}, {ATTENTION_UID_V, q + 2 * C},
                                               {ATTENTION_UID_O, out}, {ATTENTION_UID_STATS, lse}};
    attention_cudnn_execute(graph, pack, stream);
    return 1;
}

int attention_backward_cudnn(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse, int B,
                             int T, int C, int NH, cudaStream_t stream) {
    if (!attention_cudnn_shape_wanted(B, T)) return 0;
    AttentionCudnnGraph graph = attention_cudnn_backward_graph(B, T, NH, C / NH);
    if (graph == nullptr) return 0;
    bf16* q = (bf16*)qkv;
    std::unordered_map<int64_t, void*> pack = {
        {ATTENTION_UID_Q, q}, {ATTENTION_UID_K, q + C}, {ATTENTION_UID_V, q + 2 * C}, {ATTENTION_UID_O, (void*)out},
        {ATTENTION_UID_DO, (void*)dout}, {ATTENTION_UID_STATS, (void*)lse}, {ATTENTION_UID_DQ, dqkv},
        {ATTENTION_UID_DK, dqkv + C}, {ATTENTION_UID_DV, dqkv + 2 * C}};
    attention_cudnn_execute(graph, pack, stream);
    return 1;
}
