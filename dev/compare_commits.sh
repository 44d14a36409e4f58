#!/usr/bin/env bash
# Does a change leave training unchanged? Builds two commits beside the tree, runs the same short
# configurations on both and prints one table row per configuration: are the model files'
# weights, and every loss and norm in log.jsonl, identical (bit for bit, as logged)?
#
#   dev/compare_commits.sh [--cpu|--gpu] [--only REGEX] [--keep] A B
#     A, B      commits (anything git rev-parse takes), or "." for the working tree as it is
#     --cpu     the CPU build's stage trainers build/train_gpt2_z0..z3 (default)
#     --gpu     the CUDA build's, in the CPU emulation (build/emu/train_gpt2cu_z0..z3; emu.mk,
#               needs the CUDA toolkit's headers): slow, so fewer and smaller runs
#     --only R  only the configurations whose name matches the extended regex R
#     --keep    keep the runs' directories (printed at the end); else they are removed
#
# A commit is built in a git worktree /tmp/compare_commits/<sha> (kept: a second comparison of
# the same commit rebuilds nothing; `git worktree remove --force` it when done). "." builds in
# the tree itself. Both builds get the same inputs: the synthetic shards of tests/markov_shards.py
# and, for --gpu, dev/reference/gpt2_ref_model.bin, from this tree.
# Compared: every model_*.bin both runs wrote, all bytes but the header's int32 slots 8-13
# (bytes 32-55: the run id each run stamps, common/model_file.h), so weights and the rest of the
# header; every train and val record of log.jsonl, its loss and every field whose name holds
# "norm", as the log prints them. A run that fails on either side is a row that says so.
# Exit status: 0 when every row is identical, 1 otherwise, 2 on bad usage.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=cpu only="" keep=0
usage() { echo "usage: dev/compare_commits.sh [--cpu|--gpu] [--only REGEX] [--keep] A B" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --cpu) build=cpu ;; --gpu) build=gpu ;; --keep) keep=1 ;;
        --only) [ $# -ge 2 ] || usage; only=$2; shift ;;
        -*) echo "error: $1: unknown option" >&2; usage ;;
        *) break ;;
    esac
    shift
done
[ $# -eq 2 ] || usage

# Configurations: NAME STAGE RANKS ARGS (a flag in ARGS overrides COMMON's). CPU: d2, T 8, global
# batch 12 sequences, 4 steps, val every 2, checkpoint at 4 (as tests/zero_common.sh); -d auto
# with 16 steps of T 16 at lr 3e-3, where the batch grows 3 times (96 -> 192 -> 384 -> 768
# tokens). GPU: the reference model (L 2, C 64), T 32, global batch 8, 2 steps (an emulated step
# takes seconds).
if [ "$build" = cpu ]; then
    COMMON=(-e d2 -t 8 -x 4 -l 1e-3 -s 0 -v 2 -m 2 -n 4)
    CONFIGS=(
        "z0_np1 0 1 -b 12" "z1_np1 1 1 -b 12" "z2_np1 2 1 -b 12" "z3_np1 3 1 -b 12"
        "z0_np3 0 3 -b 4" "z1_np3 1 3 -b 4" "z2_np3 2 3 -b 4" "z3_np3 3 3 -b 4"
        "z0_np3_accum2 0 3 -b 4 -d 192" "z1_np3_accum2 1 3 -b 4 -d 192"
        "z2_np3_accum2 2 3 -b 4 -d 192" "z3_np3_accum2 3 3 -b 4 -d 192"
        "z2_np3_zo_nvme 2 3 -b 4 -zo nvme" "z3_np3_zo_nvme_zp_nvme 3 3 -b 4 -zo nvme -zp nvme"
        "z3_np1_zo_nvme_zp_nvme_accum2 3 1 -b 6 -d 96 -zo nvme -zp nvme"
        "z3_np3_qw 3 3 -b 4 -qw 1" "z3_np3_qg 3 3 -b 4 -qg 1" "z2_np3_qg 2 3 -b 4 -qg 1"
        "z3_np4_hp2 3 4 -b 3 -hp 2" "z3_np4_qw_hp2_qg 3 4 -b 3 -qw 1 -hp 2 -qg 1"
        "z2_np3_d_auto 2 3 -b 2 -t 16 -x 16 -l 3e-3 -v 4 -d auto -dm 960 -df 2 -dw 3"
    )
    binary() { echo "build/train_gpt2_z$1"; }
    targets=(build/train_gpt2_z0 build/train_gpt2_z1 build/train_gpt2_z2 build/train_gpt2_z3)
else
    COMMON=(-e "$here/dev/reference/gpt2_ref_model.bin" -t 32 -x 2 -l 1e-3 -s 0 -v 2 -m 2 -n 2)
    CONFIGS=(
        "z0_np1 0 1 -b 8" "z1_np1 1 1 -b 8" "z2_np1 2 1 -b 8" "z3_np1 3 1 -b 8"
        "z0_np2 0 2 -b 4" "z3_np2 3 2 -b 4" "z2_np2_accum2 2 2 -b 2 -d 256" "z3_np2_accum2 3 2 -b 2 -d 256"
        "z3_np2_zo_cpu 3 2 -b 4 -zo cpu" "z3_np2_qw 3 2 -b 4 -qw 1" "z2_np2_qg 2 2 -b 4 -qg 1"
        "z3_np2_hp2 3 2 -b 4 -hp 2" "z2_np2_d_auto 2 2 -b 2 -x 4 -d auto -dm 512 -df 2 -dw 2"
    )
    binary() { echo "build/emu/train_gpt2cu_z$1"; }
    targets=(build/emu/train_gpt2cu_z0 build/emu/train_gpt2cu_z1 build/emu/train_gpt2cu_z2 build/emu/train_gpt2cu_z3)
fi

# source_dir REV: the directory REV is built in (made and cached for a commit).
source_dir() {
    if [ "$1" = . ]; then echo "$here"; return 0; fi
    local sha dir
    sha=$(git -C "$here" rev-parse --verify -q "$1^{commit}") || { echo "error: $1: not a commit of $here" >&2; return 1; }
    dir=/tmp/compare_commits/$sha
    if [ ! -d "$dir" ]; then
        mkdir -p /tmp/compare_commits
        git -C "$here" worktree add --detach "$dir" "$sha" >/dev/null 2>&1 || { echo "error: $1: git worktree add $dir failed" >&2; return 1; }
    fi
    echo "$dir"
}
dir_a=$(source_dir "$1") || exit 2
dir_b=$(source_dir "$2") || exit 2
for d in "$dir_a" "$dir_b"; do
    echo "building ${targets[*]} in $d" >&2
    if ! make -C "$d" -s -j2 "${targets[@]}" >/tmp/compare_commits_make.$$ 2>&1; then
        echo "error: build in $d failed: $(tail -3 /tmp/compare_commits_make.$$ | tr '\n' ' ')" >&2; rm -f /tmp/compare_commits_make.$$; exit 1
    fi
done
rm -f /tmp/compare_commits_make.$$

work=$(mktemp -d /tmp/compare_commits_runs.XXXXXX)
[ "$keep" -eq 1 ] || trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 EMU_DEVICE_COUNT=4 EMU_LAZY=0
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS -x EMU_DEVICE_COUNT -x EMU_LAZY)
if [ "$build" = cpu ]; then python3 "$here/tests/markov_shards.py" "$work" 3000 60000 8000 1234
else python3 "$here/tests/markov_shards.py" "$work" 1000 20000 4000 7; fi

# run SRC_DIR OUT STAGE RANKS ARGS...: one run; its output in OUT.out.
run() {
    local src=$1 out=$2 stage=$3 n=$4; shift 4
    local cmd=("$src/$(binary "$stage")" "${COMMON[@]}" -i "$work/train.bin" -j "$work/val.bin" -o "$out" "$@")
    [[ " $* " == *" nvme "* ]] && { mkdir -p "$out.nvme"; cmd+=(-zd "$out.nvme"); }
    [ "$n" -gt 1 ] && cmd=("${MPIRUN[@]}" -np "$n" "${cmd[@]}")
    (cd "$src" && timeout 900 "${cmd[@]}") >"$out.out" 2>&1
}
# same_models A B: every model file of A is in B with the same bytes outside slots 8-13.
same_models() {
    local f n=0 base
    for f in "$1"/model_*.bin; do
        [ -f "$f" ] || continue
        base=$(basename "$f"); n=$((n + 1))
        [ -f "$2/$base" ] || { echo "missing $base"; return 1; }
        cmp -s -n 32 "$f" "$2/$base" && cmp -s -i 56 "$f" "$2/$base" || { echo "differ ($base)"; return 1; }
    done
    [ "$n" -gt 0 ] || { echo "none written"; return 1; }
    echo "identical ($n)"
}
# same_logs A B: train and val records' loss and *norm* fields, as printed in log.jsonl.
same_logs() {
    python3 - "$1/log.jsonl" "$2/log.jsonl" <<'PY'
import json, re, sys
def fields(path):
    out = {}
    for line in open(path):
        m = re.match(r'\s*\{', line)
        if not m: continue
        r = json.loads(line)
        if r.get("kind") not in ("train", "val"): continue
        # the raw text of each compared value, so that "identical" means every printed digit
        for k in r:
            if k == "loss" or "norm" in k:
                raw = re.search(r'"%s":\s*([^,}]+)' % re.escape(k), line)
                out[(r["kind"], r["step"], k)] = raw.group(1) if raw else repr(r[k])
    return out
a, b = fields(sys.argv[1]), fields(sys.argv[2])
if not a: print("no records"); sys.exit(1)
diff = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
if diff:
    k = diff[0]; print(f"{len(diff)} of {len(a)} differ, first {k}: {a.get(k)} vs {b.get(k)}"); sys.exit(1)
names = sorted({k[2] for k in a})
print(f"identical ({len(a)}: {','.join(names)})")
PY
}

label() { if [ "$1" = . ]; then echo "tree"; else git -C "$here" rev-parse --short "$1"; fi; }
la=$(label "$1"); lb=$(label "$2")
printf '%s build: A = %s (%s), B = %s (%s)\n' "$build" "$la" "$dir_a" "$lb" "$dir_b"
printf '| %-40s | %-16s | %-44s | %-9s |\n' configuration "model files" "log.jsonl losses and norms" result
printf '|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..42})" "$(printf -- '-%.0s' {1..18})" "$(printf -- '-%.0s' {1..46})" "$(printf -- '-%.0s' {1..11})"
rows=0 bad=0
for config in "${CONFIGS[@]}"; do
    read -r name stage n args <<<"$config"
    [ -n "$only" ] && ! [[ "$name" =~ $only ]] && continue
    rows=$((rows + 1))
    # shellcheck disable=SC2086
    if ! run "$dir_a" "$work/A_$name" "$stage" "$n" $args; then
        models="-"; logs="A failed: $(grep -m1 -i error "$work/A_$name.out" | cut -c1-60)"
    # shellcheck disable=SC2086
    elif ! run "$dir_b" "$work/B_$name" "$stage" "$n" $args; then
        models="-"; logs="B failed: $(grep -m1 -i error "$work/B_$name.out" | cut -c1-60)"
    else
        models=$(same_models "$work/A_$name" "$work/B_$name"); logs=$(same_logs "$work/A_$name" "$work/B_$name")
    fi
    result=SAME
    [[ "$models" == identical* && "$logs" == identical* ]] || { result=DIFFERENT; bad=$((bad + 1)); }
    printf '| %-40s | %-16s | %-44s | %-9s |\n' "$name ($n rank$([ "$n" -gt 1 ] && echo s))" "$models" "$logs" "$result"
done
echo "$rows configurations, $((rows - bad)) identical, $bad not"
[ "$keep" -eq 1 ] && echo "runs kept in $work"
[ "$rows" -gt 0 ] && [ "$bad" -eq 0 ]
