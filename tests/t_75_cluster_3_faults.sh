#!/usr/bin/env bash
# Simulated cluster, group 3: ranks that disagree, ranks that never come, hosts that vanish, runs
# that collide. 2 hosts x 2 ranks unless said otherwise. Every case must end with non-zero exit
# of mpirun within -wt + 30 s, with the diagnosis named below, and leave no process behind in the
# cluster (Open MPI's daemons included).
#   - the start-up handshake: another flag (-b) on node1's ranks (MPMD), another build (stage 3
#     binary on node1, stage 1 on node0), data missing on node1: one line naming the first
#     differing rank, its host and the field
#   - a rank that never arrives (stalls before the handshake): named by rank 0 within -wt
#   - node1's cable pulled mid-run (with the keepalive options): mpirun returns, each node0 rank
#     says what it was doing; node1's daemon and ranks end too
#   - a rank stalled mid-run on node1: the others' -wt diagnoses; a rank crashing on node1
#   - one output dir, one run: a second run into a -o in use is refused (shared -o: rank 0's lock;
#     node-local -o, the second run only on node1: node1's host lock); the lock of a killed run is
#     taken over with a note
#   - a launcher that starts 2 tasks MPI sees as one each (srun without PMI): one error line
#   - without the keepalive options the trainer says that a partition would hang mpirun
source "$(dirname "$0")/cluster_common.sh"
cluster_setup 2 local


WT=5
# ends_within NAME LIMIT OUT PATTERN... : the last command exited non-zero ($rc, not 124 = the
# test's own timeout) within LIMIT s of $start, OUT has every PATTERN (grep -E), and nothing
# but the hosts' holders is left in the cluster (after a few seconds' grace for daemons).
ends_within() {
    local name=$1 limit=$2 out=$3; shift 3
    local took missing="" pattern left waited=0
    took=$(took_since "$start")
    for pattern in "$@"; do grep -qE -- "$pattern" "$out" || missing="$missing '$pattern'"; done
    left=$([ -z "${KEEP_OTHERS:-}" ] && cluster_leftovers)
    while [ -n "$left" ] && [ $waited -lt 15 ]; do sleep 1; waited=$((waited + 1)); left=$(cluster_leftovers); done
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$took" -le "$limit" ] && [ -z "$missing" ] && [ -z "$left" ]; then
        echo "PASS $name"; echo "INFO $name: ended after $took s (limit $limit)"
    else
        echo "FAIL $name: exit $rc after $took s (limit $limit); missing:${missing:- none}; left: ${left:-none}; $(grep -m2 '^error' "$out" | tr '\n' ' ')"
        for pid in $(cluster_leftovers | cut -d' ' -f1); do kill -KILL "$pid" 2>/dev/null; done
    fi
}
mpmd() { # mpmd OUT ARGS...: node0's two ranks and node1's two, each group its own command line
    cl_launch "$1" cluster_exec node0 timeout -k 5 300 "${CL_MPIRUN[@]}" "${KEEPALIVE[@]}" -x OMP_NUM_THREADS -x ZERO_TEST_FAULT="${ZERO_TEST_FAULT:-}" \
        -H node0:2,node1:2 "${@:2}"
}
one_line() { [ "$(grep -c '^error' "$1")" -eq 1 ]; }

# ---- the handshake ----
start=$(date +%s)
mpmd "$CT/flag.out" -np 2 "$BIN/train_gpt2_z1" "${CLUSTER_TEST_ARGS[@]}" -i "$CT/train.bin" -b 3 -x 2 -wt $WT \
                  : -np 2 "$BIN/train_gpt2_z1" "${CLUSTER_TEST_ARGS[@]}" -i "$CT/train.bin" -b 4 -x 2 -wt $WT; rc=$?
ends_within cluster_handshake_other_flag_on_node1_names_rank_host_field $((WT + 30)) "$CT/flag.out" \
    "^error: rank 2 \(node1\): -b is '4' there but '3' on rank 0 \(node0\); expected every rank to run the same build"
one_line "$CT/flag.out" || echo "FAIL cluster_handshake_other_flag_one_line: $(grep -c '^error' "$CT/flag.out") error lines"
start=$(date +%s)
mpmd "$CT/build.out" -np 2 "$BIN/train_gpt2_z1" "${CLUSTER_TEST_ARGS[@]}" -i "$CT/train.bin" -b 3 -x 2 -wt $WT \
                   : -np 2 "$BIN/train_gpt2_z3" "${CLUSTER_TEST_ARGS[@]}" -i "$CT/train.bin" -b 3 -x 2 -wt $WT; rc=$?
ends_within cluster_handshake_other_build_on_node1_names_rank_host_field $((WT + 30)) "$CT/build.out" \
    "^error: rank 2 \(node1\): ZeRO stage is '3' there but '1' on rank 0 \(node0\)"
# Data at a node-local path that only node0 has: node1's ranks find no shard.
cp "$CT/train.bin" "$CL_DIR/disk_node0/train.bin"
start=$(date +%s)
crun "$CT/data.out" node0:2,node1:2 4 1 -b 3 -x 2 -wt $WT -i "$CL_LOCAL/train.bin"; rc=$?
ends_within cluster_handshake_data_missing_on_node1_names_rank_host_field $((WT + 30)) "$CT/data.out" \
    "^error: rank 2 \(node1\): train data \(-i\) is '0 files, 0 bytes .*' there but '1 file, [0-9]+ bytes .*' on rank 0 \(node0\)"

# ---- a rank that never arrives ----
start=$(date +%s)
ZERO_TEST_FAULT=startstall:3 crun "$CT/never.out" node0:2,node1:2 4 1 -b 3 -x 2 -wt $WT; rc=$?
ends_within cluster_rank_that_never_arrives_is_named_within_wt $((WT + 30)) "$CT/never.out" \
    "^error: rank 0 \(node0\): start-up: rank 3 did not arrive within -wt $WT s \(3 of 4 ranks did\)"

# ---- faults mid-run ----
# The cable: a long run in the background; once it is training, node1's port goes down.
WT_LINK=20
start=$(date +%s)
crun "$CT/link.out" node0:2,node1:2 4 1 -b 3 -x 500 -wt $WT_LINK &
job=$!
# Until step 3, however long the launch takes (before: at most 120 polls, then the cable was cut
# anyway); the run is bounded by crun's timeout.
while ! grep -q "^step     3/" "$CT/link.out" 2>/dev/null && kill -0 $job 2>/dev/null; do sleep 0.5; done
cluster_link node1 down
start=$(date +%s)
wait $job; rc=$?
cluster_link node1 up
ends_within cluster_cable_pulled_mpirun_returns_every_node0_rank_says_why $((WT_LINK + 30)) "$CT/link.out" \
    "^error: rank 0 \(node0\): " "^error: rank 1 \(node0\): "
echo "INFO cluster cable pulled: mpirun returned $(took_since "$start") s after the cut with exit $rc; $(grep -m1 -E 'lost communication|^error: rank 0' "$CT/link.out" | cut -c1-160)"
start=$(date +%s)
ZERO_TEST_FAULT=stall:3@3 crun "$CT/stall.out" node0:2,node1:2 4 2 -b 3 -x 20 -wt $WT; rc=$?
ends_within cluster_rank_stalled_on_node1_diagnosed_by_the_others $((WT + 30)) "$CT/stall.out" \
    "^error: rank [012] \(node[01]\): (all_gather|reduce_scatter) of [a-z]+, unit [0-9]+ .*, at step 4 waited [0-9.]+ s, longer than -wt $WT s" \
    "^error: rank 0 \(node0\)" "^error: rank 1 \(node0\)" "^error: rank 2 \(node1\)"
start=$(date +%s)
ZERO_TEST_FAULT=exit:2@3 crun "$CT/crash.out" node0:2,node1:2 4 0 -b 3 -x 20 -wt 20; rc=$?
ends_within cluster_rank_crashed_on_node1_ends_the_job 50 "$CT/crash.out" "test fault: rank 2 exits at step 3"

# ---- one output dir, one run ----
lock_case() { # lock_case NAME DIR HOSTS_B NP_B: run A on both hosts, then B (HOSTS_B) into A's -o
    local name=$1 dir=$2 hosts_b=$3 np_b=$4 pid
    crun "$dir.a.out" node0:2,node1:2 4 1 -b 3 -x 500 -o "$dir" &
    local job=$!
    while ! grep -q "^step     3/" "$dir.a.out" 2>/dev/null && kill -0 $job 2>/dev/null; do sleep 0.5; done
    start=$(date +%s)
    crun "$dir.b.out" "$hosts_b" "$np_b" 1 -b $((12 / np_b)) -x 500 -o "$dir" -y 1; rc=$?
    KEEP_OTHERS=1 ends_within "$name" 30 "$dir.b.out" \
        "^error: rank [0-9] \(node[01]\): -o $dir: in use by another run \(pid [0-9]+ on node[01], rank [0-9]"
    one_line "$dir.b.out" || echo "FAIL ${name}_one_line: $(grep -c '^error' "$dir.b.out") error lines"
    grep -q "^step  *[0-9]*/500" "$dir.a.out" && ! grep -q "^error" "$dir.a.out" || echo "FAIL ${name}_first_run_unharmed: $(grep -m1 '^error' "$dir.a.out")"
    # Run A ends by a signal (its mpirun's, which passes SIGTERM on to the ranks): its lock files
    # keep their labels, as after a crash.
    for pid in $(cluster_procs); do [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = mpirun ] && kill -TERM "$pid"; done
    wait "$job"
    local waited=0
    while [ -n "$(cluster_leftovers)" ] && [ $waited -lt 15 ]; do sleep 1; waited=$((waited + 1)); done
    [ -z "$(cluster_leftovers)" ] || echo "FAIL ${name}_first_run_ends_on_sigterm: left $(cluster_leftovers | tr '\n' ' ')"
}
lock_case cluster_second_run_into_shared_dir_refused "$CT/busy" node0:2,node1:2 4
lock_case cluster_second_run_on_node1_into_local_dir_refused "$CL_LOCAL/busy" node1:2 2
# Run A wrote no checkpoint: this run starts afresh in its dir, after taking over its lock.
crun "$CT/busy.c.out" node0:2,node1:2 4 1 -b 3 -x 2 -o "$CT/busy" -y 1; rc=$?
if [ "$rc" -eq 0 ] && grep -q "^note: -o $CT/busy: taking over $CT/busy/.lock, left by a run that ended without releasing it (pid [0-9]* on node0" "$CT/busy.c.out"; then
    echo "PASS cluster_stale_lock_of_killed_run_taken_over_with_note"
else
    echo "FAIL cluster_stale_lock_of_killed_run_taken_over_with_note: exit $rc; $(grep -m2 -E '^(note|error)' "$CT/busy.c.out" | tr '\n' ' ')"
fi

# ---- launchers ----
# srun without PMI starts N independent processes, each MPI world of 1: Slurm's variables say 2.
out0=$(SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=0 timeout 60 "$BIN/train_gpt2_z0" -e d1 -x 1 -i "$CT/train.bin" 2>&1); rc0=$?
out1=$(SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=1 timeout 60 "$BIN/train_gpt2_z0" -e d1 -x 1 -i "$CT/train.bin" 2>&1); rc1=$?
if [ "$rc0" -eq 1 ] && [ "$rc1" -eq 1 ] && [ -z "$out1" ] && [ "$(grep -c . <<<"$out0")" -eq 1 ] &&
   grep -q "^error: SLURM_STEP_NUM_TASKS=2: the launcher started 2 tasks, but MPI sees a world of 1 in each" <<<"$out0"; then
    echo "PASS launcher_tasks_without_one_mpi_job_one_error_line"
else
    echo "FAIL launcher_tasks_without_one_mpi_job_one_error_line: exit $rc0/$rc1: $out0 | $out1"
fi
cl_launch "$CT/note.out" cluster_exec node0 timeout 120 "${CL_MPIRUN[@]}" -x OMP_NUM_THREADS -H node0:1,node1:1 -np 2 "$BIN/train_gpt2_z0" \
    "${CLUSTER_TEST_ARGS[@]}" -i "$CT/train.bin" -b 3 -x 1
check cluster_without_keepalive_options_says_partition_would_hang \
    grep -q "^note: 2 hosts and -wt 300 s, but Open MPI notices a lost host after 480 s (oob_tcp_keepalive_time 300 + intvl 20 x probes 9)" "$CT/note.out"
