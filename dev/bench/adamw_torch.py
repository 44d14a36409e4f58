"""PyTorch's CPU AdamW on n parameters, for dev/bench/adamw_bench.sh: the `foreach` and `fused`
implementations (torch.optim.AdamW), the same hyperparameters and threads as build/adamw_bench,
parameters split into 24 tensors as a model's are. One JSON line per implementation: the best
of 10 timed steps after 2 warm-up steps; bytes counted as for ours (28 per parameter: p, g, m, v
read, p, m, v written), which is what a single pass moves.
Usage: python dev/bench/adamw_torch.py N THREADS"""
import json
import sys
import time

import torch

n, threads = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(threads)
sizes = [n // 24] * 23 + [n - 23 * (n // 24)]
for impl in ("foreach", "fused"):
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in sizes]
    for p in params:
        p.grad = 1e-3 * torch.randn(p.shape, generator=gen)
    kw = {"foreach": True} if impl == "foreach" else {"fused": True}
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, **kw)
    best = float("inf")
    for step in range(12):
        t0 = time.perf_counter()
        opt.step()
        t = time.perf_counter() - t0
        if step >= 2:
            best = min(best, t)
    print(json.dumps({"kernel": f"torch_adamw_{impl}", "torch": torch.__version__, "threads": threads, "n": n,
                      "seconds": best, "params_per_s": n / best, "bytes_per_s": 28.0 * n / best}), flush=True)
