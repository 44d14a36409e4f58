"""
vs_pytorch.py: this trainer's CPU build against PyTorch on the same training step (not a test).

Same model (GPT-2 dN: L, C, NH as common/gpt2_config.h; V 50257, maxT 1024, no dropout), same
B, T, random tokens, AdamW (lr 1e-4, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on 2-D weights
only), grad clip 1.0, fp32, the same number of threads. Peers: Hugging Face GPT2LMHeadModel in
PyTorch eager, and torch.compile of the same step where its first compile ends within
--compile-limit seconds. Each peer is a long-lived worker process (its memory its own); rounds
are interleaved: ours (build/bench_cpu, a fresh process each round), eager, compiled, then again.
Prints per config the median step time of each peer over all rounds, tokens/s, the ratio to
eager, the sgemm bound measured by bench_cpu in the same runs, and peak resident memory.

usage: python3 vs_pytorch.py [--configs d12:4:64,d6:8:256,d6:1:1024] [--rounds 3] [--steps 4]
       (run by dev/bench/vs_pytorch.sh, which installs torch and transformers into a venv)
"""
import argparse, json, os, resource, select, statistics, subprocess, sys, time

DEPTHS = {"d1": (1, 64, 1), "d2": (2, 128, 2), "d4": (4, 256, 4), "d6": (6, 384, 6), "d12": (12, 768, 12)}


def worker(mode, depth, B, T, threads):
    """Reads a step count per stdin line, trains that many steps, answers one JSON line."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    L, C, NH = DEPTHS[depth]
    cfg = GPT2Config(vocab_size=50257, n_positions=1024, n_embd=C, n_layer=L, n_head=NH,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
    model = GPT2LMHeadModel(cfg).train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8, fused=False, foreach=True)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 50257, (B, T + 1), generator=g)
    x, y = tokens[:, :T].contiguous(), tokens[:, 1:].contiguous()

    def fwd_bwd(x, y):
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        loss.backward()
        return loss

    step_fn = torch.compile(fwd_bwd) if mode == "compile" else fwd_bwd

    def step():
        opt.zero_grad(set_to_none=True)
        loss = step_fn(x, y)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    t0 = time.perf_counter()
    step()  # warm-up (and, compiled, the compile)
    warm = time.perf_counter() - t0
    print(json.dumps({"ready": True, "warmup_s": warm}), flush=True)
    for line in sys.stdin:
        n = int(line)
        ms = []
        for _ in range(n):
            t0 = time.perf_counter()
            step()
            ms.append(1000.0 * (time.perf_counter() - t0))
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        print(json.dumps({"ms": ms, "peak_mib": rss}), flush=True)


def read_json(proc, timeout):
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        return None
    line = proc.stdout.readline()
    return json.loads(line) if line else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="d12:4:64,d6:8:256,d6:1:1024")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4, help="timed steps per peer per round")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    ap.add_argument("--compile-limit", type=float, default=300.0, help="seconds the first torch.compile step may take")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--bench", default="build/bench_cpu")
    ap.add_argument("--worker", nargs=4, metavar=("MODE", "DEPTH", "B", "T"))
    a = ap.parse_args()
    if a.worker:
        mode, depth, B, T = a.worker
        return worker(mode, depth, int(B), int(T), a.threads)
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    rows = []
    for spec in a.configs.split(","):
        depth, B, T = spec.split(":")
        B, T = int(B), int(T)
        print(f"== {depth} B={B} T={T} | {a.threads} threads | {a.rounds} rounds x {a.steps} steps per peer", flush=True)
        peers = {}
        for mode in (["eager"] if a.no_compile else ["eager", "compile"]):
            p = subprocess.Popen([sys.executable, __file__, "--threads", str(a.threads), "--worker", mode, depth, str(B), str(T)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
            r = read_json(p, a.compile_limit if mode == "compile" else 600)
            if r is None:
                p.kill()
                print(f"   {mode}: first step did not finish within {a.compile_limit:.0f} s: skipped", flush=True)
                continue
            print(f"   {mode}: first step (warm-up{', compile' if mode == 'compile' else ''}) {r['warmup_s']:.1f} s", flush=True)
            peers[mode] = {"proc": p, "ms": [], "peak": 0.0}
        ours = {"ms": [], "bound": [], "peak": 0.0, "share": []}
        for rnd in range(a.rounds):
            load = open("/proc/loadavg").read().split()[:3]
            out = subprocess.run([a.bench, depth, str(B), str(T), str(a.steps + 1)], capture_output=True, text=True,
                                 env=env, check=True).stdout
            if rnd == 0:
                print("   " + next(l for l in out.splitlines() if l.startswith("blas:")), flush=True)
            j = json.loads(next(l for l in out.splitlines() if l.startswith("json: "))[6:])
            ours["ms"].append(j["median_ms"]); ours["bound"].append(j["bound_tokens_per_s"])
            ours["peak"] = max(ours["peak"], j["peak_mib"]); ours["share"].append(j["matmul_share"])
            line = f"   round {rnd + 1} (load {' '.join(load)}): ours {j['median_ms']:.0f} ms"
            for mode, peer in peers.items():
                peer["proc"].stdin.write(f"{a.steps}\n"); peer["proc"].stdin.flush()
                r = read_json(peer["proc"], 1800)
                peer["ms"] += r["ms"]; peer["peak"] = max(peer["peak"], r["peak_mib"])
                line += f" | {mode} {statistics.median(r['ms']):.0f} ms"
            print(line, flush=True)
        for peer in peers.values():
            peer["proc"].stdin.close(); peer["proc"].wait()
        tok = B * T
        ours_tps = tok * 1000.0 / statistics.median(ours["ms"])
        bound = statistics.median(ours["bound"])
        row = {"config": f"{depth} B={B} T={T}", "ours_ms": statistics.median(ours["ms"]), "ours_tps": ours_tps,
               "bound": bound, "ours_peak": ours["peak"]}
        for mode, peer in peers.items():
            row[mode + "_ms"] = statistics.median(peer["ms"]); row[mode + "_tps"] = tok * 1000.0 / row[mode + "_ms"]
            row[mode + "_peak"] = peer["peak"]
        rows.append(row)
    print()
    print(f"| config | this trainer tok/s (ms) | PyTorch eager tok/s (ms) | ratio | torch.compile tok/s | ratio | "
          f"sgemm bound tok/s | ours / bound | peak MiB ours / eager / compile |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        def peer(m):
            return (f"{r[m + '_tps']:.1f} ({r[m + '_ms']:.0f})", f"{r['ours_tps'] / r[m + '_tps']:.2f}x") if m + "_tps" in r else ("—", "—")
        e, c = peer("eager"), peer("compile")
        ctps = c[0].split(" ")[0]
        print(f"| {r['config']} | {r['ours_tps']:.1f} ({r['ours_ms']:.0f}) | {e[0]} | {e[1]} | {ctps} | {c[1]} | "
              f"{r['bound']:.1f} | {100 * r['ours_tps'] / r['bound']:.0f}% | {r['ours_peak']:.0f} / "
              f"{r.get('eager_peak', float('nan')):.0f} / {r.get('compile_peak', float('nan')):.0f} |")


if __name__ == "__main__":
    sys.exit(main())
