#!/usr/bin/env bash
# tier: quick
# Gradient noise scale meter (common/gns.h): unbiased |G|^2 / tr(Σ) estimates, their derived
# variances, B_simple recovery on synthetic gradients, EMA bias correction, bad inputs.
# The checks and their tolerances are described in tests/test_gns.c; it prints PASS/FAIL lines.
cd "$(dirname "$0")/.." || exit 1
source tests/lib.sh
if ! make -s build/test_gns >/tmp/t_40_gns.$$ 2>&1; then
    echo "FAIL gns_test_builds: $(tail -3 /tmp/t_40_gns.$$ | tr '\n' ' ')"; rm -f /tmp/t_40_gns.$$; exit 1
fi
rm -f /tmp/t_40_gns.$$
./build/test_gns
