#!/usr/bin/env bash
# The gradient noise scale meter inside the CPU trainer (train/noise_scale.h, shared with train_gpt2.cu;
# zero.cuh zero_grads_unit_ready / zero_optimizer_step; McCandlish et al. 2018, Appendix A), in
# real runs: d2, T = 8, B = 4 (B*T = 32 tokens per micro-batch), synthetic Markov-chain data
# (tests/zero_common.sh), 25 steps. The small batch per stage (train/noise_scale.h's table):
# stages 0/1 with N > 1 ranks: each rank's whole accumulated batch (B_small = A*B*T); stages 0/1
# with one rank: the first micro-batch (B*T); stages 2/3: every micro-batch of every rank (B*T).
#
# Independent values: n_k, the step-1 grad norm of a one-rank run without accumulation whose
# first batch is the k-th B*T-token slice of the data (the shard without its first k*B*T tokens).
# At step 1 (same init everywhere) the k-th micro-batch read by any run is slice k (global
# micro-step m, rank r reads slice m*N + r), so each mode's step-1 |G_small|^2 is a mean of n_k^2:
#   2 ranks, A = 1, stage 0 (rank batch = one micro-batch):  (n0^2 + n1^2)/2
#   1 rank,  A = 4, stage 0 (first micro-batch, x A^2):      n0^2
#   1 rank,  A = 4, stage 2 (every micro-batch):             (n0^2 + n1^2 + n2^2 + n3^2)/4
#   2 ranks, A = 2, stage 2 (every micro-batch):             (n0^2 + n1^2 + n2^2 + n3^2)/4
#   2 ranks, A = 2, stage 0 (rank batch) on a shard repeating every 2*B*T tokens, so that each
#     rank's two micro-batches are equal and its batch gradient is its slice's: (n0^2 + n1'^2)/2
#     (n1' from that shard: rank 1's slice ends on the repeated first token)
# These pin which gradient is read (before the reduction, per rank) and its scale (A^2, A or 1).
# Tolerance 3e-5 relative: grad norms are logged with 6 significant digits (up to 5e-6 relative,
# 1e-5 on the square); measured at most 1e-6.
#
# Also checked:
#  - Where the small batches make up the big one (all but one-rank stage 0/1), |G_small|^2 >=
#    |G_big|^2 on every step (mean of squares >= square of the mean; 1e-6 relative for float
#    summation order); for the one-rank first-micro-batch mode, on average over the run
#    (E|G_small|^2 - E|G_big|^2 = tr(Σ)(1/B_small - 1/B_big) > 0). B_simple finite and > 0.
#  - The log recomputes: |G_big|^2 equals the logged grad_norm^2 (the pre-clipping global norm),
#    the config's B_small/B_big are the table's, and gns_g2, gns_trace, b_simple
#    recomputed here (Appendix A estimates, bias-corrected EMA with the logged beta) from the
#    logged per-step norms (9 digits) match. Tolerance 2e-5 relative: the smoothed values are
#    printed with 6 significant digits (5e-6); measured at most 4.4e-6. (|G_big|^2 against the
#    6-digit grad_norm^2: 3e-5 as above; measured at most 8.4e-6.)
#  - Stages that measure the same small batch log the same values: without accumulation every
#    stage as stage 0 (2 ranks); with 2 micro-steps stage 1 as stage 0 and stage 3 as stage 2.
#    Measured: bit-identical in all five comparisons (Open MPI 4.1 here), but MPI does not promise
#    the same summation order for all-reduce and reduce-scatter. Tolerance 1e-4 relative: a
#    different order moves the norms by ~1e-7 and B_simple by ~1e-6 (its print resolution 5e-6);
#    a wrong small batch or scale moves them by factors.
#  - The meter does not touch training: with it off (-gb -1) the losses are bit-identical.
#  - One rank without accumulation has no small batch: "gns n/a", null in the log.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/zero_common.sh"
zero_setup

cat > "$ZT/gnscheck.py" <<'EOF'
import json, sys

def load(run):
    config, train = {}, {}
    for line in open(f"{run}/log.jsonl"):
        r = json.loads(line)
        if r["kind"] == "config": config = r
        elif r["kind"] == "train": train[r["step"]] = r
    return config, [train[s] for s in sorted(train)]

def rel(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-30)

def number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)

def fail(msg):
    print(msg); sys.exit(1)

cmd, args = sys.argv[1], sys.argv[2:]
if cmd == "config":  # RUN MODE B_SMALL: the small-batch mode and sizes the config record states
    config, _ = load(args[0])
    got = (config.get("gns_small_batch"), config.get("gns_b_small"), config.get("gns_b_big"))
    want = (args[1], float(args[2]), config.get("batch_tokens"))
    print(f"config (mode, B_small, B_big) {got}, want {want}")
    sys.exit(0 if got == want else 1)
if cmd == "small_ge_big":  # RUN every|average
    _, recs = load(args[0])
    small = [r["gns_small_sq"] for r in recs]; big = [r["gns_big_sq"] for r in recs]
    if not all(number(x) for x in small + big): fail("null norms in the log")
    below = [r["step"] for s, b, r in zip(small, big, recs) if s < b * (1 - 1e-6)]
    ms, mb = sum(small) / len(small), sum(big) / len(big)
    print(f"mean |G_small|^2 {ms:.5g} vs mean |G_big|^2 {mb:.5g}; small < big at steps {below[:8]} of {len(recs)}")
    sys.exit(0 if (not below if args[1] == "every" else ms > mb) else 1)
if cmd == "finite":  # RUN FROM_STEP: raw norms every step, b_simple finite > 0 from FROM_STEP on
    _, recs = load(args[0])
    bad = [r["step"] for r in recs if not (number(r["gns_small_sq"]) and number(r["gns_big_sq"]))]
    bad_b = [r["step"] for r in recs if r["step"] >= int(args[1]) and not (number(r["b_simple"]) and r["b_simple"] > 0)]
    print(f"{len(recs)} steps; null norms at {bad[:5]}; b_simple null or <= 0 at {bad_b[:5]}; last b_simple {recs[-1]['b_simple']}")
    sys.exit(0 if recs and not bad and not bad_b else 1)
if cmd == "recompute":  # RUN: the trainer's meter, recomputed from its log
    config, recs = load(args[0])
    b_small, b_big, beta = config["gns_b_small"], config["gns_b_big"], config["gns_beta"]
    worst_norm = max(rel(r["gns_big_sq"], r["grad_norm"] ** 2) for r in recs)
    if worst_norm > 3e-5: fail(f"|G_big|^2 differs from grad_norm^2 by {worst_norm:.2g} relative")
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
if cmd == "step1_small":  # RUN SLICE_RUN...: step-1 |G_small|^2 == mean of the slice runs' grad_norm^2
    _, run = load(args[0])
    norms = [load(a)[1][0]["grad_norm"] ** 2 for a in args[1:]]
    want = sum(norms) / len(norms)
    gs = run[0]["gns_small_sq"]
    print(f"step 1: |G_small|^2 {gs:.9g} vs mean of {len(norms)} slice runs' grad_norm^2 {want:.9g}: {rel(gs, want):.2g} relative")
    sys.exit(0 if rel(gs, want) <= 3e-5 else 1)
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
    print(f"config gns_small_batch {config.get('gns_small_batch')}, gns_b_small {config.get('gns_b_small')}; "
          f"steps with a non-null gns field: {on[:5]}")
    sys.exit(0 if not on and config.get("gns_small_batch") == "off" and config.get("gns_b_small", 0) is None else 1)
fail(f"unknown check {cmd}")
EOF
gcheck() { python3 "$ZT/gnscheck.py" "$@"; }
GNS_ARGS=(-x 25 -v 0)
BT=32

ran() { # NAME N STAGE DIR ARGS...: run, or print a FAIL line and return 1
    local name=$1; shift
    zrun "$@" && return 0
    echo "FAIL ${name}_runs: $(grep -v tokenizer "$3.out" | tail -2 | tr '\n' ' ')"; return 1
}

# Shards: train.bin without its first k*B*T tokens (slice k first), and one repeating its first
# 2*B*T tokens (+1 target) so that every global batch of 2 ranks x 2 micro-steps has equal halves.
python3 - "$ZT" "$BT" <<'PY'
import sys, numpy as np
d, bt = sys.argv[1], int(sys.argv[2])
raw = np.fromfile(f"{d}/train.bin", dtype="<u2")
header, toks = raw[:512].view("<i4").copy(), raw[512:]
def write(name, t):
    h = header.copy(); h[2] = len(t)
    with open(f"{d}/{name}", "wb") as f: f.write(h.tobytes()); f.write(t.astype("<u2").tobytes())
for k in range(1, 4): write(f"train_from_slice{k}.bin", toks[k * bt:])
periodic = np.resize(toks[:2 * bt], len(toks))
write("train_periodic.bin", periodic); write("train_periodic_from_slice1.bin", periodic[bt:])
PY
slices=()
for k in 0 1 2 3; do
    shard="$ZT/train_from_slice$k.bin"; [ "$k" -eq 0 ] && shard="$ZT/train.bin"
    ran "gns_slice$k" 1 0 "$ZT/slice$k" -x 1 -v 0 -i "$shard" && slices+=("$ZT/slice$k")
done
[ ${#slices[@]} -eq 4 ] || { echo "FAIL gns_slice_runs: ${#slices[@]} of 4 ran"; exit 1; }

# 2 ranks, stage 0, no accumulation: each rank's batch is one micro-batch.
if ran gns_np2_stage0 2 0 "$ZT/np2" "${GNS_ARGS[@]}"; then
    check gns_np2_config_rank_batch_of_bt_tokens gcheck config "$ZT/np2" rank_batch "$BT"
    check gns_np2_small_norm_is_mean_over_ranks_of_local_norms gcheck step1_small "$ZT/np2" "$ZT/slice0" "$ZT/slice1"
    check gns_np2_small_norm_ge_big_norm_every_step gcheck small_ge_big "$ZT/np2" every
    check gns_np2_b_simple_finite_and_positive gcheck finite "$ZT/np2" 5
    check gns_np2_log_recomputes_from_appendix_a gcheck recompute "$ZT/np2"
    check gns_np2_step_line_shows_b_simple grep -qE '^step +25/25 .*\| gns [0-9]+ \|' "$ZT/np2.out"
    for stage in 1 2 3; do
        ran "gns_np2_stage$stage" 2 "$stage" "$ZT/np2_z$stage" "${GNS_ARGS[@]}" &&
            check "gns_np2_stage${stage}_matches_stage0" gcheck match "$ZT/np2" "$ZT/np2_z$stage" 1e-4
    done
    if ran gns_off_flag 2 0 "$ZT/np2_off" "${GNS_ARGS[@]}" -gb -1; then
        check gns_meter_off_logs_null gcheck off "$ZT/np2_off"
        check gns_meter_does_not_change_training zcheck same "$ZT/np2" "$ZT/np2_off"
    fi
fi

# One rank, 4 micro-steps (-d 4*B*T): stage 0 measures the first micro-batch, stage 2 every one.
if ran gns_np1_accum_stage0 1 0 "$ZT/np1_z0" "${GNS_ARGS[@]}" -d 128; then
    check gns_np1_accum_stage0_config_first_micro_batch gcheck config "$ZT/np1_z0" first_micro_batch "$BT"
    check gns_np1_accum_stage0_small_norm_is_first_micro_batch_times_a2 gcheck step1_small "$ZT/np1_z0" "$ZT/slice0"
    check gns_np1_accum_stage0_small_norm_ge_big_norm_on_average gcheck small_ge_big "$ZT/np1_z0" average
    check gns_np1_accum_stage0_b_simple_finite_and_positive gcheck finite "$ZT/np1_z0" 5
    check gns_np1_accum_stage0_log_recomputes_from_appendix_a gcheck recompute "$ZT/np1_z0"
fi
if ran gns_np1_accum_stage2 1 2 "$ZT/np1_z2" "${GNS_ARGS[@]}" -d 128; then
    check gns_np1_accum_stage2_config_every_micro_batch gcheck config "$ZT/np1_z2" every_micro_batch "$BT"
    check gns_np1_accum_stage2_small_norm_is_mean_over_micro_batches gcheck step1_small "$ZT/np1_z2" "${slices[@]}"
    check gns_np1_accum_stage2_small_norm_ge_big_norm_every_step gcheck small_ge_big "$ZT/np1_z2" every
    check gns_np1_accum_stage2_b_simple_finite_and_positive gcheck finite "$ZT/np1_z2" 5
fi
check gns_np1_no_accumulation_is_off gcheck off "$ZT/slice0"
check gns_np1_no_accumulation_step_line_says_na grep -qE '^step +1/1 .*\| gns n/a \|' "$ZT/slice0.out"

# 2 ranks x 2 micro-steps (-d 128): stages 0/1 the ranks' whole batches, stages 2/3 every micro-batch.
for stage in 0 1 2 3; do ran "gns_np2_accum_stage$stage" 2 "$stage" "$ZT/acc_z$stage" "${GNS_ARGS[@]}" -d 128; done
if [ -f "$ZT/acc_z0/log.jsonl" ]; then
    check gns_np2_accum_stage0_config_rank_batch_of_a_bt_tokens gcheck config "$ZT/acc_z0" rank_batch $((2 * BT))
    check gns_np2_accum_stage0_small_norm_ge_big_norm_every_step gcheck small_ge_big "$ZT/acc_z0" every
    check gns_np2_accum_stage0_b_simple_finite_and_positive gcheck finite "$ZT/acc_z0" 5
    check gns_np2_accum_stage0_log_recomputes_from_appendix_a gcheck recompute "$ZT/acc_z0"
    [ -f "$ZT/acc_z1/log.jsonl" ] && check gns_np2_accum_stage1_matches_stage0 gcheck match "$ZT/acc_z0" "$ZT/acc_z1" 1e-4
fi
if [ -f "$ZT/acc_z2/log.jsonl" ]; then
    check gns_np2_accum_stage2_config_every_micro_batch gcheck config "$ZT/acc_z2" every_micro_batch "$BT"
    check gns_np2_accum_stage2_small_norm_is_mean_over_all_micro_batches gcheck step1_small "$ZT/acc_z2" "${slices[@]}"
    check gns_np2_accum_stage2_small_norm_ge_big_norm_every_step gcheck small_ge_big "$ZT/acc_z2" every
    check gns_np2_accum_stage2_b_simple_finite_and_positive gcheck finite "$ZT/acc_z2" 5
    check gns_np2_accum_stage2_log_recomputes_from_appendix_a gcheck recompute "$ZT/acc_z2"
    [ -f "$ZT/acc_z3/log.jsonl" ] && check gns_np2_accum_stage3_matches_stage2 gcheck match "$ZT/acc_z2" "$ZT/acc_z3" 1e-4
fi
# The rank batch's scale with accumulation: on the periodic shard each rank's 2 micro-batches are
# its slice twice over, so its accumulated gradient is that slice's mean gradient.
# (Rank 1's slice there ends on a repeated token, hence its own one-rank run.)
ran gns_np2_accum_periodic 2 0 "$ZT/periodic" -x 1 -v 0 -d 128 -i "$ZT/train_periodic.bin" &&
    ran gns_periodic_slice1 1 0 "$ZT/periodic_slice1" -x 1 -v 0 -i "$ZT/train_periodic_from_slice1.bin" &&
    check gns_np2_accum_stage0_rank_batch_is_mean_gradient_of_its_micro_batches gcheck step1_small "$ZT/periodic" "$ZT/slice0" "$ZT/periodic_slice1"

check_fails gns_beta_out_of_range "error: -gb: invalid value" build/train_gpt2_z0 -gb 1
