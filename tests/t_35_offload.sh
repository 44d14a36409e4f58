#!/usr/bin/env bash
# ZeRO-Offload / ZeRO-Infinity in the CPU build (zero/offload/offload.h, zero/offload/nvme_io.h, cpu/adamw.h).
#   - the I/O engine's unit tests (build/test_nvme_io: both backends, short reads, errors, a real
#     ENOSPC on a tmpfs it mounts) and the vectorized AdamW against the scalar one (per path)
#   - stages 1-3 x N = 1, 2: -zo nvme (and at stage 3 -zo nvme -zp nvme) trains bit-identically
#     to the in-memory run: the same logged losses and noise-scale fields, byte-identical model
#     and state files but for the run id each run stamps in them (cmp_run_files; the optimizer
#     does the same float operations on the same numbers, only where they rest between steps
#     differs); RAM/NVMe bytes and each step's NVMe bytes equal the formulas
#     (tests/zero_logcheck.py offload); streamed in small pieces (ZERO_TEST_OFFLOAD_PIECE); the
#     planner's offload row (--plan with the same flags, plan/plan_offload.h) has each run's counted
#     bytes exactly: RAM, NVMe state and file, staging, working units, NVMe read/written per step
#     (also at 2 micro-steps, stage 3 -zo nvme -zp nvme) (tests/trace_check.py offload_plan)
#   - checkpoints resume across placements: saved under -zo nvme -zp nvme, resumed in memory, and
#     saved in memory, resumed under -zo nvme: bit-identical to the straight run
#   - bad input: -zp below stage 3, -zo at stage 0, nvme without -zd, -zd missing, a file,
#     read-only or full at start-up; the disk failing mid-run (ZERO_TEST_NVME_FAULT): one error
#     line, exit 1, the last checkpoint intact and resumable; the offload file changed under the
#     running job: detected by its checksum, exit 1; after both, no offload file is left
#   - d12 (124M) with -zo nvme -zp nvme trains under a cgroup memory limit below its Adam state
#     (8Ψ = 996 MB), where the in-memory run is killed
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/zero_common.sh"
zero_setup
make -s build/test_nvme_io build/test_adamw || { echo "FAIL offload_unit_tests_build"; exit 1; }
MNT=()
CG=""
cleanup() {
    for m in "${MNT[@]}"; do umount -l "$m" 2>/dev/null; done
    if [ -n "$CG" ] && [ -d "$CG" ]; then
        while read -r p; do echo "$p" > /sys/fs/cgroup/memory/tasks; done < "$CG/tasks"
        for _ in $(seq 20); do rmdir "$CG" 2>/dev/null && break; sleep 0.5; done # a killed task takes a moment to leave
    fi
    rm -rf "$ZT"
}
trap cleanup EXIT
NV="$ZT/nvme"; mkdir -p "$NV"

mkdir -p "$ZT/io" && build/test_nvme_io "$ZT/io"
for path in scalar avx2 avx512; do ADAMW_PATH=$path OMP_NUM_THREADS=2 build/test_adamw; done

# 6 steps of d2, checkpoints at 3 and 6.
X=(-x 6 -n 3)
for stage in 1 2 3; do
    for n in 1 2; do
        b=$((12 / n)); ref="$ZT/mem_z${stage}_np$n"
        zrun "$n" "$stage" "$ref" -b "$b" "${X[@]}" || { echo "FAIL offload_reference_z${stage}_np${n}: $(tail -2 "$ref.out" | tr '\n' ' ')"; continue; }
        placements=("-zo nvme"); [ "$stage" -eq 3 ] && placements+=("-zo nvme -zp nvme")
        for p in "${placements[@]}"; do
            tag=$(echo "$p" | tr -d ' -'); run="$ZT/${tag}_z${stage}_np$n"; name="zero${stage}_np${n}_${tag// /}"
            # Pieces of 15360 elements (60 KiB of fp32): d2's units stream in up to 13 pieces, the
            # last one partial, pieces cut across tensors, as d12's 7M-element units do by default.
            # shellcheck disable=SC2086
            if ! ZERO_TEST_OFFLOAD_PIECE=15360 zrun "$n" "$stage" "$run" -b "$b" "${X[@]}" $p -zd "$NV"; then echo "FAIL ${name}_runs: $(grep error "$run.out" | head -2 | tr '\n' ' ')"; continue; fi
            same=1; for f in model_00000003.bin model_00000006.bin state_00000006_r0_of_$n.bin; do cmp_run_files "$ref/$f" "$run/$f" >/dev/null 2>&1 || same=0; done
            check "${name}_bit_identical_to_in_memory" bash -c "[ $same -eq 1 ] && python3 tests/zero_logcheck.py same '$ref' '$run'"
            check "${name}_ram_nvme_bytes_equal_formulas" zcheck offload "$run" "$stage"
            # The planner's offload row (plan/plan_offload.h) for this model, batch, world and placement.
            # shellcheck disable=SC2086
            ZERO_TEST_OFFLOAD_PIECE=15360 build/train_gpt2_z0 --plan h100,gpu_build=0 -pj - -e d2 -t 8 -b "$b" -np "$n" $p >"$run.plan" 2>&1
            check "${name}_plan_offload_bytes_equal_engine" python3 tests/trace_check.py offload_plan "$run.plan" "$run"
        done
    done
done
# With 2 micro-steps (-zp nvme reads each shard 2A times, 3A for wte's units): 1 rank, 2 steps.
if ZERO_TEST_OFFLOAD_PIECE=15360 zrun 1 3 "$ZT/accum_z3" -b 6 -d 96 -x 2 -n 0 -v 0 -zo nvme -zp nvme -zd "$NV"; then
    ZERO_TEST_OFFLOAD_PIECE=15360 build/train_gpt2_z0 --plan h100,gpu_build=0 -pj - -e d2 -t 8 -b 6 -d 96 -np 1 -zo nvme -zp nvme >"$ZT/accum_z3.plan" 2>&1
    check zero3_np1_accum2_zonvmezpnvme_plan_offload_bytes_equal_engine python3 tests/trace_check.py offload_plan "$ZT/accum_z3.plan" "$ZT/accum_z3"
else echo "FAIL zero3_np1_accum2_zonvmezpnvme_runs: $(grep error "$ZT/accum_z3.out" | head -2 | tr '\n' ' ')"; fi
ls "$NV" | grep -q . && echo "FAIL offload_files_removed_at_exit: $(ls "$NV" | head -3 | tr '\n' ' ')"
# cmp_run_files (tests/lib.sh) skips the run id at fixed offsets: the same random, non-zero 8
# bytes in the model file's header and in the state file's, or those offsets are not the run id.
m6="$ZT/mem_z2_np2/model_00000006.bin"
check checkpoint_run_id_offsets_of_cmp_run_files bash -c "cmp -n 8 -i 44:224 '$m6' '$ZT/mem_z2_np2/state_00000006_r0_of_2.bin' && \
    [ \"\$(od -An -tx1 -j 44 -N 8 '$m6' | tr -d ' \n')\" != 0000000000000000 ]"

# Resume across placements (the same checkpoint files whatever the placement).
if ZERO_TEST_FAULT=stop@3 zrun 2 3 "$ZT/cross3" -b 6 "${X[@]}" -zo nvme -zp nvme -zd "$NV" && zrun 2 3 "$ZT/cross3" -b 6 "${X[@]}" -y 1; then
    check zero3_np2_saved_on_nvme_resumes_in_memory bash -c "source tests/lib.sh && cmp_run_files '$ZT/mem_z3_np2/model_00000006.bin' '$ZT/cross3/model_00000006.bin' && python3 tests/zero_logcheck.py same '$ZT/mem_z3_np2' '$ZT/cross3'"
else echo "FAIL zero3_np2_saved_on_nvme_resumes_in_memory: $(grep error "$ZT/cross3.out" | head -2 | tr '\n' ' ')"; fi
if ZERO_TEST_FAULT=stop@3 zrun 2 2 "$ZT/cross2" -b 6 "${X[@]}" && zrun 2 2 "$ZT/cross2" -b 6 "${X[@]}" -y 1 -zo nvme -zd "$NV"; then
    check zero2_np2_saved_in_memory_resumes_on_nvme bash -c "source tests/lib.sh && cmp_run_files '$ZT/mem_z2_np2/model_00000006.bin' '$ZT/cross2/model_00000006.bin' && python3 tests/zero_logcheck.py same '$ZT/mem_z2_np2' '$ZT/cross2'"
else echo "FAIL zero2_np2_saved_in_memory_resumes_on_nvme: $(grep error "$ZT/cross2.out" | head -2 | tr '\n' ' ')"; fi

# Bad input: one error line, exit 1.
bad() { build/train_gpt2_z"$1" -e d2 -t 8 -b 2 -x 2 -v 0 -s 0 -i "$ZT/train.bin" "${@:2}"; }
check_fails offload_zp_below_stage3 "error: -zp nvme: the parameter shard exists at ZeRO stage 3 only; expected -zp none at stage 2" bad 2 -zp nvme -zd "$NV"
check_fails offload_zp_cpu_below_stage3 "error: -zp cpu: the parameter shard exists at ZeRO stage 3 only" bad 1 -zp cpu
check_fails offload_zo_at_stage0 "error: -zo nvme: ZeRO stage 0 replicates the optimizer state" bad 0 -zo nvme -zd "$NV"
check_fails offload_nvme_without_dir "error: -zo nvme: the offload files need a directory; expected -zd DIR" bad 2 -zo nvme
check_fails offload_unknown_placement "error: -zo disk: unknown placement; expected none, cpu or nvme" bad 2 -zo disk
check_fails offload_dir_without_nvme "error: -zd $NV: nothing is placed on NVMe" bad 2 -zd "$NV"
check_fails offload_dir_missing "error: -zd $ZT/none (rank [0-9]* on [^)]*): No such file or directory; expected an existing, writable directory" bad 2 -zo nvme -zd "$ZT/none"
touch "$ZT/afile"
check_fails offload_dir_is_a_file "error: -zd $ZT/afile (rank [0-9]* on [^)]*): not a directory" bad 2 -zo nvme -zd "$ZT/afile"
mkdir -p "$ZT/ro" "$ZT/tiny"
if mount -t tmpfs -o ro,size=1m tmpfs "$ZT/ro" 2>/dev/null && MNT+=("$ZT/ro") && mount -t tmpfs -o size=1m tmpfs "$ZT/tiny" && MNT+=("$ZT/tiny"); then
    check_fails offload_dir_read_only "error: -zd $ZT/ro (rank [0-9]* on [^)]*): cannot create the offload file .*Read-only file system" bad 2 -zo nvme -zd "$ZT/ro"
    check_fails offload_np2_dir_full_at_start "error: -zd $ZT/tiny (rank [0-9]* on [^)]*): cannot reserve [0-9]* bytes for this rank's offload file (No space left on device; [0-9]* bytes free)" \
        timeout 120 "${MPIRUN[@]}" -np 2 build/train_gpt2_z2 -e d2 -t 8 -b 2 -x 2 -v 0 -s 0 -i "$ZT/train.bin" -zo nvme -zd "$ZT/tiny"
    [ -z "$(ls "$ZT/tiny")" ] || echo "FAIL offload_full_dir_left_clean: $(ls "$ZT/tiny")"
else
    echo "SKIP offload_dir_read_only: cannot mount a tmpfs here"; echo "SKIP offload_np2_dir_full_at_start: cannot mount a tmpfs here"
fi

# The disk fills up mid-run: writes fail once 3.5 steps' worth is written (each step writes the
# whole file once), i.e. in step 4, after the checkpoint of step 2.
fb=$(python3 -c "import json; print(next(json.loads(l) for l in open('$ZT/zonvme_z2_np2/log.jsonl') if '\"config\"' in l)['nvme_written_per_step'])")
ZERO_TEST_NVME_FAULT=enospc@$((fb * 7 / 2)) zrun 2 2 "$ZT/full" -b 6 -x 6 -n 2 -zo nvme -zd "$NV"; rc=$?
if [ "$rc" -ne 0 ] && grep -q "^error: -zd $NV (rank [0-9]* on [^)]*): writing .*failed: No space left on device; expected .*the last checkpoint in -o is intact" "$ZT/full.out" \
    && [ -e "$ZT/full/model_00000002.bin" ] && [ ! -e "$ZT/full/model_00000004.bin" ] && ! ls "$ZT/full" | grep -q tmp; then
    echo "PASS offload_disk_full_mid_run_one_error_line"
    # ... and the checkpoint of step 2 resumes (in memory) onto the straight run's trajectory.
    zrun 2 2 "$ZT/full" -b 6 -x 6 -n 3 -y 1 && check offload_disk_full_mid_run_last_checkpoint_intact \
        bash -c "source tests/lib.sh && cmp_run_files '$ZT/mem_z2_np2/model_00000006.bin' '$ZT/full/model_00000006.bin' && python3 tests/zero_logcheck.py same '$ZT/mem_z2_np2' '$ZT/full' --from-step 3" \
        || echo "FAIL offload_disk_full_mid_run_last_checkpoint_intact: $(grep error "$ZT/full.out" | head -1)"
else echo "FAIL offload_disk_full_mid_run_one_error_line: exit $rc; $(grep -E '^error' "$ZT/full.out" | head -1)"; fi

# Someone writes into the offload file while the job runs: the next read's checksum stops it.
mkdir -p "$ZT/nv2"
build/train_gpt2_z2 -e d2 -t 8 -b 12 -x 500 -v 0 -s 0 -i "$ZT/train.bin" -zo nvme -zd "$ZT/nv2" >"$ZT/changed.out" 2>&1 &
pid=$!
# Until step 2 (the offload file is written by then), as long as start-up takes; the run is bounded below.
while ! grep -q "^step     2/" "$ZT/changed.out" && kill -0 $pid 2>/dev/null; do sleep 0.1; done
f=$(ls "$ZT"/nv2/zero_offload_* 2>/dev/null | head -1)
[ -n "$f" ] && dd if=/dev/urandom of="$f" bs=1M count=$(( $(stat -c %s "$f") / 1048576 )) conv=notrunc status=none
for _ in $(seq 600); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
kill $pid 2>/dev/null; wait $pid; rc=$?
if [ "$rc" -eq 1 ] && grep -q "^error: -zd $ZT/nv2 (rank [0-9]* on [^)]*): the offload file .* changed under the running job: .* reads back with checksum [0-9a-f]*; expected [0-9a-f]*, what this job wrote" "$ZT/changed.out"; then
    echo "PASS offload_file_changed_under_running_job_detected"
else echo "FAIL offload_file_changed_under_running_job_detected: exit $rc; $(grep -E '^error|^step' "$ZT/changed.out" | tail -1)"; fi
# Both jobs above ended under their ranks (one rank's abort, the launcher's SIGTERM to the other;
# a singleton's abort): no offload file is left behind (zero/cluster/faults.h removes it).
left=$(find "$NV" "$ZT/nv2" -type f 2>/dev/null)
if [ -z "$left" ]; then echo "PASS offload_files_removed_when_the_job_ends_under_it"
else echo "FAIL offload_files_removed_when_the_job_ends_under_it: $(echo "$left" | head -3 | tr '\n' ' ')"; fi

# d12 under a memory limit below its Adam state: 8Ψ = 996 MB does not fit in 900 MiB, the run with
# Adam state and parameter shard on NVMe (RAM: 4Ψ of gradients, working units, staging) does.
CGROOT=/sys/fs/cgroup/memory
if [ -w "$CGROOT" ] && mkdir "$CGROOT/t35_offload_$$" 2>/dev/null; then
    CG="$CGROOT/t35_offload_$$"
    echo $((900 * 1048576)) > "$CG/memory.limit_in_bytes"
    incg=(bash -c 'echo $$ > "$0/tasks" && exec "$@"' "$CG") # run the command inside the cgroup
    d12=(build/train_gpt2_z3 -e d12 -t 8 -b 1 -x 1 -v 0 -s 0 -i "$ZT/train.bin") # one full step: forward, backward, AdamW
    OMP_NUM_THREADS=2 timeout 300 "${incg[@]}" "${d12[@]}" >"$ZT/cg_mem.out" 2>&1; rc_mem=$?
    echo 0 > "$CG/memory.max_usage_in_bytes" 2>/dev/null
    OMP_NUM_THREADS=2 timeout 300 "${incg[@]}" "${d12[@]}" -zo nvme -zp nvme -zd "$NV" >"$ZT/cg_nvme.out" 2>&1; rc_nvme=$?
    peak=$(( $(cat "$CG/memory.max_usage_in_bytes") / 1048576 ))
    if [ "$rc_mem" -ne 0 ] && [ "$rc_nvme" -eq 0 ] && grep -q "^done: 1 steps" "$ZT/cg_nvme.out"; then
        echo "PASS offload_d12_trains_under_memory_limit_below_its_adam_state: in memory exit $rc_mem (killed), -zo nvme -zp nvme done, cgroup peak $peak MiB of 900"
    else echo "FAIL offload_d12_trains_under_memory_limit_below_its_adam_state: in memory exit $rc_mem, nvme exit $rc_nvme, peak $peak MiB; $(tail -1 "$ZT/cg_nvme.out")"; fi
else
    echo "SKIP offload_d12_trains_under_memory_limit_below_its_adam_state: no writable cgroup v1 memory controller here"
fi
