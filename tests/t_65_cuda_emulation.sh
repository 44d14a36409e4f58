#!/usr/bin/env bash
# The CUDA build's own code, run on the CPU through the emulation of CUDA (dev/emu/, emu.mk):
# the kernels, the cuBLASLt calls (through a host model of cuBLASLt), the GPU ZeRO engine
# (zero/gpu/engine_gpu.cuh with NCCL's calls carried by MPI, and the host-staged MPI backend) and
# train_gpt2.cu's loop. No GPU is used: this measures nothing about speed, and says nothing of
# real NCCL, cuBLASLt's own kernels or hardware timing. What it does see: indexing and size bugs,
# missing barriers (__syncthreads/__syncwarp), out-of-bounds accesses (fenced buffers), launch
# limits, reads of memory nobody wrote (NaN-poisoned), a consumer that skips its wait on a
# collective (collectives complete late) or, with EMU_LAZY=1 (kernels queued until waited for), a
# collective started before the kernels producing its input ran; wrong host logic around the
# kernels.
#   1. test_emu, test_emu_ptx: the emulation catches the bugs it claims to (deliberately broken
#      kernels; test_emu_ptx for mma.sync, ldmatrix and cp.async); test_cublaslt_emu: the
#      cuBLASLt model against a double-precision GEMM and its error cases.
#   2. test_kernels: every kernel vs its CPU twin, under two scheduling seeds; the launches seen
#      match dev/ptxas_occupancy.py's launch table.
#   3. test_gpt2cu at ZeRO stages 0-3 (one rank): the GPU model vs the PyTorch reference; then
#      test_kernels, test_quantize and test_gpt2cu stage 0 in the contracted flavor with device
#      math (the emulation closest to a GPU's arithmetic: emu.mk, EMU_CONTRACT).
#   4. train_gpt2cu, the reference model's config (V 1000, L 2, C 64) on synthetic tokens, 6 steps:
#      2 ranks at stages 0-3 (NCCL build: NCCL's collectives carried by MPI and completing only
#      when waited for, so a missing stream wait reads stale data) and the host-staged MPI
#      backend at stage 2 match 1 rank at stage 0 within bf16 tolerance, count what the
#      formulas say, and resume bit-exactly (stage 3); at stage 0 its losses and gradient
#      noise scale meter agree with the CPU build's (fp32) on the same run.
# About 4.5 minutes on 2 cores from a fresh clone (the builds are a third of it), 3 once built.
cd "$(dirname "$0")/.." || exit 1
source tests/lib.sh

cuda_headers emu_cuda_headers_present "the CUDA emulation tests" || exit 0
log=$(mktemp)
ET=$(mktemp -d /tmp/t_65_emu.XXXXXX)
# On exit (also when interrupted): no emulated rank outlives the test, then the temp files go.
trap 'pkill -f -- "-o $ET/" 2>/dev/null; rm -rf "$log" "$ET"' EXIT
if ! make -s -j2 emu_binaries zero_binaries >"$log" 2>&1; then
    echo "FAIL emu_build: $(grep -m3 -E 'error' "$log" | tr '\n' ' ')"
    exit 0
fi
echo "PASS emu_build"

# run_tests NAME PREFIX CMD...: the program's PASS/FAIL lines, prefixed; a FAIL line if it exits
# non-zero without printing one (a crash the emulation stopped, or 10 minutes passed).
run_tests() {
    local name=$1 prefix=$2; shift 2
    local out rc
    out=$(timeout -k 10 600 "$@" 2>&1); rc=$? # a hung emulation (a spin-wait, a deadlock) fails, not stalls CI
    grep -E '^(PASS|FAIL) ' <<<"$out" | sed -E "s/^(PASS|FAIL) /\1 $prefix/"
    if [ "$rc" -ne 0 ] && ! grep -q '^FAIL ' <<<"$out"; then
        echo "FAIL ${name}_exit: exit $rc: $(grep -v -E '^(PASS|INFO)' <<<"$out" | tail -3 | tr '\n' ' ')"
    fi
}

run_tests emu_self "" build/emu/test_emu
run_tests emu_ptx "" build/emu/test_emu_ptx
run_tests emu_cublaslt_model "emu_cublaslt_model_" build/emu/test_cublaslt_emu
# EMU_LAUNCH_LOG: every launch's configuration, for the occupancy table's cross-check below.
export EMU_LAUNCH_LOG=$ET/launches.txt
for seed in 1 2; do run_tests emu_kernels_seed$seed "emu_seed${seed}_" env EMU_SEED=$seed build/emu/test_kernels; done
# The fallbacks of every fused cuBLASLt epilogue (GELU_AUX_BIAS, DGELU_BGRAD, BGRADB): the model's
# heuristic refuses them, as cuBLASLt may for a shape, and the unfused kernels must agree too.
run_tests emu_kernels_unfused "emu_unfused_" env EMU_CUBLASLT_NO_FUSED=1 build/emu/test_kernels
for stage in 0 1 2 3; do run_tests emu_test_gpt2cu_z$stage "emu_z${stage}_" build/emu/test_gpt2cu_z$stage; done
unset EMU_LAUNCH_LOG
# Closer to the device: EMU_DEVICE_MATH=1 (dev/emu/emu_device.h: __expf, __logf, __fdividef and rsqrtf
# err by up to the CUDA Programming Guide's maximum errors, tensor-core products accumulate in
# fp32) in the contracted flavor (emu.mk EMU_CONTRACT: device code's multiply-adds fused as nvcc
# fuses them, host code's and the CPU twins' not, as in the CUDA build): test_kernels (its
# tolerances were derived from what this measures, each beside its check), test_quantize (the
# dequantize-accumulate stays bit-identical to the twin), test_gpt2cu at stage 0 (the GPU model
# against PyTorch). The bit-identity checks (AdamW device vs host, the dequantize-accumulate)
# hold because those kernels spell their roundings out: with AdamW's arithmetic as it was before
# that change (f7029bd^) test_kernels' two AdamW checks fail here and pass uncontracted. The old
# dequantize-accumulate passes here although nvcc fused it (t_62's PTX check is what catches
# that one: gcc does not fuse a product that also feeds the non-accumulating store). On a CPU
# without FMA the flavor cannot be built: device math alone runs then.
if grep -qw fma /proc/cpuinfo; then
    if make -s -j2 emu_fma_binaries >"$log" 2>&1; then
        run_tests emu_kernels_fma "emu_fma_" env EMU_DEVICE_MATH=1 build/emu/test_kernels_fma
        run_tests emu_quantize_fma "emu_fma_" env EMU_DEVICE_MATH=1 build/emu/test_quantize_fma
        run_tests emu_test_gpt2cu_fma_z0 "emu_fma_z0_" env EMU_DEVICE_MATH=1 build/emu/test_gpt2cu_fma_z0
    else echo "FAIL emu_fma_build: $(grep -m3 -E 'error' "$log" | tr '\n' ' ')"; fi
else
    echo "SKIP emu_fma: this CPU has no FMA instructions; device math without contraction instead"
    run_tests emu_kernels_device_math "emu_device_math_" env EMU_DEVICE_MATH=1 build/emu/test_kernels
    run_tests emu_test_gpt2cu_z0_device_math "emu_device_math_z0_" env EMU_DEVICE_MATH=1 build/emu/test_gpt2cu_z0
fi
# dev/ptxas_occupancy.py's launch table (threads, dynamic shared memory at d12, behind t_62's
# occupancy figures) against what the launchers really asked for in the runs above.
run_tests emu_launch_table "emu_" python3 dev/ptxas_occupancy.py --check-launches "$ET/launches.txt"

# Synthetic tokens below V = 1000 (the reference model's vocabulary), llm.c shard format.
python3 tests/markov_shards.py "$ET" 1000 20000 4000 7
export OMP_NUM_THREADS=1
# Each rank "has" its own GPU, as NCCL requires (EMU_DEVICE_COUNT; dev/emu/emu_runtime.h).
export EMU_DEVICE_COUNT=2
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS -x EMU_DEVICE_COUNT -x EMU_LAZY -x EMU_NCCL_FAIL)
export EMU_LAZY=0 EMU_NCCL_FAIL= # empty: no injected NCCL error (dev/emu/nccl_emu.h)
# erun N BINARY DIR ARGS: an emulated trainer on N ranks, global batch 8 sequences of T 32,
# 6 steps (-x), val every 3 (-v), checkpoint every 6 unless ARGS say otherwise (-n).
erun() {
    local n=$1 binary=$2 dir=$3; shift 3
    local cmd=(build/emu/"$binary" -e dev/reference/gpt2_ref_model.bin -t 32 -b $((8 / n)) -n 6
               -l 1e-3 -x 6 -v 3 -m 2 -s 0 -i "$ET/train.bin" -j "$ET/val.bin" -o "$dir" "$@")
    if [ "$n" -gt 1 ]; then cmd=("${MPIRUN[@]}" -np "$n" "${cmd[@]}"); fi
    timeout 600 "${cmd[@]}" >"$dir.out" 2>&1
}
# Tolerance: bf16 gradients reduced over 2 ranks (host-staged: fp32 sum of two bf16 halves, one
# rounding back to bf16) against one rank's bf16 gradient of the whole batch differ by about one
# bf16 rounding per element (2^-9 relative). Measured over these 6 steps at every stage: losses
# (~6.9) at most 1.9e-4 apart, grad norms 4.3e-4 relative (the INFO lines). Tolerance 2e-3 for
# both: 10x the measurement; a lost or doubled rank contribution moves the norm by far more.
TOL=2e-3
# The reference run also times steps 3-4 op family by op family (-ot 2): the per-kernel table's
# FLOPs and bytes (common/op_costs.h) must equal dev/op_table.py's, computed op by op on its own
# (its times mean nothing here). EMU_STRICT_EVENTS=1: an event the host has not seen complete
# answers cudaErrorNotReady to cudaEventElapsedTime, as on a GPU, so the op timer reading a mark
# it did not wait for (recorded after the step's done event) ends the run.
if EMU_STRICT_EVENTS=1 erun 1 train_gpt2cu_z0 "$ET/ref" -ot 2; then
    check emu_op_table_costs_match_dev_op_table python3 dev/op_table.py --L 2 --C 64 --NH 4 --Vp 1024 --maxT 64 --B 8 --T 32 \
        --check-log "$ET/ref.out"
    # NCCL (the default build; collectives through dev/emu/nccl_emu.h) at every stage, and the
    # host-staged MPI backend at stage 2.
    for binary in train_gpt2cu_z0 train_gpt2cu_z1 train_gpt2cu_z2 train_gpt2cu_z3 train_gpt2cu_mpi_z2; do
        stage=${binary: -1}
        name="emu_${binary}_np2"
        if ! erun 2 "$binary" "$ET/$binary"; then
            echo "FAIL ${name}_runs: $(grep -v -i tokenizer "$ET/$binary.out" | tail -3 | tr '\n' ' ')"; continue
        fi
        check "${name}_matches_np1_stage0" python3 tests/zero_logcheck.py losses "$ET/ref" "$ET/$binary" "$TOL" --kinds train,val --norm-rtol "$TOL"
        check "${name}_sent_elements_and_bytes_equal_formulas" python3 tests/zero_logcheck.py counts "$ET/$binary" "$stage"
        echo "INFO ${name}: $(python3 tests/zero_logcheck.py losses "$ET/ref" "$ET/$binary" "$TOL" --kinds train,val --norm-rtol "$TOL" 2>&1 | tail -1)"
    done
    # EMU_LAZY=1: kernels wait in their stream's queue until something orders after them, so a
    # collective issued without the comm stream waiting for its producer kernels reads stale
    # gradients or parameters (the other direction of a missing stream wait).
    for stage in 0 1 2 3; do
        name="emu_train_gpt2cu_z${stage}_np2_lazy_streams"
        if ! EMU_LAZY=1 erun 2 train_gpt2cu_z$stage "$ET/lazy$stage"; then
            echo "FAIL ${name}_runs: $(grep -v -i tokenizer "$ET/lazy$stage.out" | tail -3 | tr '\n' ' ')"; continue
        fi
        check "${name}_matches_np1_stage0" python3 tests/zero_logcheck.py losses "$ET/ref" "$ET/lazy$stage" "$TOL" --kinds train,val --norm-rtol "$TOL"
    done
else
    echo "FAIL emu_train_gpt2cu_z0_np1_runs: $(grep -v -i tokenizer "$ET/ref.out" | tail -3 | tr '\n' ' ')"
fi

# An NCCL error on one rank (EMU_NCCL_FAIL=1:3: rank 1's third collective fails, dev/emu/nccl_emu.h)
# while its peer waits in the matching collective: the failing rank prints one line naming itself,
# aborts the communicators and every rank, and the job ends within seconds. mpirun is told not to
# end the job when a rank exits non-zero (orte_abort_on_non_zero_status 0, Open MPI 4), as a
# launcher need not: a rank that only exits leaves its peer waiting (measured: still running
# after 120 s with -wt 40), the abort ends both in 2-3 s; 60 s allows for the emulation's
# slowness under load.
name=emu_train_gpt2cu_z1_np2_nccl_error
start=$SECONDS
EMU_NCCL_FAIL=1:3 timeout 120 "${MPIRUN[@]}" --mca orte_abort_on_non_zero_status 0 -np 2 build/emu/train_gpt2cu_z1 \
    -e dev/reference/gpt2_ref_model.bin -t 32 -b 4 -n 6 -l 1e-3 -x 6 -v 3 -m 2 -s 0 -wt 40 -i "$ET/train.bin" \
    -j "$ET/val.bin" -o "$ET/ncclerr" >"$ET/ncclerr.out" 2>&1; rc=$?
took=$((SECONDS - start))
lines=$(grep -c "^error: rank 1: NCCL call .*aborting the communicators and all ranks" "$ET/ncclerr.out")
if [ "$rc" -ne 0 ] && [ "$lines" -eq 1 ] && [ "$took" -lt 60 ]; then
    echo "PASS ${name}_ends_all_ranks_at_once: exit $rc after ${took} s, one line naming rank 1"
else
    echo "FAIL ${name}_ends_all_ranks_at_once: exit $rc after ${took} s, $lines lines 'error: rank 1: NCCL call ... aborting'; wanted non-zero, 1, under 60 s: $(grep -E 'error|emu:' "$ET/ncclerr.out" | head -3 | tr '\n' ' ')"
fi

# One GPU without MPI (zero/cluster/mpi_single.h, make NO_USE_MPI=1): the same 6 steps as the MPI/NCCL
# build's one-rank run, identically (at world size 1 no collective runs in either), and a launch
# of several tasks is one error line.
name=emu_train_gpt2cu_nompi_z0
if erun 1 train_gpt2cu_nompi_z0 "$ET/nompi"; then
    check "${name}_identical_to_nccl_build_np1" python3 tests/zero_logcheck.py same "$ET/ref" "$ET/nompi"
    check "${name}_says_no_mpi" grep -q "collectives none (one process, built without MPI)" "$ET/nompi.out"
else
    echo "FAIL ${name}_runs: $(grep -v -i tokenizer "$ET/nompi.out" | tail -3 | tr '\n' ' ')"
fi
check_fails "${name}_under_mpirun_is_one_error" "error: launcher: OMPI_COMM_WORLD_SIZE=2" \
    env OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 build/emu/train_gpt2cu_nompi_z0 -e dev/reference/gpt2_ref_model.bin \
    -t 32 -b 4 -x 1 -s 0 -v 0 -i "$ET/train.bin"

# Gradient accumulation: 2 micro-steps of B 2 per rank (-d 256 = the same 256-token global batch)
# at stages 2 and 3, where each micro-step's reduce-scatter output is added into the gradient
# shard on the comm stream, against the 1-rank reference. Measured: train losses within 2.0e-4,
# grad norms 1.0e-3 relative (each micro-step's slice is rounded to bf16 before it is added:
# one more rounding than without accumulation). Tolerance 5e-3: a lost or doubled micro-step
# moves the norm by tens of percent.
TOL_ACC=5e-3
for stage in 2 3; do
    name="emu_train_gpt2cu_z${stage}_np2_accum2"
    if ! erun 2 train_gpt2cu_z$stage "$ET/acc$stage" -b 2 -d 256; then
        echo "FAIL ${name}_runs: $(grep -v -i tokenizer "$ET/acc$stage.out" | tail -3 | tr '\n' ' ')"; continue
    fi
    # train only: val batches are per-rank B, so a smaller B evaluates other sequences
    check "${name}_matches_np1_stage0" python3 tests/zero_logcheck.py losses "$ET/ref" "$ET/acc$stage" "$TOL_ACC" --kinds train --norm-rtol "$TOL_ACC"
    check "${name}_sent_elements_and_bytes_equal_formulas" python3 tests/zero_logcheck.py counts "$ET/acc$stage" "$stage"
done

# The GPU build against the CPU build (fp32, build/train_gpt2_z<S>) on the same 2-rank runs
# (stage 0; stage 2 with 2 micro-steps): train losses, and the gradient noise scale meter's per-step
# |G_small|^2, |G_big|^2 and B_simple (zero/gpu/engine_gpu.cuh's local-norm kernel vs the CPU engine).
# Measured over the 6 steps: losses within 2.3e-4, squared norms within 0.4% relative, B_simple
# within 1.5% (a ratio of differences of the norms, so it moves more). Tolerances: losses 2e-3,
# squared norms 2%, B_simple 5%.
cpu_compare() {
    local name=$1 stage=$2 gpu_dir=$3; shift 3
    local out="$ET/cpu_$name" # one directory per comparison: the trainer refuses a -o holding a previous run
    if [ ! -f "$gpu_dir/log.jsonl" ] || ! timeout 600 "${MPIRUN[@]}" -np 2 build/train_gpt2_z"$stage" -e dev/reference/gpt2_ref_model.bin \
           -t 32 -b 4 -n 0 -l 1e-3 -x 6 -v 3 -m 2 -s 0 -i "$ET/train.bin" -j "$ET/val.bin" -o "$out" "$@" >"$out.out" 2>&1; then
        echo "FAIL $name: $( (grep -m1 '^error' "$out.out" || tail -3 "$out.out") 2>/dev/null | tr '\n' ' ')"; return
    fi
    check "$name" python3 - "$out" "$gpu_dir" <<'PY'
import json, sys
def train(d): return {r["step"]: r for r in map(json.loads, open(d + "/log.jsonl")) if r["kind"] == "train"}
cpu, gpu = train(sys.argv[1]), train(sys.argv[2])
rel = lambda a, b: abs(a - b) / max(abs(a), 1e-30)
worst = {"loss": 0.0, "gns_small_sq": 0.0, "gns_big_sq": 0.0, "b_simple": 0.0}
for step, c in cpu.items():
    g = gpu[step]
    worst["loss"] = max(worst["loss"], abs(c["loss"] - g["loss"]))
    for k in ("gns_small_sq", "gns_big_sq", "b_simple"):
        if c[k] is None and g[k] is None: continue  # B_simple undefined in both (the meter's first steps)
        worst[k] = max(worst[k], rel(c[k], g[k]) if c[k] is not None and g[k] is not None else float("inf"))
print(f"{len(cpu)} steps: " + ", ".join(f"{k} {v:.2e}" for k, v in worst.items()))
ok = len(cpu) == 6 and worst["loss"] <= 2e-3 and worst["gns_small_sq"] <= 0.02 and worst["gns_big_sq"] <= 0.02 and worst["b_simple"] <= 0.05
sys.exit(0 if ok else 1)
PY
}
cpu_compare emu_train_gpt2cu_np2_loss_and_gns_match_cpu_build 0 "$ET/train_gpt2cu_z0"
cpu_compare emu_train_gpt2cu_z2_np2_accum2_loss_and_gns_match_cpu_build 2 "$ET/acc2" -b 2 -d 256

# Resume (stage 3, NCCL, 2 ranks): 6 steps straight = 3 steps, checkpoint, stop, resume with -y 1.
name=emu_train_gpt2cu_z3_np2_resume
if erun 2 train_gpt2cu_z3 "$ET/straight" -n 3 && ZERO_TEST_FAULT=stop@3 erun 2 train_gpt2cu_z3 "$ET/split" -n 3 &&
   erun 2 train_gpt2cu_z3 "$ET/split" -n 3 -y 1; then
    check "${name}_same_losses" python3 tests/zero_logcheck.py same "$ET/straight" "$ET/split"
    check "${name}_bit_exact_model" cmp -i 1024 "$ET/straight/model_00000006.bin" "$ET/split/model_00000006.bin"
else
    echo "FAIL ${name}_runs: $(cat "$ET"/straight.out "$ET"/split.out 2>/dev/null | grep -v -i tokenizer | tail -3 | tr '\n' ' ')"
fi
# The batch schedule in the GPU trainer (train/batch_schedule_trainer.h, shared with the CPU
# build): -d auto on 2 emulated ranks at stage 2 grows the batch mid-run (128 -> 256 tokens after
# step 4, -> 384 after step 6: whole micro-steps, at most doubling, the decision agreed by both
# ranks from the meter's all-reduced norms), and the CPU build (fp32) given that batch sequence by
# hand (-ds) trains the same run: losses within the accumulation tolerance above (5e-3; measured
# 2.9e-4), squared norms within 2% (measured 0.40%), B_simple within 5% (measured 1.1%; undefined
# in both at steps 1-2). Bad schedule flags stop the GPU trainer with the CPU trainer's one error line.
name=emu_train_gpt2cu_z2_np2_batch_schedule
if erun 2 train_gpt2cu_z2 "$ET/auto" -b 2 -n 0 -d auto -dm 384 -df 1 -dw 2; then
    ds=$(python3 tests/batch_logcheck.py ds "$ET/auto")
    check "${name}_grows_mid_run" python3 tests/batch_logcheck.py grows "$ET/auto" 1 384 1e-3 128
    cpu_compare "${name}_matches_cpu_build_given_its_batches_by_hand" 2 "$ET/auto" -b 2 -ds "$ds"
else
    echo "FAIL ${name}_runs: $(grep -v -i tokenizer "$ET/auto.out" | tail -3 | tr '\n' ' ')"
fi
check_fails emu_train_gpt2cu_auto_with_meter_off "error: -d auto: the gradient noise scale meter is off (-gb -1)" \
    build/emu/train_gpt2cu_z0 -e dev/reference/gpt2_ref_model.bin -t 32 -b 2 -x 4 -s 0 -v 0 -i "$ET/train.bin" -d auto -dm 512 -gb -1
check_fails emu_train_gpt2cu_dm_not_multiple "error: -dm 200: not a multiple of B\*T\*ranks = 2\*32\*1 = 64" \
    build/emu/train_gpt2cu_z0 -e dev/reference/gpt2_ref_model.bin -t 32 -b 2 -x 4 -s 0 -v 0 -i "$ET/train.bin" -d auto -dm 200
