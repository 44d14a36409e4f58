# Helpers for the ZeRO test groups (tests/t_30_zero_*.sh); source it after tests/lib.sh.
#   zero_setup            builds the per-stage trainers and tools, makes $ZT (temp dir) with a
#                         synthetic train/val shard, sets OMP_NUM_THREADS=1 (ranks share 2 cores)
#   zrun N STAGE DIR ARGS run build/train_gpt2_zSTAGE on N ranks (N = 1: no mpirun, a singleton)
#                         with the small test config, log and checkpoints in DIR; output in DIR.out
#   zcheck ARGS           tests/zero_logcheck.py
# Launch: as root Open MPI needs --allow-run-as-root, and more ranks than cores --oversubscribe.
cd "$(dirname "${BASH_SOURCE[0]}")/.."

zero_setup() {
    if ! make -s zero_binaries build/test_zero_layout build/test_zero_state build/test_launcher >/tmp/zero_make.$$ 2>&1; then
        echo "FAIL zero_build: $(tail -3 /tmp/zero_make.$$ | tr '\n' ' ')"; rm -f /tmp/zero_make.$$; exit 1
    fi
    rm -f /tmp/zero_make.$$
    ZT=$(mktemp -d /tmp/t_30_zero.XXXXXX)
    trap 'rm -rf "$ZT"' EXIT
    export OMP_NUM_THREADS=1
    # A noisy Markov chain over 3000 token ids (fixed seed): learnable, so the losses move and a
    # wrong gradient shows. 60000 train tokens, 8000 val tokens, llm.c shard format.
    python3 tests/markov_shards.py "$ZT" 3000 60000 8000 1234
}

MPIRUN=(mpirun --allow-run-as-root --oversubscribe)
# d2 (2 layers, so layer-to-layer prefetch runs), T = 8, lr 1e-3 so that 10 steps move the loss.
ZERO_TEST_ARGS=(-e d2 -t 8 -x 10 -l 1e-3 -s 0 -v 5 -m 2)

zrun() {
    local n=$1 stage=$2 dir=$3; shift 3
    local cmd=(build/train_gpt2_z"$stage" "${ZERO_TEST_ARGS[@]}" -i "$ZT/train.bin" -j "$ZT/val.bin" -o "$dir" "$@")
    if [ "$n" -gt 1 ]; then cmd=("${MPIRUN[@]}" -np "$n" "${cmd[@]}"); fi
    timeout 300 "${cmd[@]}" >"$dir.out" 2>&1
}

zcheck() { python3 tests/zero_logcheck.py "$@"; }
