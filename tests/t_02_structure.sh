#!/usr/bin/env bash
# Structure of the engine's sources (issue 26): no circles between files, each part of the unity
# build needs only the parts above it, no forward declarations across files outside zero/hooks.h
# tier: quick
# and zero/backend.h, common/ cpu/ kernels/ name nothing of zero/, the core's size, ZeroEngine's
# own fields. What each check measures and how: tests/structure_check.py's header.
cd "$(dirname "$0")/.." || exit 1
python3 tests/structure_check.py
