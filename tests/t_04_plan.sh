#!/usr/bin/env bash
# tier: quick
# The planner's binary (./plan_gpt2, plan/plan_gpt2.c) as a user meets it, in seconds (no run, no
# measurement: the h100 preset's rates are fixed numbers):
#   1. GPT-2 124M (d12, B 64, T 1024, 524288 tokens per step) on 8 H100s plans the GPU build's
#      layout (bf16 parameters and micro-step gradients, fp32 accumulated gradients, master, m,
#      v) whichever binary runs it: all 4 stages fit, and each stage's parameter, gradient and
#      optimizer bytes equal the hand formula from the parameter count (below); the activations
#      are the same at every stage; the totals add up; tokens/s and MFU follow from the step time.
#   2. One H100: every stage fits, the 8 micro-steps of the same batch.
#   3. ./train_gpt2 --plan (train/plan_exec.h) prints the same plan as ./plan_gpt2.
#   4. The table is for people: no JSON rows and no ZeRO++ rows unless asked (-pj, -pz, -qw).
#   5. gpu_build=0 plans the CPU build's fp32 layout on the same machine; a bad gpu_build is one
#      error line.
# Every check is exact (the planner prints whole bytes in its JSON rows) but for tokens/s and
# MFU, printed to 2 and 5 decimals: compared within the rounding of what is printed.
source "$(dirname "$0")/lib.sh"
[ -x plan_gpt2 ] || nice -n 10 make -s plan_gpt2 >/dev/null 2>&1 || { echo "FAIL plan_gpt2_builds: make plan_gpt2 failed"; exit 0; }
T4=$(mktemp -d /tmp/t04.XXXXXX)
trap 'rm -rf "$T4"' EXIT
GPT2_124M=(-e d12 -b 64 -t 1024 -d 524288)

# 1. 124M on 8 H100s.
./plan_gpt2 --plan h100 "${GPT2_124M[@]}" -np 8 -pj "$T4/np8.json" >"$T4/np8.out" 2>&1
check plan_124m_np8_h100_exits_0 test $? -eq 0
check plan_124m_np8_h100_gpu_layout_matches_hand_formula python3 - "$T4/np8.json" 8 <<'PY'
import json, sys
rows = [json.loads(l[len("plan_json "):]) for l in open(sys.argv[1]) if l.startswith("plan_json ")]
N = int(sys.argv[2])
assert [r["stage"] for r in rows] == [0, 1, 2, 3], [r["stage"] for r in rows]
# GPT-2 124M: V 50257 padded to Vp 50304, maxT 1024, L 12, C 768: wte Vp*C + wpe maxT*C + per layer
# 12C^2 + 13C (qkv, proj, fc, fcproj weights and biases, two layernorms) + final layernorm 2C.
Vp, maxT, L, C = 50304, 1024, 12, 768
P = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C
assert P == 124475904, P
# The engine pads each of its units to a multiple of N x 64 elements (ZERO_ALIGN): wte's 6 vocab
# chunks, wpe, 12 layers, the final layernorm: at most 20 units, each padded by less than N*64.
psi = rows[0]["padded_parameters"]
assert psi % (N * 64) == 0 and P <= psi < P + 20 * N * 64, (psi, P)
# bf16 = 2 bytes, fp32 = 4. Stage 0 keeps all; 1 shards the optimizer (fp32 master, m, v: 12 bytes
# per element); 2 also the fp32 accumulated gradients (the bf16 micro-step gradients live in the
# working units); 3 also the bf16 parameters (ZeRO paper, Rajbhandari et al. 2020, section 5.1).
want = {0: (2 * psi, 6 * psi, 12 * psi), 1: (2 * psi, 6 * psi, 12 * psi // N),
        2: (2 * psi, 4 * psi // N, 12 * psi // N), 3: (2 * psi // N, 4 * psi // N, 12 * psi // N)}
act = rows[0]["bytes_activations"]
for r in rows:
    s = r["stage"]
    got = (r["bytes_params"], r["bytes_grads"], r["bytes_optimizer"])
    assert got == want[s], (s, got, want[s])
    assert r["element_bytes"] == 2 and r["bytes_ring"] == 0, r  # bf16; NCCL's buffers are its own
    assert r["fits"] is True, (s, r["bytes_total"])
    assert r["bytes_activations"] == act, s
    assert r["bytes_total"] == sum(r[k] for k in ("bytes_params", "bytes_grads", "bytes_optimizer", "bytes_working",
                                                   "bytes_ring", "bytes_activations")), s
    assert r["bytes_total"] <= 80e9 - 2 * 2**30, s  # the H100's 80 GB less the preset's 2 GiB reserve
    # tokens/s = tokens per step / step time; MFU = tokens/s x (6 P + 6 L C T) / (989 TFLOP/s x N)
    tps = 524288 / (r["step_ms"] / 1e3)
    assert abs(r["tokens_per_s"] - tps) <= 1e-6 * tps + 0.01, (s, r["tokens_per_s"], tps)
    mfu = r["tokens_per_s"] * (6 * P + 6 * L * C * 1024) / (989e12 * N)
    assert abs(r["mfu"] - mfu) <= 1e-5, (s, r["mfu"], mfu)
print("ok", psi, [round(r["bytes_total"] / 2**30, 2) for r in rows])
PY
check plan_124m_np8_h100_table_says_gpu_build grep -q "bf16 params and micro-step grads, fp32 accumulated grads, master, m, v (GPU build)" "$T4/np8.out"
check plan_124m_np8_h100_four_rows_fit test "$(grep -cE '^[0-3] +\|.*\| yes +\|' "$T4/np8.out")" -eq 4

# 2. One H100: the same batch in 8 micro-steps.
./plan_gpt2 --plan h100 "${GPT2_124M[@]}" -np 1 -pj "$T4/np1.json" >"$T4/np1.out" 2>&1
check plan_124m_np1_h100_all_fit_8_micro_steps python3 -c '
import json, sys
rows = [json.loads(l[len("plan_json "):]) for l in open(sys.argv[1])]
assert len(rows) == 4 and all(r["fits"] and r["grad_accum_steps"] == 8 and r["world_size"] == 1 for r in rows), rows' "$T4/np1.json"

# 3. The trainer's --plan is plan_gpt2 (one table, byte for byte).
./train_gpt2 --plan h100 "${GPT2_124M[@]}" -np 8 >"$T4/trainer.out" 2>&1
check plan_trainer_and_plan_gpt2_print_the_same_plan cmp "$T4/trainer.out" "$T4/np8.out"

# 4. JSON and ZeRO++ rows only when asked.
check plan_no_json_rows_unless_asked test "$(grep -c '_json' "$T4/np8.out")" -eq 0
check plan_no_zeropp_rows_unless_asked test "$(grep -c 'zero++' "$T4/np8.out")" -eq 0
out=$(./plan_gpt2 --plan h100 "${GPT2_124M[@]}" -np 8 -pj - -pz 1 2>&1)
check plan_pj_dash_prints_4_stage_rows_pz_adds_zeropp_rows \
    test "$(grep -c '^plan_json ' <<<"$out"):$(grep -c '^plan_zeropp_json ' <<<"$out")" = "4:5"
out=$(./plan_gpt2 --plan h100 "${GPT2_124M[@]}" -np 8 -qw 1 2>&1)
check plan_zeropp_flag_gives_its_row_without_pz test "$(grep -cE '^(plain|qwZ)' <<<"$out")" -eq 2
check_fails plan_pj_without_plan_refused "error: -pj: a plan's output; expected --plan MACHINE as well" ./train_gpt2 -e d2 -pj -
check_fails plan_pj_unwritable_refused "error: -pj $T4/none/p.json: cannot create" ./plan_gpt2 --plan h100 -e d2 -t 8 -pj "$T4/none/p.json"

# 5. The CPU build's layout on request; a bad value refused.
out=$(./plan_gpt2 --plan h100,gpu_build=0 -e d2 -t 8 -b 2 -np 2 -pj - 2>&1)
check plan_gpu_build_0_plans_fp32_layout python3 -c '
import json, sys
rows = [json.loads(l[len("plan_json "):]) for l in sys.stdin if l.startswith("plan_json ")]
assert len(rows) == 4 and all(r["element_bytes"] == 4 and r["bytes_ring"] > 0 for r in rows), rows' <<<"$out"
check_fails plan_gpu_build_2_refused "error: --plan h100,gpu_build=2: gpu_build=2; expected 0" ./plan_gpt2 --plan h100,gpu_build=2 -e d2
check_fails plan_gpt2_without_plan_refused "error: plan_gpt2: no --plan MACHINE" ./plan_gpt2 -e d2
