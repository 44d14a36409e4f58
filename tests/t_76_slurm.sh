#!/usr/bin/env bash
# A real Slurm on the simulated cluster (tests/slurm_cluster.sh: Debian's slurm-wlm, munge, a
# controller on node0 and one slurmd per host, installed by `scripts/setup.sh --slurm`).
#   - `srun --mpi=pmix` (the plugin Debian's Slurm and Open MPI share; Open MPI is built with
#     PMIx only, so pmi2 and none fail in its client) launches 2 hosts x 2 ranks at ZeRO stages
#     0-3; the trainer sees 2 hosts, and the losses match one process at stage 0 on the same global
#     batch within 1e-5 relative (t_75_cluster_1's tolerance and reason: only the summation order
#     over ranks differs)
source "$(dirname "$0")/cluster_common.sh"
source tests/slurm_cluster.sh
t_start=$(date +%s)
slurm_setup 2
echo "INFO slurm_setup: install ${SL_INSTALL_SECONDS:-0} s (0: already installed), daemons up in $SL_UP_SECONDS s"

if ! ref_run "$CT/ref" 12 -x 6; then echo "FAIL slurm_reference_run: $(tail -2 "$CT/ref.out" | tr '\n' ' ')"; exit 1; fi
for stage in 0 1 2 3; do
    name="slurm_srun_pmix_zero${stage}_2hosts_x2"
    t0=$(date +%s)
    if ! srun_run "$CT/srun$stage.out" 2 2 "$stage" -b 3 -x 6 -o "$CT/srun$stage"; then
        echo "FAIL ${name}_runs: $(grep -v tokenizer "$CT/srun$stage.out" | tail -3 | tr '\n' ' ')"; continue
    fi
    echo "INFO ${name}: ran in $(took_since "$t0") s"
    if [ "$stage" -eq 0 ]; then
        check slurm_trainer_sees_2_hosts \
            grep -q "zero: 4 ranks on 2 hosts (node0: ranks 0-1, node1: ranks 2-3)" "$CT/srun0.out"
    fi
    check "${name}_matches_np1_stage0" python3 tests/zero_logcheck.py losses "$CT/ref" "$CT/srun$stage" 1e-5 --relative 1
done
echo "INFO t_76_slurm: $(took_since "$t_start") s"
