# Helpers for test groups (source it). check NAME CMD...: PASS if CMD exits 0.
# check_fails NAME PATTERN CMD...: PASS if CMD exits 1 and its stderr+stdout contain PATTERN.
check() { local name=$1; shift; if "$@" >/tmp/check.$$ 2>&1; then echo "PASS $name"; else echo "FAIL $name: $(tail -3 /tmp/check.$$ | tr '\n' ' ')"; fi; rm -f /tmp/check.$$; }
check_fails() {
    local name=$1 pattern=$2; shift 2
    local out rc
    out=$("$@" 2>&1); rc=$?
    if [ "$rc" -eq 1 ] && grep -q -- "$pattern" <<<"$out"; then echo "PASS $name"
    else echo "FAIL $name: exit $rc, wanted 1 and '$pattern'; got: $(tail -2 <<<"$out" | tr '\n' ' ')"; fi
}
# shared_data: the directory of local data copies: $SHARED_DATA, else shared/data beside the
# repository root (found from this file, whatever the working directory), as an absolute path.
shared_data() {
    if [ -n "${SHARED_DATA:-}" ]; then echo "$SHARED_DATA"
    else echo "$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/shared/data"; fi
}
# check_shared_data REL...: 0 if every REL (a path under $(shared_data)) is a file; else prints one
# line naming the first missing file and SHARED_DATA (t_20_data's and run_tinyshakespeare's
# wording), and returns 1. Callers put the line after "FAIL name: ".
check_shared_data() {
    local dir rel; dir=$(shared_data)
    for rel in "$@"; do
        [ -f "$dir/$rel" ] && continue
        echo "$dir/$rel missing; expected SHARED_DATA=dir holding tinyshakespeare/input.txt and gpt2/{encoder.json,vocab.bpe} (README: Run it)"
        return 1
    done
}
# ensure_tinyshakespeare: make data/tinyshakespeare/ shards from the local copies in
# $(shared_data) if they are not there yet. On failure prints one line (the missing file and
# SHARED_DATA, or what data/tinyshakespeare.py said) and returns 1; a group says it once:
#   why=$(ensure_tinyshakespeare) || { echo "FAIL tinyshakespeare_data: $why"; exit 1; }
ensure_tinyshakespeare() {
    [ -f data/tinyshakespeare/tiny_shakespeare_train.bin ] && return 0
    local shared err
    shared=$(shared_data)
    check_shared_data tinyshakespeare/input.txt gpt2/encoder.json gpt2/vocab.bpe || return 1
    err=$(python3 data/tinyshakespeare.py --text "$shared/tinyshakespeare/input.txt" --bpe-dir "$shared/gpt2" 2>&1 >/dev/null) || {
        echo "data/tinyshakespeare.py: $(tail -1 <<<"$err")"; return 1; }
}
# cmp_run_files A B: two checkpoint files written by different runs hold the same bytes but for
# the run id each run stamps on its files (README "Many nodes"): a model file's header slots
# 11-12 (bytes 44-51, common/model_file.h), a state file's field ZS_RUN_ID (int64 28: bytes
# 224-231, common/state_file.h). Everything else, headers included, is compared.
cmp_run_files() {
    local at
    case "$(basename "$1")" in model_*) at=44 ;; state_*) at=224 ;; *) cmp "$1" "$2"; return ;; esac
    cmp -n "$at" "$1" "$2" && cmp -i $((at + 8)) "$1" "$2"
}

# cuda_headers NAME WHAT: 0 when the CUDA toolkit's headers are there (the emulation under dev/emu
# needs them, not a GPU; CUDA_HOME is exported); else one line and 1: FAIL NAME on CI, which has
# the toolkit, or SKIP NAME elsewhere, saying that WHAT did not run.
cuda_headers() {
    [ -d /usr/local/cuda/include ] && export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
    [ -f "${CUDA_HOME:-/usr/local/cuda}/include/cuda_runtime.h" ] && return 0
    if [ -n "${CI:-}" ]; then echo "FAIL $1: cuda_runtime.h not found under ${CUDA_HOME:-/usr/local/cuda}; expected the CUDA toolkit on CI"
    else echo "SKIP $1: no CUDA toolkit headers; $2 did not run"; fi
    return 1
}
