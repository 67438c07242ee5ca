"""Registers and spills of the fused causal kernels (montecarlo.nn._fused) per tile shape, without a GPU.

Each of the kernels is compiled by Triton for a CUDA architecture and its PTX assembled by Triton's own
ptxas with ``-v``, which reports the registers per thread and the bytes spilled to local memory: a static
proxy for what a GPU run would measure (a spill is slow; registers per thread times threads per program
bound how many programs share a multiprocessor).  Timings still need a GPU
(``benchmarks/gpu_session.sh``).

    python -m benchmarks.kernel_registers [--arch 90] [--precision ieee tf32] [--configs 16,32,4 16,32,8]

``--configs`` sets the tile path's shape; the fast path's kernels are compiled at the module's
``FAST_TILE``, ``FAST_NUM_WARPS`` and the feature block the launches use for the precision and d_v
(``FAST_FEATURE_BLOCK``, or ``FAST_FEATURE_BLOCK_SPILL_FREE`` for d_v > 64).

Run it in an environment without ``TRITON_INTERPRET`` (the tests' conftest sets it on machines without an
NVIDIA device).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

PROG = "python -m benchmarks.kernel_registers"
DEFAULT_CONFIGS = ("16,32,4", "16,32,8", "16,64,8", "32,16,4")


def _config(text):
    try:
        t, f, w = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a config is TILE,FEATURE_BLOCK,WARPS (three integers), got {text!r}")
    if t < 16 or f < 16 or w < 1 or t & (t - 1) or f & (f - 1) or w & (w - 1):
        raise argparse.ArgumentTypeError(f"tile and feature block are powers of two >= 16, warps a power of two, "
                                         f"got {text!r}")
    return t, f, w


def _parser():
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", type=int, default=90, help="CUDA compute capability x 10 (default 90: Hopper)")
    p.add_argument("--precision", nargs="+", choices=("ieee", "tf32", "bf16"), default=["ieee", "tf32"],
                   help="input_precision of the matrix products (default: both)")
    p.add_argument("--configs", nargs="+", type=_config, default=[_config(c) for c in DEFAULT_CONFIGS],
                   metavar="T,F,W", help=f"tile, feature block, warps (default {' '.join(DEFAULT_CONFIGS)})")
    p.add_argument("--chunk", type=int, default=256, help="chunk length b (default 256)")
    p.add_argument("--d-value", type=int, default=64, help="value width d_v (default 64)")
    return p


def registers(arch, prec, T, F, W, chunk=256, d_value=64):
    """{kernel: (registers per thread, spill-store bytes)} from ptxas -v."""
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import get_ptxas
    import torch
    from triton.compiler import ASTSource, compile

    from montecarlo.nn import _fused

    ptxas = get_ptxas(arch).path
    # the fast path's shape as the launches size it (module settings; m at least its feature block; the row
    # offsets' kernel, which has no products and no values, at the default sizes of its launch)
    wide = 2 * max(_fused.FAST_FEATURE_BLOCK, _fused.FAST_FEATURE_BLOCK_SPILL_FREE)
    fT, fF, BD = _fused._sizes(chunk, wide, d_value + 1, fast=True)
    rF = _fused._sizes(chunk, wide, 2, fast=True)[1]
    out = {}
    jobs = []
    # the values, their gradient and the features' x as the module's inputs give them: bf16 where the products are
    # TF32 or bf16, float32 for IEEE
    half = "*fp32" if prec == "ieee" else "*bf16"
    for name, ptrs, path in _fused.KERNELS:
        if path == "fast":
            F_ = rF if name == "_row_offsets_kernel" else fF
            consts, warps = dict(B=chunk, T=fT, F=F_, BD=BD, PREC=prec), _fused.FAST_NUM_WARPS
            if name == "_row_offsets_kernel":  # (it also sets the chunks' flags: GAP is its constexpr)
                consts["GAP"] = _fused.GAP
        else:
            consts, warps = dict(B=chunk, T=T, F=F, BD=BD, PREC=prec), W
        if "SUMMARY" in getattr(_fused, name).arg_names:  # (the key and value gradients with the summaries' term)
            consts["SUMMARY"] = True
        sig = ({p: "*i32" if p == "FLAG" else half if p in ("V", "GV") else "*fp32" for p in ptrs.split()}
               | {"M": "i32", "D": "i32"} | {c: "constexpr" for c in consts})
        jobs.append((name, sig, consts, warps))
    # the features' kernels (d = 64, m = 128; the forward's products by x's dtype, _fused.feature_products, the
    # gradient's IEEE, as launched)
    fsig = {"X": half, "W": "*fp32", "BIAS": "*fp32", "LF": "*fp32", "R": "i32", "d": "i32", "M": "i32",
            "HALF_S": "fp32"}
    gsig = {"X": half, "W": "*fp32", "G": "*fp32", "GX": half, "R": "i32", "d": "i32", "M": "i32",
            "S": "fp32"}
    x_dtype = torch.float32 if prec == "ieee" else torch.bfloat16
    for name, sig, fprec, grad in zip(_fused.FEATURE_KERNELS, (fsig, gsig), (_fused.feature_products(x_dtype), "ieee"),
                                      (False, True)):
        fmeta = _fused._feature_meta(64, 128, fprec, grad=grad)
        fwarps = fmeta.pop("num_warps")
        jobs.append((name, sig | {c: "constexpr" for c in fmeta}, fmeta, fwarps))
    # the ratio's kernels (float32 numerators and masses, a mask, bf16 outputs and cotangents; d_v = 64)
    rmeta = dict(HAS_SEEN=True, T=_fused.RATIO_TILE, BD=BD)
    rsig = {"ND": "*fp32", "SEEN": "*u8", "OUT": "*bf16"}
    rgsig = {"ND": "*fp32", "SEEN": "*u8", "G": "*bf16", "GND": "*fp32"}
    for name, sig in zip(_fused.RATIO_KERNELS, (rsig, rgsig)):
        sig = sig | {x: "i32" for x in ("R", "L", "Lp", "D")} | {c: "constexpr" for c in rmeta}
        jobs.append((name, sig, rmeta, _fused.RATIO_NUM_WARPS))
    # the scans over the chunks (float32 offsets and states; a block of SCAN_BLOCK features, d_v + 1 columns)
    for name, ptrs in _fused.SCAN_KERNEL_ARGS:
        consts = dict(F=_fused.SCAN_BLOCK) | ({} if name == "_chunk_offsets_kernel" else dict(BD=BD))
        sizes = ("N", "M") if name == "_chunk_offsets_kernel" else ("N", "M", "D")
        sig = {p: "*fp32" for p in ptrs.split()} | {x: "i32" for x in sizes} | {c: "constexpr" for c in consts}
        jobs.append((name, sig, consts, _fused.SCAN_NUM_WARPS))
    for name, sig, consts, warps in jobs:
        kernel = compile(ASTSource(fn=getattr(_fused, name), signature=sig, constexprs=consts),
                         target=GPUTarget("cuda", arch, 32), options={"num_warps": warps})
        if not kernel.asm.get("cubin"):
            raise RuntimeError(f"Triton produced no cubin for {name}")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "k.ptx")
            with open(path, "w") as fh:
                fh.write(kernel.asm["ptx"])
            suffix = "a" if arch >= 90 else ""
            r = subprocess.run([ptxas, "-v", "--gpu-name", f"sm_{arch}{suffix}", path, "-o", os.devnull],
                               capture_output=True, text=True, timeout=300)
        info = r.stdout + r.stderr
        regs = re.search(r"Used (\d+) registers", info)
        spill = re.search(r"(\d+) bytes spill stores", info)
        if r.returncode or not regs:
            last = info.strip().splitlines()[-1] if info.strip() else f"exit {r.returncode}"
            raise RuntimeError(f"ptxas failed on {name}: {last}")
        out[name.strip("_").replace("_kernel", "")] = (int(regs.group(1)), int(spill.group(1)) if spill else 0)
    return out


def main(argv=None):
    args = _parser().parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        print(f"{PROG}: error: TRITON_INTERPRET=1 is set (the interpreter compiles nothing); unset it",
              file=sys.stderr)
        return 2
    try:
        import triton  # noqa: F401
    except ImportError:
        print(f"{PROG}: error: needs Triton (pip install 'simplex-rf[fused]')", file=sys.stderr)
        return 2
    print(f"sm_{args.arch}, chunk {args.chunk}, d_v {args.d_value}: registers per thread / spill-store bytes")
    for prec in args.precision:
        for T, F, W in args.configs:
            try:
                res = registers(args.arch, prec, T, F, W, args.chunk, args.d_value)
            except Exception as exc:  # one config's failure is a row of the table
                print(f"  {prec:4s} T={T:2d} F={F:2d} warps={W}: {type(exc).__name__}: {exc}", flush=True)
                continue
            cells = "  ".join(f"{k} {r}/{s}" for k, (r, s) in res.items())
            print(f"  {prec:4s} T={T:2d} F={F:2d} warps={W}: {cells}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
