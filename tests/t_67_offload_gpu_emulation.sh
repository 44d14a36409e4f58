#!/usr/bin/env bash
# ZeRO-Offload / ZeRO-Infinity in the GPU build (zero/offload/offload_gpu.cuh), run through the CPU
# emulation of CUDA (dev/emu) with its stream-ordering checks on (EMU_LAZY=1: a kernel or copy
# waits in its stream's queue until something orders after it, so a missing event wait between
# the copy stream, the comm stream and the compute stream reads stale data):
#   - stages 1-3 on 2 ranks: -zo cpu (stage 3 also -zo cpu -zp cpu), -zo nvme (stage 2) and
#     -zo nvme -zp nvme (stage 3) against the in-memory run of the same stage: the same logged
#     losses, grad norms and noise-scale fields, and a byte-identical model file (but for the run
#     id in its header: cmp_run_files). The host AdamW
#     (cpu/adamw.h adamw_update_mixed) does the device kernel's roundings one for one (the same
#     explicit fused multiply-adds: fmaf and __fmaf_rn, nothing left to contraction; t_62 checks
#     the kernel's PTX) and draws the same stochastic-rounding bits, so they agree exactly here
#     and on a GPU (gpu_check.sh section 9 fails on any loss difference)
#   - the bytes copied host<->device each step equal the formula: the fp32 gradient shard down
#     (4Ψ/N), the bf16 parameter shard up (2Ψ/N; with -zp before every all-gather, (4AΨ + 2AE)/N)
#   - a checkpoint saved under -zo cpu resumes in memory onto the straight run, byte for byte
#   - -zp without -zo is one error line (a run's, and the planner's before any row)
#   - the GPU build's planner (--plan with the same flags, plan/plan_offload.h) has each run's
#     counted bytes: the start-up line's device and host bytes, NVMe state, file and staging, and
#     every step's host<->device (and NVMe) bytes, exactly (tests/trace_check.py offload_plan)
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.." || exit 1
cuda_headers offload_gpu_emulation "the offload emulation tests" || exit 0
# Stage 2 runs in the contracted flavor (emu.mk EMU_CONTRACT: the device AdamW kernel's
# multiply-adds fused as nvcc fuses them, the host AdamW's not, as in the CUDA build), where a
# rounding the kernel leaves to the compiler would make -zo cpu/nvme differ from on-device; the
# other stages check the placements' plumbing, which contraction does not touch (one trainer
# build more instead of three). Without FMA instructions the plain build runs stage 2 too.
# plan_gpt2: the planner binary the trainers' --plan runs (train/plan_exec.h).
FMA_TARGET=
grep -qw fma /proc/cpuinfo && FMA_TARGET=build/emu/train_gpt2cu_fma_z2
make -s -j2 emu_binaries plan_gpt2 $FMA_TARGET >/tmp/t67_make.$$ 2>&1 || { echo "FAIL offload_gpu_emu_build: $(tail -3 /tmp/t67_make.$$ | tr '\n' ' ')"; rm -f /tmp/t67_make.$$; exit 1; }
rm -f /tmp/t67_make.$$
[ -n "$FMA_TARGET" ] || echo "SKIP offload_gpu_contracted: this CPU has no FMA instructions; stage 2 runs uncontracted"
ET=$(mktemp -d /tmp/t67_offload_gpu.XXXXXX)
trap 'rm -rf "$ET"' EXIT
mkdir -p "$ET/nvme"
python3 tests/markov_shards.py "$ET" 1000 20000 4000 7
# EMU_DEVICE_MATH=1 (dev/emu/emu_device.h): intrinsics with the device's documented errors and fp32
# tensor-core accumulation, as on a GPU; the offloaded and in-memory runs must still agree exactly
# (the optimizer's arithmetic does not depend on where it runs).
export OMP_NUM_THREADS=1 EMU_DEVICE_COUNT=2 EMU_LAZY=1 EMU_DEVICE_MATH=1
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS -x EMU_DEVICE_COUNT -x EMU_LAZY -x EMU_DEVICE_MATH)
# 2 ranks of the reference model, global batch 4 x T 32, 2 steps (the second uses the first's
# host AdamW update), val and checkpoint at 2: each emulated step costs seconds.
erun() {
    local stage=$1 dir=$2; shift 2
    local binary=build/emu/train_gpt2cu_z"$stage"
    [ "$stage" -eq 2 ] && [ -n "$FMA_TARGET" ] && binary=$FMA_TARGET
    timeout 600 "${MPIRUN[@]}" -np 2 "$binary" -e dev/reference/gpt2_ref_model.bin -t 32 -b 2 -n 2 \
        -l 1e-3 -x 2 -v 2 -m 2 -s 0 -i "$ET/train.bin" -j "$ET/val.bin" -o "$dir" "$@" >"$dir.out" 2>&1
}
# host<->device bytes of every train record against the formula, from the layout (tests/zero_logcheck.py's)
copies_check() { # DIR ZP(0/1)
    python3 - "$1" "$2" <<'PY'
import json, sys
sys.path.insert(0, "tests")
from zero_logcheck import layout_units, padded
run, zp = sys.argv[1], sys.argv[2] == "1"
recs = [json.loads(l) for l in open(f"{run}/log.jsonl")]
cfg = next(r for r in recs if r["kind"] == "config")
n, a = cfg["world_size"], cfg["grad_accum_steps"]
units, wte = layout_units(cfg, True)
shard = [padded(u, n) // n for u in units]
down = 4 * sum(shard)  # the fp32 gradient shard
up = 2 * sum(s * a * (3 if i in wte else 2) for i, s in enumerate(shard)) if zp else 2 * sum(shard)  # bf16 parameters
bad = [(r["step"], r.get("d2h_bytes"), r.get("h2d_bytes")) for r in recs if r["kind"] == "train" and (r.get("d2h_bytes"), r.get("h2d_bytes")) != (down, up)]
print(f"down {down} up {up} bytes per step (formula); {len(bad)} steps differ {bad[:2]}")
sys.exit(1 if bad else 0)
PY
}

for stage in 1 2 3; do
    ref="$ET/mem$stage"
    erun "$stage" "$ref" || { echo "FAIL offload_gpu_reference_z${stage}: $(grep -v -i tokenizer "$ref.out" | tail -2 | tr '\n' ' ')"; continue; }
    placements=("-zo cpu")
    [ "$stage" -eq 2 ] && placements+=("-zo nvme")
    [ "$stage" -eq 3 ] && placements+=("-zo cpu -zp cpu" "-zo nvme -zp nvme")
    for p in "${placements[@]}"; do
        tag=$(echo "$p" | tr -d ' -'); run="$ET/${tag}_z$stage"; name="emu_zero${stage}_np2_${tag}"
        extra=(); [[ "$p" == *nvme* ]] && extra=(-zd "$ET/nvme")
        # shellcheck disable=SC2086
        if ! erun "$stage" "$run" $p "${extra[@]}"; then echo "FAIL ${name}_runs: $(grep -E 'error' "$run.out" | head -2 | tr '\n' ' ')"; continue; fi
        check "${name}_bit_identical_to_on_device" bash -c "source tests/lib.sh && cmp_run_files '$ref/model_00000002.bin' '$run/model_00000002.bin' && python3 tests/zero_logcheck.py same '$ref' '$run'"
        check "${name}_matches_formulas" python3 tests/zero_logcheck.py counts "$run" "$stage"
        zp=0; [[ "$p" == *zp* ]] && zp=1
        check "${name}_host_device_bytes_equal_formula" copies_check "$run" "$zp"
        # The GPU build's planner row for this placement (plan/plan_offload.h) against the run's counts.
        # shellcheck disable=SC2086
        build/emu/train_gpt2cu_z3 --plan h100 -pj - -e dev/reference/gpt2_ref_model.bin -t 32 -b 2 -np 2 $p >"$run.plan" 2>&1
        check "${name}_plan_offload_bytes_equal_engine" python3 tests/trace_check.py offload_plan "$run.plan" "$run"
        grep -q "^offload: optimizer .* bytes per rank: device" "$run.out" || echo "FAIL ${name}_prints_placement_and_bytes: no offload line"
    done
done

# Saved with the optimizer on the host, resumed on the device.
if ZERO_TEST_FAULT=stop@1 erun 2 "$ET/cross" -n 1 -zo cpu && erun 2 "$ET/cross" -n 1 -y 1; then
    check emu_zero2_np2_saved_with_zo_cpu_resumes_on_device bash -c "source tests/lib.sh && cmp_run_files '$ET/mem2/model_00000002.bin' '$ET/cross/model_00000002.bin' && python3 tests/zero_logcheck.py same '$ET/mem2' '$ET/cross'"
else echo "FAIL emu_zero2_np2_saved_with_zo_cpu_resumes_on_device: $(grep error "$ET/cross.out" | head -2 | tr '\n' ' ')"; fi

check_fails emu_offload_zp_without_zo "error: -zp cpu: in the GPU build the parameter shard is updated where the optimizer runs; expected -zo cpu or -zo nvme" \
    build/emu/train_gpt2cu_z3 -e dev/reference/gpt2_ref_model.bin -t 32 -b 2 -x 1 -v 0 -s 0 -i "$ET/train.bin" -zp cpu
# The planner refuses it the same way, with one line and no row.
out=$(build/emu/train_gpt2cu_z3 --plan h100 -pj - -e dev/reference/gpt2_ref_model.bin -t 32 -b 2 -np 2 -zp cpu 2>&1); rc=$?
if [ "$rc" -eq 1 ] && [ "$(grep -c '^error' <<<"$out")" -eq 1 ] && grep -q '^error: -zp cpu: in the GPU build the parameter shard is updated where the optimizer runs' <<<"$out" &&
   ! grep -q '^plan_json' <<<"$out"; then echo "PASS emu_plan_offload_zp_without_zo_refused_before_any_row"
else echo "FAIL emu_plan_offload_zp_without_zo_refused_before_any_row: exit $rc: $(head -2 <<<"$out" | tr '\n' ' ')"; fi
