#!/usr/bin/env bash
# The timeline trace (-tr, zero/trace/trace.h) and the planner (--plan, plan/plan.h) against what the
# engine counts and prints (tests/trace_check.py; unit sizes and ring counts recomputed there).
#   1. CPU build, 2 ranks, stages 0-3 (and 3 ranks, stage 2, 2 micro-steps), 5 steps of d2,
#      steps 2-3 traced: one file and process per rank with a compute and a communication track;
#      step > unit/phase > wait spans nest; each collective's elements and bytes equal the ring
#      count of its kind and unit; each step's collectives add up to the log's sent elements and
#      docs/design.md "Elements sent per rank" (exact); rank 0's waits add up to the log's comm wait (within 0.05 ms:
#      the same intervals, summed, the log printing 3 decimals; measured difference <= 0.001 ms).
#      Stages 0-1: every wte unit's reduction is issued after its LM-head backward span starts and
#      before the encoder's first backward span, and the encoder rows' all-gather once after the
#      encoder (tests/trace_check.py early; measured failing on the build before zero/tied_rows/tied_rows_cpu.h).
#   2. Tracing changes nothing it traces: the losses with and without -tr are identical (6
#      decimals), and without -tr no file is written.
#   3. --plan (the trainer runs ./plan_gpt2, train/plan_exec.h; its rows as JSON with -pj -): for
#      each of those runs the plan of the CPU build's layout (h100,gpu_build=0: h100 alone plans
#      the GPU build's) has the run's bytes per rank (params, grads, optimizer, working units, the
#      rings' receive buffer, activations) and elements sent per step, exactly.
#      The plan's step time on this CPU (--plan cpu, measured sgemm rate) against the run's
#      measured mean step: printed as INFO (a gap, not a test: timings here are shared-core noise).
#      With ranks sharing the cores, the plan measures one rank's rates with as many running at
#      once (a node's ranks x hosts_here) and its compute uses those: the counts are checked.
#   4. scripts/plot_timeline.py draws a PNG of a traced step and of a predicted one.
#   5. The GPU build's trace (CUDA events read after the run) in the CPU emulation of CUDA
#      (dev/emu), 2 ranks, stage 3: the same checks as 1 with bf16 bytes, and the GPU build's plan
#      against that run as in 3; and its ZeRO++ (-qw 1 -hp 2 -qg 1, 2 ranks) traced: the kinds,
#      units and bytes of its collectives as in 7, and the GPU plan's ZeRO++ row (bytes per step,
#      bf16 secondary shard, device buffers) equal to the run's (SKIP without CUDA headers).
#   6. Bad flags: one error line, exit 1; the planner's before any row (-hp not fitting the world,
#      machine overrides that are 0 where they divide, negative, a fraction above 1, a count that
#      is not one, offload flags the engine refuses: -zp at stage 2, -zo at stage 0, -zd without nvme), the trace's at start-up (a -tr path it cannot write, -ts outside the run's
#      steps, -ts without -tr) before any step. Hostile input (issue 16's pass): machine strings with an empty item, a key
#      twice, over 511 characters, rpn=0; -np not whole nodes; a reserve above the memory; more than 64 ranks on these
#      cores (cpu); nothing fitting (rows, then exit 1 with its line); a full disk (16 KiB tmpfs in a mount namespace of
#      its own) under --plan -tr and under a 2-rank traced run (one line, exit 1, nothing left on it); a rank's file name
#      that is a directory (at start-up). About 9 s of the group.
#   7. ZeRO++ (zero/zeropp/zeropp.h) at stage 3, 4 ranks, two "hosts" (each rank in its own UTS namespace,
#      ranks 0-1 and 2-3 sharing a hostname, so the engine splits its bytes by host as on two
#      machines; MPI itself is unchanged), 3 steps of d2, -qw 1, -hp 2, -qg 1 -qbg 64 and all three
#      (-hp 0, traced): the plan for -np 4 -rpn 2 with the same flags (plan/plan_zeropp.h,
#      zero/zeropp/zeropp.h's formula functions) has the run's counted bytes per step (total, within
#      the host, to the other host: rank 0's, counted message by message), its secondary shard
#      and its buffers, exactly; the traced run's collectives carry ZeRO++'s kinds ("all_gather
#      int8", "all_gather (group)", "all_to_all int4"), units and bytes, recomputed per unit in
#      tests/trace_check.py, adding up to the formula and the log (SKIP without unshare --uts).
# About 110 s on 2 cores once built (105-124 s measured at load 4-8; the emulated runs a half of it, the CPU ZeRO++ runs a quarter).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/zero_common.sh"
zero_setup
# --plan in the trainers runs the planner's own binary (train/plan_exec.h): build it if the suite's make did not.
[ -x plan_gpt2 ] || nice -n 10 make -s plan_gpt2 >"$ZT/plan_make" 2>&1 || echo "FAIL plan_gpt2_builds: $(grep -m3 error "$ZT/plan_make" | tr '\n' ' ')"

# trun N STAGE NAME ARGS: zrun with 5 steps, no val, no checkpoints, steps 2-3 traced to $ZT/NAME.json.
trun() {
    local n=$1 stage=$2 name=$3; shift 3
    zrun "$n" "$stage" "$ZT/$name" -x 5 -v 0 -n 0 -tr "$ZT/$name.json" -ts 2-3 "$@"
}
declare -A plan_args
for stage in 0 1 2 3; do trun 2 "$stage" "z${stage}_np2" -b 4 && plan_args[z${stage}_np2]="-b 4 -np 2"; done
trun 3 2 z2_np3_accum2 -b 2 -d 96 && plan_args[z2_np3_accum2]="-b 2 -d 96 -np 3"
for name in z0_np2 z1_np2 z2_np2 z3_np2 z2_np3_accum2; do
    if [ -z "${plan_args[$name]:-}" ]; then echo "FAIL trace_${name}_runs: $(tail -2 "$ZT/$name.out" | tr '\n' ' ')"; continue; fi
    check "trace_${name}_tracks_nesting_bytes_waits_match_log" python3 tests/trace_check.py trace "$ZT/$name" "$ZT/$name.json"
    # CPU stages 0-1: each wte chunk's reduction starts right after its LM-head backward, before
    # the encoder's backward (zero/tied_rows/tied_rows_cpu.h); fails on a build that reduces wte after the encoder
    case $name in z0_np2|z1_np2) check "trace_${name}_wte_reduced_before_encoder" python3 tests/trace_check.py early "$ZT/$name" "$ZT/$name.json" ;; esac
    # shellcheck disable=SC2086
    build/train_gpt2_z0 --plan h100,gpu_build=0 -pj - -e d2 -t 8 ${plan_args[$name]} >"$ZT/$name.plan" 2>&1
    check "plan_${name}_bytes_and_sent_equal_engine" python3 tests/trace_check.py plan "$ZT/$name.plan" "$ZT/$name"
done

# 2. Off: same losses, no file.
if zrun 2 3 "$ZT/z3_off" -b 4 -x 5 -v 0 -n 0; then
    check trace_off_same_losses zcheck same "$ZT/z3_np2" "$ZT/z3_off"
    check trace_off_writes_nothing test -z "$(ls "$ZT"/z3_off*.json 2>/dev/null)"
else
    echo "FAIL trace_off_runs: $(tail -2 "$ZT/z3_off.out" | tr '\n' ' ')"
fi

# 3. The plan's step time on this CPU against the measured runs (steps 2-5; step 1 warms up).
for stage in 0 3; do
    [ -f "$ZT/z${stage}_np2/log.jsonl" ] || continue
    build/train_gpt2_z0 --plan cpu -pj - -e d2 -t 8 -b 4 -np 2 >"$ZT/cpu$stage.plan" 2>&1
    echo "INFO plan_cpu_stage${stage}_np2: $(python3 - "$ZT/cpu$stage.plan" "$ZT/z${stage}_np2" "$stage" <<'PY'
import json, sys
plan = [json.loads(l[10:]) for l in open(sys.argv[1]) if l.startswith("plan_json ")][int(sys.argv[3])]
train = [r for r in map(json.loads, open(sys.argv[2] + "/log.jsonl")) if r["kind"] == "train" and r["step"] >= 2]
ms = sum(r["ms"] for r in train) / len(train); wait = sum(r["comm_wait_ms"] for r in train) / len(train)
print(f"predicted step {plan['step_ms']:.1f} ms (exposed {plan['exposed_ms']:.1f}), measured {ms:.1f} ms "
      f"(comm wait {wait:.1f}): gap {100 * (plan['step_ms'] - ms) / ms:+.0f}%")
PY
) | load $(cut -d' ' -f1-3 /proc/loadavg)"
done

# 3b. When ranks share these cores, the plan's per-rank rates are measured with all of them
#     running at once (plan/measure.h): as many as share them (a node's ranks, times hosts_here
#     simulated nodes), and those rates are the ones its compute uses. Counts, not speeds.
plan_sharing() { # ARGS...: the plan_json's ranks measured at once, and whether its rank_flops is that measurement's
    build/train_gpt2_z0 --plan "$@" -pj - -e d2 -t 8 -b 2 2>&1 | python3 -c '
import json, re, sys
out = sys.stdin.read()
plan = [json.loads(l[10:]) for l in out.splitlines() if l.startswith("plan_json ")][0]
m = re.search(r"one rank of (\d+) at once on \d+ cores: the slowest ([0-9.]+) GFLOP/s", out)
same = m is not None and abs(plan["rank_flops"] / 1e9 - float(m.group(2))) <= 0.05 + 1e-3 * float(m.group(2))
print(plan["rank_rates_ranks"], "uses_it" if same or m is None else "differs")'
}
check plan_cpu_measures_4_ranks_at_once_for_2_hosts_here test "$(OMP_NUM_THREADS=1 plan_sharing cpu,rpn=2,hosts_here=2 -np 4)" = "4 uses_it"
check plan_cpu_measures_a_nodes_2_ranks_at_once test "$(OMP_NUM_THREADS=1 plan_sharing cpu,rpn=2 -np 4)" = "2 uses_it"
check plan_cpu_one_rank_measures_alone test "$(OMP_NUM_THREADS=1 plan_sharing cpu -np 1)" = "0 uses_it"

# 3c. The cpu machine's compute is the GEMMs' FLOPs at the measured sgemm rate plus the other ops'
#     seconds measured at the plan's shapes (plan/measure_ops.h), as plan/plan_compute.h says:
#     recomputed here from the model's shapes and the plan_json's measured values, one rank,
#     stage 0 (no sharing: scales 1). Tolerance 1e-3 relative: the json's 6 significant digits.
build/train_gpt2_z0 --plan cpu -pj - -e d2 -t 8 -b 2 -np 1 >"$ZT/ops.plan" 2>&1
check plan_cpu_compute_is_gemms_at_rate_plus_measured_ops python3 - "$ZT/ops.plan" <<'PY'
import json, sys
p = [json.loads(l[10:]) for l in open(sys.argv[1]) if l.startswith("plan_json ")][0]
L, C, Vp, BT, e = 2, 128, 50304, 2 * 8, 4.0   # d2, -b 2 -t 8, fp32
assert p["ops_measured"] == 1 and p["ops_scale"] == 1 and p["ops_mem_scale"] == 1, p
gemm = (L * 72.0 * BT * C * C + 8.0 * BT * C * Vp) / p["rank_flops"]          # layers fwd 24, bwd 48 BT C^2; LM head 2 + 2 (recompute) + 4 BT C Vp
small = (6.0 + 6.0) * BT * C * e / p["rank_mem_bw"]                               # encoder 3 + 3, final LayerNorm 2 + 4 (BT C elements)
ops = L * (p["op_layer_fwd_s"] + p["op_layer_bwd_s"]) + p["op_head_fwd_s"] + p["op_head_bwd_s"]
opt = p["padded_parameters"] * (p["op_optimizer_s"] + p["op_zero_grads_s"])
want = 1e3 * (gemm + small + ops + opt)
print(f"compute {p['compute_ms']:.4f} ms, recomputed {want:.4f} ms")
sys.exit(0 if abs(p["compute_ms"] - want) <= 1e-3 * want else 1)
PY

# 3d. The network stack's CPU (net_cpu_ns, plan/plan_comm.h), on a cpu machine of 2 nodes x 2
#     ranks with its rates given (nothing measured; 1 core a node, 1 thread a rank: no idle core,
#     the stack's 2 progress threads get 2 of 4 shares beside compute), as documented: beta =
#     min(the link's, cores / (rpn x net_cpu)) alone and beta_compute = min(beta, 0.5 core /
#     (rpn x net_cpu)) beside compute. net_cpu_ns=1.5: both above the 1 Gbit link (125 MB/s), so
#     each collective takes its one time; then each compute span of the predicted timeline (step
#     3, every stage) less what the collectives beside it took (overlap x f, f = (rpn x bytes x
#     net_cpu / its time - idle cores) / busy cores, from each collective's own span and bytes)
#     adds up to the same plan's compute spans without the key (the work is the same, stretched),
#     and the stretch to its plan_json net_cpu_ms. net_cpu_ns=8: 62.5 MB/s alone, 31.25 beside
#     compute, both below the link: no collective faster than its bytes at beta, the compute
#     longer than without. Defaults: 0 on one node and on h100, the TCP default across nodes.
#     Tolerance 1e-6 relative (the trace's 0.001 us times, steps of about a second).
netcpu_plan() { # NAME NP EXTRA: plan into $ZT/netcpu_NAME.plan and its predicted timelines
    build/train_gpt2_z0 --plan "cpu,peak_tflops=0.02,mem_gbs=5,rpn=2,cores=1,threads=1,inter_gbit=1$3" -pj - -e d2 -t 64 -b 2 -np "$2" \
        -tr "$ZT/netcpu_$1.json" >"$ZT/netcpu_$1.plan" 2>&1
}
netcpu_plan 0 4 ,net_cpu_ns=0 && netcpu_plan 1.5 4 ,net_cpu_ns=1.5 && netcpu_plan 8 4 ,net_cpu_ns=8 && netcpu_plan default 4 "" &&
    netcpu_plan onenode 2 "" && build/train_gpt2_z0 --plan h100 -pj - -e d2 -t 64 -b 2 -np 16 >"$ZT/netcpu_h100.plan" 2>&1
check plan_net_cpu_bounds_beta_and_stretches_compute_beside_collectives python3 - "$ZT" "$(sed -n 's/^#define PLAN_CPU_TCP_NS //p' plan/plan_machine.h)" <<'PY'
import json, sys
zt, tcp_default = sys.argv[1], float(sys.argv[2])
def plans(name): return [json.loads(l[10:]) for l in open(f"{zt}/netcpu_{name}.plan") if l.startswith("plan_json ")]
def spans(name, stage):
    ev = [e for e in json.load(open(f"{zt}/netcpu_{name}.plan.stage{stage}.json"))["traceEvents"] if e.get("ph") == "X"]
    comp = [e for e in ev if e["cat"] in ("forward", "backward", "optimizer") and e["args"]["step"] == 3]
    return comp, [e for e in ev if e["cat"] == "comm"]
bad = []
assert plans("default")[0]["net_cpu_ns"] == tcp_default and plans("onenode")[0]["net_cpu_ns"] == 0 and plans("h100")[0]["net_cpu_ns"] == 0
base = plans(0)
for c in (1.5, 8):
    for p in plans(c):
        st, rpn, cores, busy = p["stage"], p["net_rpn"], p["net_cores"], p["net_busy_cores"]
        assert (rpn, cores, busy) == (2, 1, 1) and p["net_cpu_ns"] == c, p
        beta = min(base[st]["beta_link"], cores / (rpn * c * 1e-9))
        beta_c = min(beta, (cores - busy + busy * rpn / (rpn * 1 + rpn)) / (rpn * c * 1e-9))
        for k, want in (("beta", beta), ("beta_compute", beta_c)):
            if abs(p[k] - want) > 1e-6 * want: bad.append(f"c {c} stage {st}: {k} {p[k]} want {want}")
        comp, comm = spans(c, st)
        comp0, _ = spans(0, st)
        work0, spent = sum(e["dur"] for e in comp0), sum(e["dur"] for e in comp)
        if c == 8:  # both bounds below the link
            slow = [k for k in comm if k["dur"] * 1e-6 < k["args"]["bytes"] / beta * (1 - 1e-6)]
            print(f"net_cpu_ns {c} stage {st}: beta {beta / 1e6:.2f}, beside compute {beta_c / 1e6:.2f} MB/s; compute spans {spent / 1e3:.2f} ms "
                  f"(without the key {work0 / 1e3:.2f}); {len(slow)} of {len(comm)} collectives faster than their bytes at beta")
            if slow or spent <= work0: bad.append(f"c {c} stage {st}: {len(slow)} too fast, compute {spent} vs {work0}")
            continue
        stretch = 0.0
        for e in comp:
            a, b = e["ts"], e["ts"] + e["dur"]
            for k in comm:
                s, t = k["ts"], k["ts"] + k["dur"]
                if t <= a or s >= b or k["dur"] <= 0: continue
                demand = rpn * k["args"]["bytes"] * c * 1e-9 / (k["dur"] * 1e-6)
                f = min(1.0, max(0.0, (demand - (cores - busy)) / busy))
                stretch += (min(b, t) - max(a, s)) * f
        work = spent - stretch
        print(f"net_cpu_ns {c} stage {st}: beta {p['beta'] / 1e6:.1f} MB/s; compute spans {spent / 1e3:.2f} ms, "
              f"less the stacks' {stretch / 1e3:.2f} ms = {work / 1e3:.4f} ms; without the key {work0 / 1e3:.4f} ms; net_cpu_ms {p['net_cpu_ms']:.4f}")
        if stretch <= 0: bad.append(f"c {c} stage {st}: no stretch")
        if abs(work - work0) > 1e-6 * work0: bad.append(f"c {c} stage {st}: work {work} != {work0}")
        if abs(stretch / 1e3 - p["net_cpu_ms"]) > 1e-6 * work0 / 1e3 + 1e-4: bad.append(f"c {c} stage {st}: stretch {stretch / 1e3} != net_cpu_ms {p['net_cpu_ms']}")
print("\n".join(bad))
sys.exit(1 if bad else 0)
PY

# 3e. The columns add up to the step: every row's step = compute + quantize (ZeRO++) + checksum
#     (-zo nvme) + exposed, at every stage, on one node and across nodes with the stack's CPU
#     stretching compute (the 3d plans), with -zo nvme and -zo nvme -zp nvme rows on one node and
#     across nodes (disk rates given: nothing measured). Catches work the schedule does on the compute side but leaves out of its
#     column (stages 2-3's shard add and working-unit zeroing were once left out: ~97 ms at d4 -np 2).
#     Tolerance 3e-4 ms: four columns printed to 0.0001 ms each.
build/train_gpt2_z0 --plan "cpu,peak_tflops=0.02,mem_gbs=5,nvme_read_gbs=0.7,nvme_write_gbs=0.7" -pj - -pz 1 -e d2 -t 64 -b 2 -np 2 \
    -zo nvme -zd "$ZT" >"$ZT/sum_zo.plan" 2>&1 &&
build/train_gpt2_z0 --plan "cpu,peak_tflops=0.02,mem_gbs=5,nvme_read_gbs=0.7,nvme_write_gbs=0.7" -pj - -pz 1 -e d2 -t 64 -b 2 -np 2 \
    -zo nvme -zp nvme -zd "$ZT" >"$ZT/sum_zp.plan" 2>&1 &&
build/train_gpt2_z0 --plan "cpu,peak_tflops=0.02,mem_gbs=5,rpn=2,cores=1,threads=1,inter_gbit=1,net_cpu_ns=8,nvme_read_gbs=0.7,nvme_write_gbs=0.7" -pj - -pz 1 \
    -e d2 -t 64 -b 2 -np 4 -zo nvme -zp nvme -zd "$ZT" >"$ZT/sum_zp_nodes.plan" 2>&1
check plan_step_is_compute_plus_quantize_plus_checksum_plus_exposed python3 - "$ZT" <<'PY'
import json, sys
zt, bad, rows = sys.argv[1], [], {}
for name in ("netcpu_0", "netcpu_1.5", "netcpu_onenode", "sum_zo", "sum_zp", "sum_zp_nodes"):
    for l in open(f"{zt}/{name}.plan"):
        kind, _, body = l.partition(" ")
        if kind not in ("plan_json", "plan_zeropp_json", "plan_offload_json"): continue
        p = json.loads(body)
        rows[kind] = rows.get(kind, 0) + 1
        parts = p["compute_ms"] + p.get("quantize_ms", 0.0) + p.get("checksum_ms", 0.0) + p["exposed_ms"]
        if abs(p["step_ms"] - parts) > 3e-4:
            bad.append(f"{name} {kind} {p.get('label', p.get('stage'))}: step {p['step_ms']} != {parts:.4f} (compute + quantize + checksum + exposed)")
print(rows, "\n".join(bad))
sys.exit(1 if bad or rows.get("plan_zeropp_json", 0) < 4 or rows.get("plan_offload_json", 0) < 5 else 0)
PY

# 4. The pictures.
if python3 -c "import matplotlib" 2>/dev/null; then
    check plot_timeline_png_of_traced_step python3 scripts/plot_timeline.py "$ZT/z3_np2.json" --step 3 --out "$ZT/z3.png"
    check plot_timeline_png_is_an_image python3 -c "import sys; d=open(sys.argv[1],'rb').read(); sys.exit(0 if d[:8]==b'\x89PNG\r\n\x1a\n' and len(d)>10000 else 1)" "$ZT/z3.png"
    build/train_gpt2_z0 --plan h100,gpu_build=0 -pj - -e d2 -t 8 -b 4 -np 2 -tr "$ZT/pred.json" >/dev/null 2>&1
    check plot_timeline_png_of_predicted_step python3 scripts/plot_timeline.py "$ZT/pred.plan.stage3.json" --out "$ZT/pred.png"
    check_fails plot_timeline_unwritable_merge_one_line "^error: --merge $ZT/none/all.json: cannot write it (No such file or directory)" \
        python3 scripts/plot_timeline.py "$ZT/pred.plan.stage3.json" --merge "$ZT/none/all.json"
else
    echo "SKIP plot_timeline: matplotlib not installed (scripts/setup.sh installs it)"
fi

# 5. The GPU build in the CPU emulation of CUDA: events recorded on the streams, read after the run.
[ -d /usr/local/cuda/include ] && export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "${CUDA_HOME:-/usr/local/cuda}/include/cuda_runtime.h" ]; then
    echo "SKIP trace_emu_gpu: no CUDA toolkit headers"
elif ! make -s -j2 build/emu/train_gpt2cu_z3 >"$ZT/emu_make" 2>&1; then
    echo "FAIL trace_emu_gpu_build: $(grep -m3 error "$ZT/emu_make" | tr '\n' ' ')"
else
    mkdir -p "$ZT/emu" && python3 tests/markov_shards.py "$ZT/emu" 1000 20000 4000 7
    if timeout 600 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS -x EMU_DEVICE_COUNT=2 -np 2 build/emu/train_gpt2cu_z3 \
           -e dev/reference/gpt2_ref_model.bin -t 32 -b 2 -x 3 -v 0 -n 0 -l 1e-3 -s 0 -i "$ZT/emu/train.bin" -o "$ZT/emu_z3" \
           -tr "$ZT/emu_z3.json" -ts 2 >"$ZT/emu_z3.out" 2>&1; then
        check trace_emu_gpu_z3_np2_tracks_nesting_bytes_waits_match_log python3 tests/trace_check.py trace "$ZT/emu_z3" "$ZT/emu_z3.json"
        # The GPU build's plan (bf16 + fp32 master, fp32 gradient accumulation, its device buffers) against that run.
        build/emu/train_gpt2cu_z3 --plan h100 -pj - -e dev/reference/gpt2_ref_model.bin -t 32 -b 2 -np 2 >"$ZT/emu_z3.plan" 2>&1
        check plan_emu_gpu_z3_np2_bytes_and_sent_equal_engine python3 tests/trace_check.py plan "$ZT/emu_z3.plan" "$ZT/emu_z3"
    else
        echo "FAIL trace_emu_gpu_z3_np2_runs: $(grep -v -i tokenizer "$ZT/emu_z3.out" | tail -3 | tr '\n' ' ')"
    fi
    # The GPU build's ZeRO++ (all three; 2 ranks: one group, so qgZ's within-group all-to-all only),
    # traced: its kinds, units and bytes; and the GPU plan's row (bf16 secondary, its buffers) against the run.
    if timeout 600 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS -x EMU_DEVICE_COUNT=2 -np 2 build/emu/train_gpt2cu_z3 \
           -e dev/reference/gpt2_ref_model.bin -t 32 -b 2 -x 3 -v 0 -n 0 -l 1e-3 -s 0 -i "$ZT/emu/train.bin" -o "$ZT/emu_pp" \
           -qw 1 -hp 2 -qg 1 -tr "$ZT/emu_pp.json" -ts 2 >"$ZT/emu_pp.out" 2>&1; then
        check trace_emu_gpu_zeropp_all_np2_kinds_units_bytes_match_formula_and_log python3 tests/trace_check.py zeropp_trace "$ZT/emu_pp" "$ZT/emu_pp.json"
        build/emu/train_gpt2cu_z3 --plan h100 -pj - -e dev/reference/gpt2_ref_model.bin -t 32 -b 2 -np 2 -rpn 2 -qw 1 -hp 2 -qg 1 >"$ZT/emu_pp.plan" 2>&1
        check plan_emu_gpu_zeropp_all_np2_bytes_memory_equal_engine python3 tests/trace_check.py zeropp_plan "$ZT/emu_pp.plan" "$ZT/emu_pp"
    else
        echo "FAIL trace_emu_gpu_zeropp_np2_runs: $(grep -v -i tokenizer "$ZT/emu_pp.out" | tail -3 | tr '\n' ' ')"
    fi
fi

# 6. Bad flags.
check_fails trace_bad_name "error: -tr $ZT/t.txt: not a .json file name" build/train_gpt2_z0 -e d2 -t 8 -x 1 -v 0 -i "$ZT/train.bin" -tr "$ZT/t.txt"
check_fails trace_bad_steps "error: -ts 3-2: not a step range" build/train_gpt2_z0 -e d2 -t 8 -x 1 -i "$ZT/train.bin" -tr "$ZT/t.json" -ts 3-2
i=0; for ts in " 2-3" "2- 3" "+2" "2-+3"; do # strtol alone takes leading blanks and signs
    i=$((i + 1)); check_fails "trace_bad_steps_blank_or_sign_$i" "error: -ts $ts: not a step range" build/train_gpt2_z0 -e d2 -t 8 -x 1 -i "$ZT/train.bin" -tr "$ZT/t.json" -ts "$ts"
done
out=$(build/train_gpt2_z0 --plan h100 -pj - -e d2 -t 8 -np 1 2>&1)
check plan_one_rank_singular grep -q "| 1 rank on 1 node (1 per node)" <<<"$out"
check_fails plan_unknown_machine "error: --plan a100: unknown machine 'a100'" build/train_gpt2_z0 --plan a100 -pj - -e d2
check_fails plan_bad_override "error: --plan h100,gemm_eff: 'gemm_eff' is not key=number" build/train_gpt2_z0 --plan h100,gemm_eff -pj - -e d2
check_fails plan_world_without_plan "error: -np: only plans take a world" build/train_gpt2_z0 -e d2 -np 8
check_fails plan_batch_not_multiple "error: -d 100: not a multiple of B\*T\*ranks" build/train_gpt2_z0 --plan h100 -pj - -e d2 -b 4 -t 8 -np 2 -d 100
# one_error NAME PATTERN CMD...: exit 1, exactly one output line starting "error:", matching PATTERN,
# and nothing done before it: no plan row (plan_json) and no training step.
one_error() { local name=$1 pattern=$2 out rc; shift 2
    out=$(timeout 120 "$@" 2>&1); rc=$?
    if [ "$rc" -eq 1 ] && [ "$(grep -c '^error' <<<"$out")" -eq 1 ] && grep -qE -- "$pattern" <<<"$out" &&
       ! grep -qE '^plan_json|^step ' <<<"$out"; then echo "PASS $name"
    else echo "FAIL $name: exit $rc, $(grep -c '^error' <<<"$out") error lines, $(grep -cE '^plan_json|^step ' <<<"$out") plan/step lines; wanted 1, 1, 0 and '$pattern'; got: $(grep -m2 -E 'error|nan' <<<"$out" | tr '\n' ' ')"; fi; }
PLAN=(build/train_gpt2_z0 -e d2 -t 8)
one_error plan_zeropp_hp_not_dividing_before_any_row "^error: -hp 3: does not divide the 4 ranks" "${PLAN[@]}" --plan h100 -pj - -np 4 -hp 3
one_error plan_zeropp_hp0_nodes_not_dividing_before_any_row "^error: -hp 0: 3 ranks per node do not divide the 8 ranks" "${PLAN[@]}" --plan h100 -pj - -np 8 -rpn 3 -hp 0
one_error plan_override_zero_rate_refused "^error: --plan h100,gemm_eff=0: gemm_eff=0 is not positive; expected a number > 0" "${PLAN[@]}" --plan h100,gemm_eff=0 -pj - -np 8
one_error plan_override_negative_bandwidth_refused "^error: --plan h100,inter_gbit=-5: inter_gbit=-5 is not positive" "${PLAN[@]}" --plan h100,inter_gbit=-5 -pj - -np 16
one_error plan_override_fraction_above_one_refused "^error: --plan h100,inter_eff=1.5: inter_eff=1.5 is above 1; expected a fraction in \(0, 1\]" "${PLAN[@]}" --plan h100,inter_eff=1.5 -pj - -np 16
one_error plan_override_count_not_integer_refused "^error: --plan h100,rpn=1e20: rpn=1e20 is not a count; expected an integer in \[0, 1048576\]" "${PLAN[@]}" --plan h100,rpn=1e20 -pj - -np 8
one_error plan_override_negative_latency_refused "^error: --plan h100,inter_us=-1: inter_us=-1 is negative; expected a number >= 0" "${PLAN[@]}" --plan h100,inter_us=-1 -pj - -np 16
# Offload flags the engine refuses (zero_offload_check_args; -z S: the offload rows' stage): one line, no row.
one_error plan_offload_zp_at_stage2_refused "^error: -zp nvme: the parameter shard exists at ZeRO stage 3 only; expected -zp none at stage 2" \
    "${PLAN[@]}" --plan h100 -pj - -np 8 -z 2 -zo nvme -zp nvme
one_error plan_offload_zo_at_stage0_refused "^error: -zo nvme: ZeRO stage 0 replicates the optimizer state" "${PLAN[@]}" --plan h100 -pj - -np 8 -z 0 -zo nvme
one_error plan_offload_dir_without_nvme_refused "^error: -zd $ZT: nothing is placed on NVMe; expected -zo nvme or -zp nvme with it" \
    build/train_gpt2_z3 -e d2 -t 8 --plan h100 -pj - -np 8 -zo cpu -zd "$ZT"
one_error plan_trace_unwritable_refused "^error: -tr $ZT/none/p.json: cannot create $ZT/none/p.plan.stage0.json.tmp \(No such file or directory\); expected a writable path" \
    "${PLAN[@]}" --plan h100 -pj - -np 2 -tr "$ZT/none/p.json"
# The trace is written after the last step: a path it cannot be written to stops the run at start-up.
TRUN=(build/train_gpt2_z1 -e d2 -t 8 -b 2 -x 3 -v 0 -s 0 -i "$ZT/train.bin")
one_error trace_unwritable_path_refused_at_start "^error: -tr $ZT/none/t.json \(rank 0 on [^)]*\): cannot create $ZT/none/t.rank0.json.tmp \(No such file or directory\); expected a writable path" \
    "${TRUN[@]}" -tr "$ZT/none/t.json"
one_error trace_unwritable_path_np2_one_line "^error: -tr $ZT/none/t.json \(rank 0 on [^)]*\): cannot create" "${MPIRUN[@]}" -np 2 "${TRUN[@]}" -tr "$ZT/none/t.json"
one_error trace_steps_outside_run_refused "^error: -ts 5-9: the run's steps are 1-3; expected a range that holds one of them" "${TRUN[@]}" -tr "$ZT/late.json" -ts 5-9
one_error trace_steps_without_trace_refused "^error: -ts 2-3: steps of a timeline that is not written; expected -tr FILE.json as well" "${TRUN[@]}" -ts 2-3
check trace_refused_runs_left_no_file test ! -e "$ZT/late.rank0.json" -a ! -e "$ZT/late.rank0.json.tmp"
# Hostile machine strings and worlds (issue 16's hostile pass): each one line before any row.
one_error plan_machine_empty_item_refused "^error: --plan cpu,,: an empty item" "${PLAN[@]}" --plan cpu,, -pj - -np 2
one_error plan_machine_trailing_comma_refused "^error: --plan h100,: an empty item" "${PLAN[@]}" --plan h100, -pj - -np 2
one_error plan_machine_duplicate_key_refused "^error: --plan h100,rpn=4,gemm_eff=0.5,rpn=2: key 'rpn' given twice" "${PLAN[@]}" --plan h100,rpn=4,gemm_eff=0.5,rpn=2 -pj - -np 8
one_error plan_machine_too_long_refused "^error: --plan h100,inter_gbit=1+\.\.\.: 616 characters; expected at most 511" "${PLAN[@]}" --plan "h100,inter_gbit=$(printf '1%.0s' $(seq 600))" -pj - -np 8
one_error plan_machine_rpn0_refused "^error: --plan h100,rpn=0: rpn=0 is no ranks per node" "${PLAN[@]}" --plan h100,rpn=0 -pj - -np 64
one_error plan_np_not_whole_nodes_refused "^error: -np 12: not whole nodes of 8 ranks; expected a multiple of 8" "${PLAN[@]}" --plan h100 -pj - -np 12
one_error plan_reserve_above_memory_refused "^error: --plan: the reserve, 1000.00 GiB, leaves none of the 74.51 GiB" "${PLAN[@]}" --plan h100,reserve_gib=1000 -pj - -np 8
one_error plan_model_file_is_directory_refused "^error: $ZT: cannot read model file \(Is a directory\)" build/train_gpt2_z0 -e "$ZT" -t 8 --plan h100 -pj - -np 2
one_error plan_under_mpirun_refused "^error: --plan: started as 2 tasks \(OMPI_COMM_WORLD_SIZE\); expected one process" "${MPIRUN[@]}" -np 2 "${PLAN[@]}" --plan h100 -pj - -np 8
one_error plan_cpu_too_many_ranks_sharing_refused "^error: --plan cpu: 100000 ranks would share this machine's [0-9]+ cores; expected at most 64" "${PLAN[@]}" --plan cpu -pj - -np 100000
# The offload rows' hostile pass (issue 16, h16): a -zd the run would refuse is refused by the plan
# too (before: planned with the bench's rates, "the free space in -zd: not known (no -zd)", and a
# file's disk reported as free space); machine keys past [1e-6, 1e6] (before: "NVMe inf GB/s read",
# a row of 10^200 ms).
one_error plan_offload_dir_missing_refused "^error: -zd $ZT/none: No such file or directory; expected an existing, writable directory" \
    "${PLAN[@]}" --plan h100 -pj - -np 8 -zo nvme -zd "$ZT/none"
one_error plan_offload_dir_is_file_refused "^error: -zd $ZT/train.bin: not a directory; expected an existing, writable directory" \
    "${PLAN[@]}" --plan cpu -pj - -np 1 -zo nvme -zd "$ZT/train.bin"
one_error plan_override_huge_rate_refused "^error: --plan cpu,nvme_read_gbs=1e300: nvme_read_gbs=1e300 is out of range; expected a number in \[1e-6, 1e6\]" \
    "${PLAN[@]}" --plan cpu,nvme_read_gbs=1e300 -pj - -np 1 -zo nvme -zd "$ZT"
one_error plan_override_tiny_fraction_refused "^error: --plan h100,pcie_eff=1e-300: pcie_eff=1e-300 is out of range; expected a number in \[1e-6, 1\]" \
    "${PLAN[@]}" --plan h100,pcie_eff=1e-300 -pj - -np 8 -zo cpu
one_error plan_override_huge_latency_refused "^error: --plan h100,inter_us=1e300: inter_us=1e300 is out of range; expected a number in \[0, 1e6\]" \
    "${PLAN[@]}" --plan h100,inter_us=1e300 -pj - -np 16
# The GPU build's offload rows on the cpu machine (no host<->device link: pcie 0, host AdamW 0):
# refused (before: rows of -nan ms, "step_ms":-nan); with both rates given they plan.
if [ -x build/emu/train_gpt2cu_z3 ]; then
    one_error plan_gpu_offload_on_cpu_machine_refused "^error: --plan cpu,gpu_build=1: the GPU build's offload rows need a host<->device and a host AdamW rate; expected pcie_gbs= and host_gbs=" \
        build/emu/train_gpt2cu_z3 -e d2 -t 8 --plan cpu,gpu_build=1 -pj - -np 2 -zo cpu
    out=$(timeout 120 build/emu/train_gpt2cu_z3 -e d2 -t 8 --plan cpu,pcie_gbs=10,host_gbs=10,gpu_build=1 -pj - -np 2 -zo cpu 2>&1); rc=$?
    check plan_gpu_offload_on_cpu_machine_with_rates_plans test "$rc:$(grep -c '^plan_offload_json' <<<"$out"):$(grep -ci 'nan' <<<"$out")" = "0:3:0"
fi
# A plan stopped in its disk probe leaves no scratch file (it is unlinked once open: measured
# before, SIGTERM left the 1 GiB zero_plan_probe_PID.bin in -zd). Killed as soon as the probe's fd shows.
mkdir -p "$ZT/probe_kill"
"${PLAN[@]}" --plan cpu -pj - -np 1 -zo nvme -zd "$ZT/probe_kill" >"$ZT/probe_kill.out" 2>&1 & probe_pid=$!
seen=""
# Polled while the plan runs (before: at most 300 polls, ~15 s, then killed anyway: a loaded
# machine's slower start would have failed the check with nothing seen).
while kill -0 "$probe_pid" 2>/dev/null; do seen=$(ls -l "/proc/$probe_pid/fd" 2>/dev/null | grep -o 'zero_plan_probe_.*'); [ -n "$seen" ] && break; sleep 0.05; done
kill -TERM "$probe_pid" 2>/dev/null; wait "$probe_pid"; rc=$?
check plan_disk_probe_sigterm_leaves_nothing test "$rc:$seen:$(ls -A "$ZT/probe_kill")" = "143:zero_plan_probe_$probe_pid.bin (deleted):"
# Nothing fits: the rows are the answer, exit 1 has its one error line.
out=$("${PLAN[@]}" --plan h100,mem_gib=2.01 -pj - -np 8 2>&1); rc=$?
check plan_nothing_fits_exit1_one_line test "$rc:$(grep -c '^error' <<<"$out"):$(grep -c '^error: --plan: no stage fits' <<<"$out"):$(grep -c '^plan_json' <<<"$out")" = "1:1:1:4"
# A full disk (a 16 KiB tmpfs in each process's own mount namespace: nothing to unmount) and a
# directory where a rank's file goes: one line, exit 1, no file left.
if unshare -m true 2>/dev/null; then
    mkdir -p "$ZT/full"
    # sh -c "$INFULL" DIR CMD...: CMD with a 16 KiB tmpfs on DIR, then a line "left: FILES" of what is on it
    INFULL='mount -t tmpfs -o size=16k tmpfs "$0" || exit 9; "$@"; rc=$?; echo "left: $(ls -A "$0" | tr "\n" " ")"; exit $rc'
    out=$(timeout 120 unshare -m sh -c "$INFULL" "$ZT/full" "${PLAN[@]}" --plan h100 -pj - -np 2 -tr "$ZT/full/p.json" 2>&1); rc=$?
    check plan_trace_full_disk_one_line_exit1_no_file test "$rc:$(grep -c '^error' <<<"$out"):$(grep -c "^error: -tr $ZT/full/p.plan.stage0.json: writing the trace failed (No space left on device)" <<<"$out"):$(grep '^left:' <<<"$out")" = "1:1:1:left: "
    out=$(timeout 120 "${MPIRUN[@]}" -np 2 unshare -m sh -c "$INFULL" "$ZT/full" "${TRUN[@]}" -tr "$ZT/full/t.json" -ts 1-3 2>&1); rc=$?
    check trace_full_disk_np2_one_line_exit1_no_file test "$rc:$(grep -c '^error' <<<"$out"):$(grep -c "^error: -tr $ZT/full/t.rank[01].json: writing the trace failed (No space left on device)" <<<"$out"):$(grep -c '^step ' <<<"$out"):$(grep '^left:' <<<"$out" | sort -u)" = "1:1:1:3:left: "
    # The disk probe (cpu, -zd, plan/plan_offload.h) takes at most half the free space and leaves
    # nothing: an 80 MiB tmpfs gets a 40 MiB probe, its rates printed as measured, no file left.
    out=$(timeout 120 unshare -m sh -c "${INFULL/size=16k/size=80m}" "$ZT/full" "${PLAN[@]}" --plan cpu -pj - -np 1 -zo nvme -zd "$ZT/full" 2>&1); rc=$?
    check plan_disk_probe_half_the_free_space_nothing_left test "$rc:$(grep -c 'measured now in -zd: 40 MiB rewritten and read' <<<"$out"):$(grep -c '^plan_offload_json' <<<"$out"):$(grep '^left:' <<<"$out")" = "0:1:3:left: "
    # -zd read-only (a tmpfs mounted ro; access() says EROFS to root too): one line, exit 1, before any row.
    out=$(timeout 120 unshare -m sh -c "${INFULL/size=16k/size=1m,ro}" "$ZT/full" "${PLAN[@]}" --plan cpu -pj - -np 1 -zo nvme -zd "$ZT/full" 2>&1); rc=$?
    check plan_offload_dir_read_only_refused test "$rc:$(grep -c '^error' <<<"$out"):$(grep -c "^error: -zd $ZT/full: Read-only file system; expected an existing, writable directory" <<<"$out"):$(grep -c '^plan_json' <<<"$out")" = "1:1:1:0"
    # Under 64 MiB free (a 16 MiB tmpfs, smaller than d2's files): no probe, and the header says so
    # (before: silently the bench's rates); the rows say the files do not fit; nothing left.
    out=$(timeout 120 unshare -m sh -c "${INFULL/size=16k/size=16m}" "$ZT/full" "${PLAN[@]}" --plan cpu -pj - -np 1 -zo nvme -zd "$ZT/full" 2>&1); rc=$?
    check plan_offload_tiny_disk_no_probe_rows_do_not_fit test "$rc:$(grep -c 'no probe in -zd: under 64 MiB free' <<<"$out"):$(grep -c '^plan_offload_json.*"fits":false' <<<"$out"):$(grep -c '| NO (disk) |' <<<"$out"):$(grep '^left:' <<<"$out")" = "0:1:3:3:left: "
    # Two plans probing one -zd at once (an 80 MiB tmpfs): each its own file (or none), nothing left.
    TWO='mount -t tmpfs -o size=80m tmpfs "$0" || exit 9; "$@" >"$0.a" 2>&1 & a=$!; "$@" >"$0.b" 2>&1; b=$?; wait $a; echo "rc: $? $b left: $(ls -A "$0" | tr "\n" " ")"'
    out=$(timeout 120 unshare -m sh -c "$TWO" "$ZT/full" "${PLAN[@]}" --plan cpu -pj - -np 1 -zo nvme -zd "$ZT/full" 2>&1)
    # Which of the two measures depends on timing: when their probes overlap, the second sees the
    # first's file (under 64 MiB free: no probe) or runs out of room (the probe failed); either is
    # said in its header. What must hold: both exit 0, one at least measured, nothing left.
    said=$(cat "$ZT/full.a" "$ZT/full.b" | grep -c -e 'measured now in -zd' -e 'no probe in -zd: under 64 MiB free' -e 'the probe in -zd failed: ')
    check plan_disk_probe_two_at_once_nothing_left test "$out:$said:$(cat "$ZT/full.a" "$ZT/full.b" | grep -c 'measured now in -zd' | sed 's/^[12]$/measured/')" = "rc: 0 0 left: :2:measured"
else
    echo "SKIP trace_full_disk: unshare -m is not available here (needs root)"
fi
mkdir -p "$ZT/dirs.rank1.json"
one_error trace_rank_file_is_directory_refused_at_start "^error: -tr $ZT/dirs.json \(rank 1 on [^)]*\): $ZT/dirs.rank1.json is a directory" \
    "${MPIRUN[@]}" -np 2 "${TRUN[@]}" -tr "$ZT/dirs.json"

# 7. ZeRO++ on two hostnames (UTS namespaces; root).
if ! unshare --uts true 2>/dev/null; then
    echo "SKIP plan_zeropp: unshare --uts is not available here (needs root)"
else
    pprun() { local name=$1; shift
        timeout 300 "${MPIRUN[@]}" -np 4 unshare --uts sh -c 'hostname "t66node$((OMPI_COMM_WORLD_RANK / 2))" && exec "$0" "$@"' \
            build/train_gpt2_z3 "${ZERO_TEST_ARGS[@]}" -i "$ZT/train.bin" -j "$ZT/val.bin" -o "$ZT/$name" -b 2 -x 3 -v 0 -n 0 "$@" \
            >"$ZT/$name.out" 2>&1; }
    for spec in "qw -qw 1" "hp -hp 2" "qg -qg 1 -qbg 64" "all -qw 1 -hp 0 -qg 1 -tr $ZT/pp_all.json -ts 2"; do
        set -- $spec; name=pp_$1; shift
        if ! pprun "$name" "$@"; then echo "FAIL plan_zeropp_${name}_runs: $(grep -v tokenizer "$ZT/$name.out" | tail -2 | tr '\n' ' ')"; continue; fi
        flags=("$@"); [ "$name" = pp_all ] && flags=(-qw 1 -hp 0 -qg 1)
        build/train_gpt2_z0 --plan h100,gpu_build=0 -pj - -e d2 -t 8 -b 2 -np 4 -rpn 2 "${flags[@]}" >"$ZT/$name.plan" 2>&1
        check "plan_zeropp_${name}_np4_rpn2_bytes_within_across_memory_equal_engine" python3 tests/trace_check.py zeropp_plan "$ZT/$name.plan" "$ZT/$name"
    done
    [ -f "$ZT/pp_all/log.jsonl" ] &&
        check trace_zeropp_all_np4_kinds_units_bytes_match_formula_and_log python3 tests/trace_check.py zeropp_trace "$ZT/pp_all" "$ZT/pp_all.json"
fi
