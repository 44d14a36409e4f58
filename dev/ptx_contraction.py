#!/usr/bin/env python3
"""
ptx_contraction.py: the kernels behind a bit-identity claim contain no fused multiply-add that
nvcc formed on its own. nvcc contracts a * b + c into fma.rn.f32 by default (-fmad=true; CUDA C++
Best Practices Guide, "Floating Point Math"), while the CPU twin rounds as its source says; a
kernel that spells every rounding out (__fmul_rn, __fadd_rn, __fmaf_rn) compiles to the same
fma.rn.f32 instructions with contraction on or off. So each kernel below is compiled to PTX for
sm_90 twice, with -fmad=true and -fmad=false, and the fma.rn.f32 instructions in its body are
counted: equal counts mean every fused multiply-add there is one the source asked for (and the
twin makes with fmaf); more with -fmad=true is a contraction the twin does not make.
Kernels (file: the claim):
  kernels/adamw.cuh adamw_kernel: the ZeRO-Offload host AdamW (cpu/adamw.h) equals the device's
  kernels/adamw.cuh adamw_grad_scale_kernel: the clip factor both optimizers use
  kernels/quantize.cuh quantize_blocks_kernel, dequantize_blocks_kernel<float|bf16>: ZeRO++
      codes, scales and the dequantize-accumulate equal the CPU build's (cpu/quantize.h)
Prints one PASS/FAIL line per kernel and one INFO line with the counts; exits 1 on a failure.
"""
import os
import re
import subprocess
import sys
import tempfile

KERNELS = [  # (PTX entry name pattern, readable name)
    (r"adamw_kernel", "adamw_kernel"),
    (r"adamw_grad_scale_kernel", "adamw_grad_scale_kernel"),
    (r"quantize_blocks_kernel", "quantize_blocks_kernel"),
    (r"dequantize_blocks_kernelIfE", "dequantize_blocks_kernel<float>"),
    (r"dequantize_blocks_kernelI13__nv_bfloat16E", "dequantize_blocks_kernel<bf16>"),
]

SOURCE = """
#include "kernels/adamw.cuh"
#include "kernels/quantize.cuh"
template __global__ void dequantize_blocks_kernel<float>(float*, const uint8_t*, const float*, size_t, int, int, int);
template __global__ void dequantize_blocks_kernel<bf16>(bf16*, const uint8_t*, const float*, size_t, int, int, int);
"""


def entries(ptx):
    """{mangled entry name: body text} of every .entry in the PTX."""
    out = {}
    for m in re.finditer(r"\.entry\s+(\S+?)\s*\(", ptx):
        start = ptx.find("{", m.end())
        depth, i = 0, start
        while i < len(ptx):
            if ptx[i] == "{":
                depth += 1
            elif ptx[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        out[m.group(1)] = ptx[start:i]
    return out


def compile_ptx(root, src, fmad, nvcc, arch):
    out = src[:-3] + ("_fmad.ptx" if fmad else "_nofmad.ptx")
    cmd = [nvcc, "-ptx", "-O3", "-std=c++17", f"-arch=sm_{arch}", f"-fmad={'true' if fmad else 'false'}", "-I", root,
           src, "-o", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"FAIL ptx_contraction_compiles: {' '.join(cmd)}: {r.stderr.strip()[-400:]}")
        sys.exit(1)
    with open(out) as f:
        return entries(f.read())


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    nvcc = os.environ.get("NVCC", "nvcc")
    arch = os.environ.get("GPU_ARCH", "90")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "contraction.cu")
        with open(src, "w") as f:
            f.write(SOURCE)
        on, off = compile_ptx(root, src, True, nvcc, arch), compile_ptx(root, src, False, nvcc, arch)
    failures = 0
    for pattern, name in KERNELS:
        # the plain name must not also match a longer kernel name (quantize_ vs dequantize_)
        rx = re.compile(r"^_Z\d+" + pattern if not pattern.endswith("E") else pattern)
        found = [k for k in on if rx.search(k)]
        if len(found) != 1 or found[0] not in off:
            print(f"FAIL ptx_contraction_{name}_found: {len(found)} PTX entries match {pattern!r}; expected 1")
            failures += 1
            continue
        n_on = on[found[0]].count("fma.rn.f32")
        n_off = off[found[0]].count("fma.rn.f32")
        ok = n_on == n_off
        print(f"{'PASS' if ok else 'FAIL'} ptx_contraction_{name}: fma.rn.f32 {n_on} with -fmad=true, {n_off} with "
              f"-fmad=false; expected equal (every fused multiply-add written out, as its CPU twin makes it)")
        failures += not ok
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
