#!/usr/bin/env python3
"""rewrite.py: copy the project's C/CUDA sources into a build folder, rewritten so that g++ can
compile them against dev/emu/emu.h (the CPU emulation of CUDA; see that file).

Usage: python3 dev/emu/rewrite.py OUT_DIR
Two constructs of CUDA C++ are not C++ and are rewritten, on the same line, so line numbers stay:
  kernel<<<grid, block[, smem[, stream]]>>>(args)
      -> emu::launch(emu::LaunchConfig(grid, block[, smem[, stream]]), kernel, "kernel")(args)
  extern __shared__ [__align__(n)] T name[];
      -> #define name ((T*)emu::state.dynamic_smem)   (the launch's fenced dynamic shared memory)
Each copy starts with a #line directive naming the original file, so compiler messages point at
the real source. A file is written only when its content changed (make's timestamps stay useful).
Exits 1 with one line on stderr if a launch or dynamic shared declaration is not recognised.
"""
import os
import re
import sys

SOURCE_DIRS = [".", "common", "cpu", "kernels", "zero", "zero/gpu", "zero/cluster", "zero/offload",
               "zero/zeropp", "zero/trace", "zero/tied_rows", "zero/reshard", "plan", "train", "model", "dev", "dev/test_kernels", "dev/emu"]
EXTENSIONS = (".c", ".h", ".cu", ".cuh")

# name or name<template args>, then <<<config>>>, then the opening parenthesis of the arguments
LAUNCH = re.compile(r"([A-Za-z_]\w*(?:<[^<>()]*>)?)\s*<<<(.*?)>>>\s*\(", re.S)
DYNAMIC_SHARED = re.compile(r"extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s*)?([\w\s]+?)\s*(\w+)\s*\[\s*\]\s*;")


def launch(m):
    # line breaks outside the config (between name and <<<, or >>> and '(') are kept at the end,
    # so the lines after the launch keep their numbers
    outside = m.group(0).replace(m.group(2), "", 1)
    return 'emu::launch(emu::LaunchConfig(%s), %s, "%s")(%s' % (m.group(2), m.group(1), m.group(1), "\n" * outside.count("\n"))


def rewrite(text, path):
    text = LAUNCH.sub(launch, text)
    text = DYNAMIC_SHARED.sub(lambda m: "#define %s ((%s*)emu::state.dynamic_smem)" % (m.group(2), m.group(1).strip()), text)
    for token in ("<<<", ">>>", "extern __shared__"):
        if token in text:
            line = text[: text.index(token)].count("\n") + 1
            sys.exit("error: %s:%d: '%s' not recognised by dev/emu/rewrite.py" % (path, line, token))
    return text


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: rewrite.py OUT_DIR")
    out_dir = sys.argv[1]
    count = 0
    for source_dir in SOURCE_DIRS:
        if not os.path.isdir(source_dir):
            continue
        names = sorted(os.listdir(source_dir))
        for name in names:
            path = os.path.normpath(os.path.join(source_dir, name))
            if not name.endswith(EXTENSIONS) or not os.path.isfile(path):
                continue
            with open(path, encoding="utf-8") as f:
                text = f.read()
            if name.endswith((".cu", ".cuh")):
                text = rewrite(text, path)
            text = '#line 1 "%s"\n%s' % (os.path.abspath(path), text)
            target = os.path.join(out_dir, path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            old = None
            if os.path.exists(target):
                with open(target, encoding="utf-8") as f:
                    old = f.read()
            if old != text:
                with open(target, "w", encoding="utf-8") as f:
                    f.write(text)
            count += 1
    print("rewrite.py: %d files in %s" % (count, out_dir))


if __name__ == "__main__":
    main()
