#!/usr/bin/env bash
# The gradient noise scale meter inside the CPU trainer (train_gpt2.c "Gradient noise scale",
# zero.cuh zero_grads_unit_ready / zero_optimizer_step; McCandlish et al. 2018, Appendix A), in
# real runs: d2, T = 8, B = 4 (32 tokens per micro-batch), synthetic Markov-chain data
# (tests/zero_common.sh), 25 steps.
#
# What is checked, and against what:
#  - 2 ranks, stage 0: E|G_small|^2 - E|G_big|^2 = tr(Σ)(1/B_small - 1/B_big) > 0, so the logged
#    |G_small|^2 must exceed |G_big|^2 on average over the run; B_simple is finite and > 0.
#  - The log recomputes: |G_big|^2 equals the logged grad_norm^2 (the pre-clipping global norm),
#    B_small = B*T and B_big = -d tokens in the config record, and gns_g2, gns_trace, b_simple
#    recomputed here in Python (Appendix A estimates, bias-corrected EMA with the logged beta)
#    from the logged per-step norms (9 digits) match the trainer's. Tolerance 2e-5 relative: the
#    trainer prints the smoothed values with 6 significant digits (5e-6 relative); 4x margin.
#    Measured at most 4.4e-6 (|G_big|^2 vs grad_norm^2: 9e-7, tolerance 1e-5).
#  - With 2 ranks, |G_small|^2 is the mean over ranks of each rank's own gradient norm^2 before
#    the all-reduce: at step 1 it equals (n0^2 + n1^2)/2, where n_r is the step-1 grad norm of a
#    one-rank run whose first batch is rank r's slice (rank 1 reads tokens from B*T on: the same
#    shard without its first B*T tokens). Tolerance 1e-5 relative (6-decimal grad norms).
#  - |G_small|^2 is the first micro-batch's mean gradient: one rank accumulating 4 micro-steps
#    (-d 4*B*T) logs at step 1 exactly the squared grad norm that a plain run (-d B*T, same init,
#    same first micro-batch) logs at step 1. This pins the A^2 rescale of the 1/(B*T*A)-scaled
#    micro-step gradient. Tolerance 1e-5 relative (grad_norm printed with 6 decimals, ~5.7);
#    measured 2e-8.
#  - Every stage gives the same per-step values as stage 0 (2 ranks, 2 micro-steps each, so that
#    stages 0/1 measure inside accumulation and 2/3 before a per-micro-step reduce-scatter).
#    Measured on this machine (Open MPI 4.1): stage 1 bit-identical; stages 2, 3 differ by at most
#    1e-7 relative in |G_small|^2 and |G_big|^2 (summation order only: they add each micro-step's
#    reduced slice into the shard) and 4e-6 in B_simple, its 6-digit print resolution. Tolerance
#    1e-4 relative: 25x that, room for other MPI builds' reduction orders, and still far below
#    any real error (a wrong A^2 or B_small moves these values by factors).
#  - The meter does not touch training: with it off (-gb -1) the losses are bit-identical.
#  - With one rank and no accumulation there is no small batch: "gns n/a", null in the log.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/zero_common.sh"
zero_setup

cat > "$ZT/gnscheck.py" <<'EOF'
import json, math, sys

def load(run):
    config, train = {}, {}
    for line in open(f"{run}/log.jsonl"):
        r = json.loads(line)
        if r["kind"] == "config": config = r
        elif r["kind"] == "train": train[r["step"]] = r
    return config, [train[s] for s in sorted(train)]

def rel(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-30)

def fail(msg):
    print(msg); sys.exit(1)

cmd, args = sys.argv[1], sys.argv[2:]
if cmd == "small_exceeds_big":
    _, recs = load(args[0])
    small = [r["gns_small_sq"] for r in recs]; big = [r["gns_big_sq"] for r in recs]
    if None in small or None in big: fail("null norms in the log")
    ms, mb = sum(small) / len(small), sum(big) / len(big)
    above = sum(s > b for s, b in zip(small, big))
    print(f"mean |G_small|^2 {ms:.5g} vs mean |G_big|^2 {mb:.5g}; small > big at {above}/{len(recs)} steps")
    sys.exit(0 if ms > mb else 1)
if cmd == "finite":  # RUN FROM_STEP: raw norms finite every step, b_simple finite > 0 from FROM_STEP
    _, recs = load(args[0])
    bad = [r["step"] for r in recs if not (isinstance(r["gns_small_sq"], (int, float)) and isinstance(r["gns_big_sq"], (int, float)))]
    late = [r for r in recs if r["step"] >= int(args[1])]
    bad_b = [r["step"] for r in late if not (isinstance(r["b_simple"], (int, float)) and r["b_simple"] > 0)]
    print(f"{len(recs)} steps; non-finite norms at {bad[:5]}; b_simple not finite/positive at {bad_b[:5]}; "
          f"last b_simple {recs[-1]['b_simple']}")
    sys.exit(0 if recs and not bad and not bad_b else 1)
if cmd == "recompute":  # RUN B T: the trainer's meter, recomputed from the log
    config, recs = load(args[0])
    B, T = int(args[1]), int(args[2])
    b_small, b_big, beta = config["gns_b_small"], config["gns_b_big"], config["gns_beta"]
    if b_small != B * T or b_big != config["batch_tokens"]:
        fail(f"config B_small {b_small} B_big {b_big}; expected {B * T} and batch_tokens {config['batch_tokens']}")
    worst_norm = max(rel(r["gns_big_sq"], r["grad_norm"] ** 2) for r in recs)
    if worst_norm > 1e-5: fail(f"|G_big|^2 differs from grad_norm^2 by {worst_norm:.2g} relative")
    ema_g2 = ema_tr = 0.0; beta_pow = 1.0; worst = 0.0
    for r in recs:
        gs, gb = r["gns_small_sq"], r["gns_big_sq"]
        g2 = (b_big * gb - b_small * gs) / (b_big - b_small)
        tr = (gs - gb) / (1 / b_small - 1 / b_big)
        beta_pow *= beta
        ema_g2 = beta * ema_g2 + (1 - beta) * g2; ema_tr = beta * ema_tr + (1 - beta) * tr
        g2_s, tr_s = ema_g2 / (1 - beta_pow), ema_tr / (1 - beta_pow)
        want_b = tr_s / g2_s if g2_s > 0 and tr_s > 0 else None
        if (want_b is None) != (r["b_simple"] is None): fail(f"step {r['step']}: b_simple {r['b_simple']}, recomputed {want_b}")
        worst = max(worst, rel(g2_s, r["gns_g2"]), rel(tr_s, r["gns_trace"]), rel(want_b, r["b_simple"]) if want_b else 0.0)
    print(f"B_small {b_small} B_big {b_big} beta {beta}; |G_big|^2 vs grad_norm^2 {worst_norm:.2g}; "
          f"smoothed |G|^2, tr, b_simple vs recomputed: max relative difference {worst:.2g} (tolerance 2e-5)")
    sys.exit(0 if worst <= 2e-5 else 1)
if cmd == "first_micro":  # ACCUM_RUN PLAIN_RUN
    _, acc = load(args[0]); _, plain = load(args[1])
    gs, gn = acc[0]["gns_small_sq"], plain[0]["grad_norm"] ** 2
    print(f"step 1: accumulating run's |G_small|^2 {gs:.9g} vs plain run's grad_norm^2 {gn:.9g}: {rel(gs, gn):.2g} relative")
    sys.exit(0 if rel(gs, gn) <= 1e-5 else 1)
if cmd == "mean_of_ranks":  # NP2_RUN RANK0_RUN RANK1_RUN
    _, np2 = load(args[0]); _, r0 = load(args[1]); _, r1 = load(args[2])
    gs, want = np2[0]["gns_small_sq"], (r0[0]["grad_norm"] ** 2 + r1[0]["grad_norm"] ** 2) / 2
    print(f"step 1: 2-rank |G_small|^2 {gs:.9g} vs (n0^2 + n1^2)/2 = {want:.9g} of one-rank runs on each rank's slice: {rel(gs, want):.2g} relative")
    sys.exit(0 if rel(gs, want) <= 1e-5 else 1)
if cmd == "match":  # REF RUN TOL
    _, a = load(args[0]); _, b = load(args[1]); tol = float(args[2])
    if [r["step"] for r in a] != [r["step"] for r in b]: fail("different steps")
    worst = {k: 0.0 for k in ("gns_small_sq", "gns_big_sq", "b_simple")}
    for x, y in zip(a, b):
        for k in worst:
            if (x[k] is None) != (y[k] is None): fail(f"step {x['step']}: {k} {x[k]} vs {y[k]}")
            if x[k] is not None: worst[k] = max(worst[k], rel(x[k], y[k]))
    print(f"{len(a)} steps, max relative difference: " + ", ".join(f"{k} {v:.2g}" for k, v in worst.items()) + f" (tolerance {tol:g})")
    sys.exit(0 if max(worst.values()) <= tol else 1)
if cmd == "off":
    config, recs = load(args[0])
    keys = ("gns_small_sq", "gns_big_sq", "gns_g2", "gns_trace", "b_simple")
    on = [r["step"] for r in recs if any(r[k] is not None for k in keys)]
    print(f"config gns_b_small {config.get('gns_b_small')}; steps with a non-null gns field: {on[:5]}")
    sys.exit(0 if not on and config.get("gns_b_small", 0) is None else 1)
fail(f"unknown check {cmd}")
EOF
gcheck() { python3 "$ZT/gnscheck.py" "$@"; }
GNS_ARGS=(-x 25 -v 0)

ran() { # NAME N STAGE DIR ARGS...: run, or print a FAIL line and return 1
    local name=$1; shift
    zrun "$@" && return 0
    echo "FAIL ${name}_runs: $(grep -v tokenizer "$3.out" | tail -2 | tr '\n' ' ')"; return 1
}

if ran gns_np2_stage0 2 0 "$ZT/np2" "${GNS_ARGS[@]}"; then
    check gns_np2_small_batch_norm_exceeds_big_batch_norm_on_average gcheck small_exceeds_big "$ZT/np2"
    check gns_np2_b_simple_finite_and_positive gcheck finite "$ZT/np2" 5
    check gns_np2_log_recomputes_from_appendix_a gcheck recompute "$ZT/np2" 4 8
    check gns_np2_step_line_shows_b_simple grep -qE '^step +25/25 .*\| gns [0-9]+ \|' "$ZT/np2.out"
    # Rank 1's slice of the first global batch, as a one-rank run's first batch: drop B*T = 32 tokens.
    python3 - "$ZT" <<'PY'
import sys, numpy as np
d = sys.argv[1]; raw = np.fromfile(f"{d}/train.bin", dtype="<u2")
header = raw[:512].view("<i4").copy(); toks = raw[512 + 32:]; header[2] = len(toks)
with open(f"{d}/train_from_rank1.bin", "wb") as f: f.write(header.tobytes()); f.write(toks.tobytes())
PY
    if ran gns_rank0_slice 1 0 "$ZT/slice0" -x 1 -v 0 && ran gns_rank1_slice 1 0 "$ZT/slice1" -x 1 -v 0 -i "$ZT/train_from_rank1.bin"; then
        check gns_np2_small_norm_is_mean_over_ranks_of_local_norms gcheck mean_of_ranks "$ZT/np2" "$ZT/slice0" "$ZT/slice1"
    fi
    if ran gns_off_flag 2 0 "$ZT/np2_off" "${GNS_ARGS[@]}" -gb -1; then
        check gns_meter_off_logs_null gcheck off "$ZT/np2_off"
        check gns_meter_does_not_change_training zcheck same "$ZT/np2" "$ZT/np2_off"
    fi
fi

# One rank: accumulation gives the small batch; without it there is none.
if ran gns_np1_accum 1 0 "$ZT/np1_acc4" "${GNS_ARGS[@]}" -d 128 && [ -f "$ZT/slice0/log.jsonl" ]; then
    check gns_np1_accum_b_simple_finite_and_positive gcheck finite "$ZT/np1_acc4" 5
    check gns_np1_accum_log_recomputes_from_appendix_a gcheck recompute "$ZT/np1_acc4" 4 8
    check gns_np1_accum_small_norm_is_first_micro_batch_gradient gcheck first_micro "$ZT/np1_acc4" "$ZT/slice0"
    check gns_np1_no_accumulation_is_off gcheck off "$ZT/slice0"
    check gns_np1_no_accumulation_step_line_says_na grep -qE '^step +1/1 .*\| gns n/a \|' "$ZT/slice0.out"
fi

# Every stage, 2 ranks x 2 micro-steps (-d 2*2*B*T = 128): the same meter values as stage 0.
for stage in 0 1 2 3; do ran "gns_np2_accum2_stage$stage" 2 "$stage" "$ZT/acc_z$stage" "${GNS_ARGS[@]}" -d 128; done
if [ -f "$ZT/acc_z0/log.jsonl" ]; then
    check gns_np2_accum2_stage0_log_recomputes_from_appendix_a gcheck recompute "$ZT/acc_z0" 4 8
    for stage in 1 2 3; do
        [ -f "$ZT/acc_z$stage/log.jsonl" ] && check "gns_np2_accum2_stage${stage}_matches_stage0" gcheck match "$ZT/acc_z0" "$ZT/acc_z$stage" 1e-4
    done
fi

check_fails gns_beta_out_of_range "error: -gb: invalid value" build/train_gpt2_z0 -gb 1
