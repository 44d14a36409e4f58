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
# ensure_tinyshakespeare: make data/tinyshakespeare/ shards from the local copies in ../shared/data
# (or SHARED_DATA=dir) if they are not there yet.
ensure_tinyshakespeare() {
    [ -f data/tinyshakespeare/tiny_shakespeare_train.bin ] && return 0
    local shared=${SHARED_DATA:-../shared/data}
    python3 data/tinyshakespeare.py --text "$shared/tinyshakespeare/input.txt" --bpe-dir "$shared/gpt2" >/dev/null
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
