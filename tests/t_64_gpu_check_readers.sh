#!/usr/bin/env bash
# dev/gpu_check.sh's readers of what the trainer and test_gpt2cu print (read_d12, op_table,
# read_offload, read_reference, loss_norm_pairs, multi_compare), run on the logs of the emulated
# binaries (dev/emu), which print what the GPU build prints: a reworded `done:` line, step line,
# `device memory:` line, per-kernel table or test_gpt2cu line fails here, in CI, instead of
# leaving a blank in the one GPU run a session gets. Small runs of the reference model (d2-sized,
# V = 1000) stand in for the d12 runs; the numbers are not checked, only that each is read.
# About 40 s on 2 cores once the emulated binaries are built (scripts/test.sh builds them).
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.." || exit 1
cuda_headers gpu_check_readers "gpu_check's readers on the emulation's output" || exit 0
GT=$(mktemp -d /tmp/t64_gpu_check.XXXXXX)
trap 'rm -rf "$GT"' EXIT
if ! make -s -j2 build/emu/train_gpt2cu_nompi_z0 build/emu/train_gpt2cu_z2 build/emu/test_gpt2cu_z0 >"$GT/make.out" 2>&1; then
    echo "FAIL gpu_check_readers_emu_build: $(grep -m3 error "$GT/make.out" | tr '\n' ' ')"; exit 1
fi
GPU_CHECK_LIB=1
source dev/gpu_check.sh # defines the readers and returns
python3 tests/markov_shards.py "$GT" 1000 20000 4000 7 >/dev/null
export OMP_NUM_THREADS=1
ARGS=(-e dev/reference/gpt2_ref_model.bin -i "$GT/train.bin" -j "$GT/val.bin" -b 2 -t 32 -v 0 -s 0 -l 6e-4 -u 10)
number() { [[ "$1" =~ ^[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?%?$ ]]; }

# Section 4 (and 5): the timed run with the per-kernel table, 12 steps as there.
timeout 300 build/emu/train_gpt2cu_nompi_z0 "${ARGS[@]}" -x 12 -ot 4 >"$GT/d12.log" 2>&1
d12_read() {
    read_d12 "$GT/d12.log" flash
    local f
    for f in "step_ms ${step_ms[flash]:-}" "tok_s ${tok_s[flash]:-}" "mfu ${mfu[flash]:-}" "peak ${peak[flash]:-}" \
             "expect_mib ${expect_mib[flash]:-}" "loss_at ${loss_at[flash]:-}"; do
        number "${f#* }" || { echo "$f: not read from $(grep -m1 '^done:' "$GT/d12.log")"; return 1; }
    done
}
check "gpu_check_reads_the_timed_runs_done_memory_and_step_12_lines" d12_read
# The table: its header, a row per op family (13 timed, 2 fused) and the sum line.
table_read() { local n; n=$(op_table "$GT/d12.log" | wc -l); [ "$n" -ge 16 ] || { echo "$n lines"; return 1; }; op_table "$GT/d12.log" | tail -1 | grep -q '^sum of the rows'; }
check "gpu_check_reads_the_per_kernel_table" table_read

# Section 9: the offload run's done: line and the host<->device line, -zo cpu at stage 2.
timeout 300 build/emu/train_gpt2cu_z2 "${ARGS[@]}" -x 3 -zo cpu >"$GT/zo.log" 2>&1
offload_read() {
    read_offload "$GT/zo.log" zo_cpu
    number "${off_ms[zo_cpu]:-}" && number "${off_peak[zo_cpu]:-}" && grep -q '^offload: host' "$GT/zo.log" ||
        { echo "ms '${off_ms[zo_cpu]:-}', peak '${off_peak[zo_cpu]:-}': $(grep -m1 '^done:' "$GT/zo.log")"; return 1; }
}
check "gpu_check_reads_the_offload_runs_lines" offload_read

# Sections 8, 10, 11: step lines as "loss norm" pairs, and the comparison of two runs.
pairs_read() {
    local n; n=$(loss_norm_pairs "$GT/d12.log" | awk 'NF == 2 && $1 + 0 > 0 && $2 + 0 > 0' | wc -l)
    [ "$n" -eq 12 ] || { echo "$n of 12 step lines read: $(loss_norm_pairs "$GT/d12.log" | head -2 | tr '\n' ' ')"; return 1; }
}
check "gpu_check_reads_loss_and_norm_of_every_step_line" pairs_read
head -n 200 "$GT/d12.log" | grep -v -E '^step +([6-9]|1[0-2])/' >"$GT/d12_5.log" # the first 5 steps
compare_read() {
    multi_compare "$GT/d12_5.log" "$GT/d12_5.log" 0 || return 1 # a run against itself: 0 over 5 steps
    sed -E '0,/^step +3\//s/\| loss ([0-9]+)\.([0-9])/| loss \1.9/' "$GT/d12_5.log" >"$GT/d12_5_moved.log"
    ! multi_compare "$GT/d12_5.log" "$GT/d12_5_moved.log" 1e-3 >/dev/null # a moved loss is seen
}
check "gpu_check_compares_two_runs_step_lines" compare_read

# Sections 3, 6: test_gpt2cu's errors against the PyTorch reference.
timeout 300 build/emu/test_gpt2cu_z0 >"$GT/reference.log" 2>&1
reference_read() {
    read_reference "$GT/reference.log" 0
    number "${logits_err[0]:-}" && number "${grads_l2[0]:-}" && number "${accum_err[0]:-}" ||
        { echo "logits '${logits_err[0]:-}', grads '${grads_l2[0]:-}', accumulation '${accum_err[0]:-}'"; return 1; }
}
check "gpu_check_reads_test_gpt2cu_errors" reference_read
