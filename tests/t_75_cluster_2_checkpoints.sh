#!/usr/bin/env bash
# Simulated cluster, group 2: checkpoints across hosts, 2 hosts x 2 ranks, on a shared -o (one
# directory every host sees) and on a node-local -o (the same path, each host its own disk:
# tests/cluster.sh's $CL_LOCAL).
#   - the uninterrupted trajectory: at every stage, 8 steps straight = 4 steps, checkpoint, stop
#     (ZERO_TEST_FAULT=stop@4), resume with -y 1 for 4 more: identical logged losses (%.9g) and
#     gradient noise scale fields, on a node-local -o at stages 0-3 and a shared -o at stages 1, 3
#   - the batch schedule's state travels in every rank's own state file: stage 2 runs a batch
#     given by hand (-ds 0:96,2:192,6:288: 96 tokens, then 192 from step 3, 288 from step 7), so the
#     checkpoint at 4 sits inside a changed batch; the resumed run's batch of each step, tokens
#     seen and lr equal the straight run's (zero_logcheck.py same)
#   - node-local: -o is created on every host; each host holds only its own ranks' state files,
#     the model file (and log) only rank 0's host
#   - rank 0 decides the step: node1 holding a later step than node0 (the issue's silent mix)
#     resumes at node0's step and continues the straight run's trajectory
#   - a missing state file on node1, a state file of another run, a damaged model file: one
#     error line naming rank, host and file, exit 1
#   - the model file's checksum sits in header slots llm.c leaves 0: header[0..7] and the file
#     size are exactly llm.c's fp32 format (read by an independent reader here)
source "$(dirname "$0")/cluster_common.sh"
cluster_setup 2 local

run4() { crun "$1.out" node0:2,node1:2 4 "$2" -b 3 -x 8 -n 4 -o "$1" "${@:3}"; } # run4 DIR STAGE ARGS
disk() { echo "$CL_DIR/disk_$1"; }                                                # the host's own disk
# fails_with NAME PATTERN DIR: run4 DIR 1 -y 1 exits 1 within 60 s and DIR.out has PATTERN (grep -E).
fails_with() {
    local name=$1 pattern=$2 dir=$3 start rc
    start=$(date +%s)
    run4 "$dir" 1 -y 1; rc=$?
    if [ "$rc" -ne 0 ] && [ "$(took_since "$start")" -le 60 ] && grep -qE -- "$pattern" "$dir.out" && [ "$(grep -c '^error' "$dir.out")" -eq 1 ]; then
        echo "PASS $name"
    else
        echo "FAIL $name: exit $rc after $(took_since "$start") s; $(grep -v tokenizer "$dir.out" | grep -m2 -E 'error|warning' | tr '\n' ' ')"
    fi
}
for stage in 0 1 2 3; do
    name="cluster_zero${stage}_2hosts_x2"
    sched=()
    [ "$stage" -eq 2 ] && sched=(-ds 0:96,2:192,6:288) && name="${name}_batch_schedule"
    if ! run4 "$CT/straight$stage" "$stage" "${sched[@]}"; then
        echo "FAIL ${name}_straight_run: $(grep -v tokenizer "$CT/straight$stage.out" | tail -3 | tr '\n' ' ')"; continue
    fi
    kinds=(local)
    [ "$stage" -eq 1 ] || [ "$stage" -eq 3 ] && kinds+=(shared)
    for kind in "${kinds[@]}"; do
        if [ "$kind" = local ]; then dir="$CL_LOCAL/split$stage"; log_dir="$(disk node0)/split$stage"
        else dir="$CT/split$stage"; log_dir="$dir"; fi
        if ! ZERO_TEST_FAULT=stop@4 run4 "$dir" "$stage" "${sched[@]}"; then
            echo "FAIL ${name}_${kind}_dir_first_half: $(grep -v tokenizer "$dir.out" | tail -3 | tr '\n' ' ')"; continue
        fi
        if [ "$kind" = local ]; then
            d0=$(disk node0)/split$stage d1=$(disk node1)/split$stage
            if [ -f "$d0/model_00000004.bin" ] && [ -f "$d0/state_00000004_r0_of_4.bin" ] && [ -f "$d0/state_00000004_r1_of_4.bin" ] &&
               [ -f "$d1/state_00000004_r2_of_4.bin" ] && [ -f "$d1/state_00000004_r3_of_4.bin" ] && [ ! -e "$d1/model_00000004.bin" ] &&
               [ ! -e "$d0/state_00000004_r2_of_4.bin" ] && [ ! -e "$d1/state_00000004_r0_of_4.bin" ]; then
                echo "PASS ${name}_local_dir_each_host_writes_its_own_ranks_state"
            else
                echo "FAIL ${name}_local_dir_each_host_writes_its_own_ranks_state: node0 has $(ls "$d0" | tr '\n' ' '); node1 has $(ls "$d1" 2>/dev/null | tr '\n' ' ')"
            fi
        fi
        if ! run4 "$dir" "$stage" -y 1 "${sched[@]}"; then
            echo "FAIL ${name}_${kind}_dir_resume: $(grep -v tokenizer "$dir.out" | tail -3 | tr '\n' ' ')"; continue
        fi
        grep -q "resume: from step 4" "$dir.out" || echo "FAIL ${name}_${kind}_dir_says_resumed: no 'resume: from step 4' line"
        check "${name}_${kind}_dir_resume_continues_the_trajectory" python3 tests/zero_logcheck.py same "$CT/straight$stage" "$log_dir"
        echo "INFO ${name}_${kind}: $(python3 tests/zero_logcheck.py same "$CT/straight$stage" "$log_dir")"
        if [ "${#sched[@]}" -gt 0 ]; then
            check "${name}_${kind}_dir_batch_grew_across_the_checkpoint" python3 -c "
import json, sys
b = {r['step']: r['batch_tokens'] for r in map(json.loads, open('$log_dir/log.jsonl')) if r['kind'] == 'train'}
sys.exit(0 if (b[4], b[5], b[7]) == (192, 192, 288) else 1)"
        fi
    done
done

# Stage 1, node-local: one straight run with checkpoints at 4 and 8, copied per case.
if run4 "$CL_LOCAL/ck" 1; then
    case_dir() { # case_dir NAME: a copy of the node-local checkpoint dir on both disks
        for host in node0 node1; do rm -rf "$(disk $host)/$1"; cp -r "$(disk $host)/ck" "$(disk $host)/$1"; done
    }
    # node1 keeps step 8, node0 only has step 4 (its step-8 files gone): rank 0's step 4 wins.
    case_dir mixed
    rm "$(disk node0)"/mixed/*_00000008*
    if run4 "$CL_LOCAL/mixed" 1 -y 1; then
        check cluster_local_dirs_with_different_steps_resume_at_rank0s_step \
            python3 tests/zero_logcheck.py same "$CT/straight1" "$(disk node0)/mixed" --from-step 5
    else echo "FAIL cluster_local_dirs_with_different_steps_resume_at_rank0s_step: $(grep '^error' "$CL_LOCAL/mixed.out" | head -2 | tr '\n' ' ')"; fi
    case_dir missing
    rm "$(disk node1)/missing/state_00000008_r3_of_4.bin"
    fails_with cluster_resume_missing_state_on_node1_named_in_one_line \
        "^error: rank 3 \(node1\): $CL_LOCAL/missing/state_00000008_r3_of_4.bin: missing state file; expected this rank's state for step 8" \
        "$CL_LOCAL/missing"
    case_dir foreign
    cp "$(disk node1)/split1/state_00000004_r2_of_4.bin" "$(disk node1)/foreign/state_00000008_r2_of_4.bin"
    python3 - "$(disk node1)/foreign/state_00000008_r2_of_4.bin" <<'PY'
import struct, sys  # a state file of another run at the same step: set its step field to 8
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[5 * 8:6 * 8] = struct.pack("<q", 8)
open(p, "wb").write(b)
PY
    fails_with cluster_resume_state_of_another_run_named_in_one_line \
        "^error: rank 2 \(node1\): $CL_LOCAL/foreign/state_00000008_r2_of_4.bin: written by run [0-9a-f]+, but model_00000008.bin \(rank 0, node0\) by run" \
        "$CL_LOCAL/foreign"
    case_dir damaged
    printf 'X' | dd of="$(disk node0)/damaged/model_00000008.bin" bs=1 seek=500000 conv=notrunc status=none
    fails_with cluster_resume_damaged_model_file_named_in_one_line \
        "^error: $CL_LOCAL/damaged/model_00000008.bin: checksum mismatch" "$CL_LOCAL/damaged"
    # llm.c's reader: header[0..7] (magic, version 3, maxT, V, L, NH, C, Vp) and then exactly the
    # parameters; our slots 8..13 (marker, checksum, run id, step) sit in what llm.c leaves 0.
    check cluster_model_file_is_llmc_format_with_checksum_in_unused_slots python3 - "$(disk node0)/ck/model_00000008.bin" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
h = struct.unpack("<256i", data[:1024])
magic, version, maxT, V, L, NH, C, Vp = h[:8]
n = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C  # GPT-2's parameter count (llm.c's fill_in_parameter_sizes)
ok = magic == 20240326 and version == 3 and len(data) == 1024 + 4 * n and h[8] == 0x7a65726f and h[13] == 8 and not any(h[14:])
words = struct.unpack(f"<{n}I", data[1024:])
fnv = 0xCBF29CE484222325
for w in words:
    fnv = ((fnv ^ w) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
ok = ok and fnv == (h[9] & 0xFFFFFFFF) | (h[10] & 0xFFFFFFFF) << 32
print(f"magic {magic} version {version} L {L} C {C} Vp {Vp}: {len(data)} bytes for {n} parameters; checksum slot {'matches' if ok else 'differs'}")
sys.exit(0 if ok else 1)
PY
else
    echo "FAIL cluster_local_checkpoint_source_run: $(grep -v tokenizer "$CL_LOCAL/ck.out" | tail -3 | tr '\n' ' ')"
fi
