#!/usr/bin/env python3
"""op_table.py: the theoretical per-kernel table of one GPU training step of GPT-2: FLOPs and the
fewest device-memory bytes of each op family, and the time each would take at the H200's peaks
(989 TFLOP/s dense bf16, 4.8 TB/s HBM3e; NVIDIA's datasheet). The measured table of
`train_gpt2cu -ot K` (common/op_timer.cuh) reads its times against the same numbers; those come
from common/op_costs.h, and this script computes them on its own, op by op as the CUDA build runs
them (model/gpt2_gpu.cuh's forward and backward), so `--check-log` can compare the two (tests/t_65).

Counting rules: common/op_costs.h's header (each operand read once, each result written once;
bf16 2 bytes, fp32 4; tensor-core FLOPs only: GEMMs and the attention products, causal halved,
the attention backward with its recompute of S: 5 products against the forward's 2).

Usage:
  python3 dev/op_table.py --depth d12 --B 64 --T 1024 [--A 1]     the table (markdown)
  python3 dev/op_table.py --L 2 --C 64 --NH 4 --Vp 1024 --maxT 64 --B 8 --T 32 --check-log OUT
      compare with the table a train_gpt2cu -ot run printed into OUT (relative 1e-3: the log
      prints 4 significant digits); exit 0 when every row agrees
"""
import argparse
import re
import sys

PEAK_FLOPS, PEAK_BYTES = 989e12, 4.8e12
BF16, FP32, INT32 = 2, 4, 4
DEPTHS = {"d1": (1, 64, 1), "d2": (2, 128, 2), "d3": (3, 192, 3), "d4": (4, 256, 4), "d6": (6, 384, 6),
          "d12": (12, 768, 12), "d24": (24, 1024, 16), "d36": (36, 1280, 20), "d48": (48, 1600, 25)}
FAMILIES = ["encoder fwd+bwd", "layernorm fwd (+residual)", "layernorm bwd", "matmul fwd (layers, +GELU)",
            "matmul bwd (layers, +dGELU, dbias)", "attention fwd", "attention bwd", "lm head fwd (matmul)",
            "lm head bwd (matmul)", "classifier (softmax, loss, dlogits)", "optimizer (norm, clip, AdamW)",
            "engine (grad zeroing, waits on comm)", "other (inputs, GNS norm)"]


def padded_psi(L, C, Vp, maxT, ranks=1, align=64):
    units = [Vp * C + maxT * C] + [12 * C * C + 13 * C] * L + [2 * C]
    q = ranks * align
    return sum((u + q - 1) // q * q for u in units)


def step_costs(L, C, NH, Vp, maxT, B, T, A):
    """{family: [flops, bytes]} for one optimizer step of A micro-steps, op by op."""
    N = B * T
    cost = {f: [0.0, 0.0] for f in FAMILIES}

    def add(family, flops, nbytes):
        cost[family][0] += flops
        cost[family][1] += nbytes

    def gemm(family, M, K, OUT, aux_out=False):  # out = inp (M,K) @ W^T (OUT,K)
        add(family, 2 * M * K * OUT, BF16 * (M * K + OUT * K + M * OUT + (M * OUT if aux_out else 0)))

    def gemm_dinp(family, M, K, OUT, aux_in=False):  # dinp (M,K) = dout (M,OUT) @ W (OUT,K)
        add(family, 2 * M * K * OUT, BF16 * (M * OUT + OUT * K + M * K + (M * K if aux_in else 0)))

    def gemm_dweight(family, M, K, OUT):  # dW (OUT,K) += dout^T @ inp, read and written
        add(family, 2 * M * K * OUT, BF16 * (M * OUT + M * K + 2 * OUT * K))

    def layernorm_forward(fused):  # x in, out written, mean/rstd; fused: the branch read, the stream written
        add("layernorm fwd (+residual)", 0, BF16 * (2 * N * C + (2 * N * C if fused else 0)) + FP32 * 2 * N)

    def layernorm_backward():  # x, dout, dinp in; dinp out; mean/rstd in
        add("layernorm bwd", 0, BF16 * 4 * N * C + FP32 * 2 * N)

    lse = FP32 * B * NH * T
    for _ in range(A):
        # forward
        add("encoder fwd+bwd", 0, INT32 * N + BF16 * (N * C + T * C + N * C))
        for layer in range(L):
            layernorm_forward(fused=layer > 0)
            gemm("matmul fwd (layers, +GELU)", N, C, 3 * C)
            add("attention fwd", 2 * B * T * T * C, BF16 * (3 * N * C + N * C) + lse)
            gemm("matmul fwd (layers, +GELU)", N, C, C)
            layernorm_forward(fused=True)
            gemm("matmul fwd (layers, +GELU)", N, C, 4 * C, aux_out=True)
            gemm("matmul fwd (layers, +GELU)", N, 4 * C, C)
        layernorm_forward(fused=True)  # lnf, with the last layer's residual add
        gemm("lm head fwd (matmul)", N, C, Vp)
        add("classifier (softmax, loss, dlogits)", 0, BF16 * 2 * N * Vp + INT32 * N + FP32 * N)
        # backward
        gemm_dinp("lm head bwd (matmul)", N, C, Vp)
        gemm_dweight("lm head bwd (matmul)", N, C, Vp)
        layernorm_backward()
        for layer in range(L):
            gemm_dweight("matmul bwd (layers, +dGELU, dbias)", N, 4 * C, C)         # fcproj
            gemm_dinp("matmul bwd (layers, +dGELU, dbias)", N, 4 * C, C, aux_in=True)
            gemm_dinp("matmul bwd (layers, +dGELU, dbias)", N, C, 4 * C)            # fc
            gemm_dweight("matmul bwd (layers, +dGELU, dbias)", N, C, 4 * C)
            layernorm_backward()
            gemm_dinp("matmul bwd (layers, +dGELU, dbias)", N, C, C)                # attproj
            gemm_dweight("matmul bwd (layers, +dGELU, dbias)", N, C, C)
            add("attention bwd", 5 * B * T * T * C, BF16 * (3 * N * C + N * C + N * C + 3 * N * C) + lse)
            gemm_dinp("matmul bwd (layers, +dGELU, dbias)", N, C, 3 * C)            # qkv
            gemm_dweight("matmul bwd (layers, +dGELU, dbias)", N, C, 3 * C)
            layernorm_backward()
        add("encoder fwd+bwd", 0, BF16 * (N * C + 2 * T * C + 2 * N * C))
        add("engine (grad zeroing, waits on comm)", 0, BF16 * padded_psi(L, C, Vp, maxT))
    add("optimizer (norm, clip, AdamW)", 0, (FP32 + 30) * padded_psi(L, C, Vp, maxT))
    return cost


def peak_seconds(flops, nbytes):
    return max(flops / PEAK_FLOPS, nbytes / PEAK_BYTES)


def print_table(args, cost):
    L, C, NH, Vp, maxT, B, T, A = args.L, args.C, args.NH, args.Vp, args.maxT, args.B, args.T, args.A
    psi = padded_psi(L, C, Vp, maxT)
    total = sum(peak_seconds(*cost[f]) for f in FAMILIES)
    print(f"GPT-2 L={L} C={C} NH={NH} Vp={Vp}, B={B} T={T}, A={A} micro-steps ({A * B * T} tokens), Ψ={psi}; "
          f"H200 peaks {PEAK_FLOPS / 1e12:.0f} TFLOP/s bf16 dense, {PEAK_BYTES / 1e12:.1f} TB/s")
    print()
    print("| op family | GFLOP / step | GB / step | FLOP/byte | ms at peak | bound | share of the peak-time sum |")
    print("|---|---|---|---|---|---|---|")
    for f in FAMILIES:
        flops, nbytes = cost[f]
        if flops == 0 and nbytes == 0:
            continue
        s = peak_seconds(flops, nbytes)
        bound = "compute" if flops / PEAK_FLOPS >= nbytes / PEAK_BYTES else "memory"
        intensity = f"{flops / nbytes:.0f}" if nbytes and flops else "-"
        print(f"| {f} | {flops / 1e9:.1f} | {nbytes / 1e9:.3f} | {intensity} | {1e3 * s:.3f} | {bound} | {100 * s / total:.1f}% |")
    print("| gelu | fused into matmul fwd/bwd (GELU_AUX_BIAS, DGELU_BGRAD epilogues) | | | | | |")
    print("| residual | fused into layernorm fwd | | | | | |")
    print("| communication | one GPU: none | | | | | |")
    flops = sum(cost[f][0] for f in FAMILIES)
    nbytes = sum(cost[f][1] for f in FAMILIES)
    model_flops = (6 * llmc_parameters(L, C, Vp, maxT) + 6 * L * C * T) * A * B * T
    print(f"| total | {flops / 1e9:.1f} | {nbytes / 1e9:.3f} | | {1e3 * total:.3f} | | 100% |")
    print()
    print(f"llm.c's model FLOPs (6N + 6LCT per token) per step: {model_flops / 1e9:.1f} GFLOP; at the sum of peak times "
          f"the step would run at MFU {100 * model_flops / (total * PEAK_FLOPS):.1f}% "
          f"({A * B * T / total:,.0f} tokens/s); GEMM FLOPs here = 6 x GEMM weights x tokens: "
          f"{gemm_check(cost, L, C, Vp, A * B * T)}")


def llmc_parameters(L, C, Vp, maxT):
    return Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C


def gemm_check(cost, L, C, Vp, tokens):
    gemm = sum(cost[f][0] for f in FAMILIES if "matmul" in f)
    want = 6 * (L * 12 * C * C + Vp * C) * tokens
    return "yes" if abs(gemm - want) <= 1e-9 * want else f"NO ({gemm} vs {want})"


def check_log(path, cost):
    """Rows of the trainer's table: name, ms, share, GFLOP, GB, ... (common/op_timer.cuh)."""
    rows = {}
    for line in open(path):
        for f in FAMILIES:
            if line.startswith(f) and len(line) > len(f) and line[len(f)] == " ":
                fields = line[len(f):].split()
                rows[f] = (float(fields[2]) * 1e9, float(fields[3]) * 1e9)
    bad = []
    for f in FAMILIES:
        if f not in rows:
            bad.append(f"{f}: missing")
            continue
        for k, what in ((0, "GFLOP"), (1, "GB")):
            want, got = cost[f][k], rows[f][k]
            if abs(got - want) > 1e-3 * max(abs(want), 1e-30) and not (want == 0 and got == 0):
                bad.append(f"{f} {what}: log {got:.6g}, here {want:.6g}")
    print(f"{len(rows)} rows compared (relative 1e-3): " + ("all agree" if not bad else "; ".join(bad)))
    return 0 if not bad else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--depth", choices=sorted(DEPTHS))
    ap.add_argument("--L", type=int)
    ap.add_argument("--C", type=int)
    ap.add_argument("--NH", type=int)
    ap.add_argument("--Vp", type=int, default=50304)
    ap.add_argument("--maxT", type=int, default=1024)
    ap.add_argument("--B", type=int, required=True)
    ap.add_argument("--T", type=int, required=True)
    ap.add_argument("--A", type=int, default=1, help="micro-steps per optimizer step")
    ap.add_argument("--check-log", help="a train_gpt2cu -ot output to compare with")
    args = ap.parse_args()
    if args.depth:
        args.L, args.C, args.NH = DEPTHS[args.depth]
    if None in (args.L, args.C, args.NH):
        ap.error("--depth, or --L --C --NH")
    cost = step_costs(args.L, args.C, args.NH, args.Vp, args.maxT, args.B, args.T, args.A)
    if args.check_log:
        return check_log(args.check_log, cost)
    print_table(args, cost)
    return 0


if __name__ == "__main__":
    sys.exit(main())
