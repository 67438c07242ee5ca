"""Speed of the torch PRF attention per input dtype: ratios against float32 in the same process.

Run ``python -m benchmarks.bench_attention --quick`` (one sequence length,
fewer repeats: well under 2 minutes on one GPU or two CPU cores) or without
``--quick`` (L = 1024 and 4096, more repeats); ``--device cpu|cuda`` (default:
every available device), ``--threads N`` (torch intra-op threads on the CPU),
``--json [PATH]`` (default ``benchmarks/results/bench_attention.json``).
Nothing here asserts.

For each device, mode (bidirectional, causal) and sequence length, with
(batch, heads) = (2, 4), d = 64, m = 130 (the paper's Performers) and
coupling ``simplex``, one :class:`~montecarlo.experiments.attention_torch.PRFAttention`
runs on the same Q, K, V in float32, bfloat16 and float16, and torch's
``scaled_dot_product_attention`` (exact attention, the baseline a user would
replace) runs in float32.  Callables are timed round-robin (CUDA synchronised
after each call); each ratio is the ratio of the minima over repeats (the
median ratio is stored too).

What to expect: the module computes its features in float32 whatever the
input dtype (the half types are upcast on entry and the output cast back), so
bf16/fp16 cost about what float32 costs, plus the two conversions; their gain
is the memory of the activations around the module, not its speed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

from benchmarks._timing import interleaved, ratio

DTYPES = ("float32", "bfloat16", "float16")


def _devices(choice, torch):
    if choice is not None:
        if choice == "cuda" and not torch.cuda.is_available():
            raise SystemExit("python -m benchmarks.bench_attention: error: --device cuda but CUDA is not available")
        return [choice]
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def bench(device, seq_lens, repeat, torch):
    """Rows of timings for one device (milliseconds and ratios)."""
    from montecarlo.experiments.attention_torch import PRFAttention

    F = torch.nn.functional
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    rows = []
    for causal in (False, True):
        mod = PRFAttention(64, 130, "simplex", causal=causal, seed=0, device=device).eval()
        for L in seq_lens:
            g = torch.Generator(device=device).manual_seed(0)
            q, k, v = (0.5 * torch.randn(2, 4, L, 64, generator=g, device=device) for _ in range(3))
            inputs = {name: tuple(t.to(getattr(torch, name)) for t in (q, k, v)) for name in DTYPES}

            def timed(fn):
                def call():
                    with torch.no_grad():
                        fn()
                    sync()
                return call

            fns = {name: timed(lambda x=x: mod(*x)) for name, x in inputs.items()}
            fns["sdpa_float32"] = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
            t = interleaved(fns, repeat)
            for name in DTYPES:
                rows.append({
                    "device": device, "causal": causal, "L": L, "dtype": name,
                    "ms": 1e3 * min(t[name]),
                    "vs_float32": ratio(t, name, "float32"),
                    "vs_sdpa_float32": ratio(t, name, "sdpa_float32"),
                    "sdpa_float32_ms": 1e3 * min(t["sdpa_float32"]),
                })
            print(f"  {device:4s} {'causal' if causal else 'bidir ':6s} L={L:5d}: " + "  ".join(
                f"{n} {1e3 * min(t[n]):7.2f} ms" for n in (*DTYPES, "sdpa_float32")), flush=True)
    return rows


def table(rows):
    lines = ["device | mode | L | dtype | ms | / float32 (min, median) | / SDPA float32 (min)",
             "--- | --- | --- | --- | --- | --- | ---"]
    for r in rows:
        lines.append(f"{r['device']} | {'causal' if r['causal'] else 'bidirectional'} | {r['L']} | {r['dtype']} | "
                     f"{r['ms']:.2f} | {r['vs_float32'][0]:.2f}, {r['vs_float32'][1]:.2f} | "
                     f"{r['vs_sdpa_float32'][0]:.2f}")
    return "\n".join(lines)


def _parser():
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_attention",
                                description="Speed of the torch PRF attention in bfloat16/float16 vs float32 "
                                            "(ratios in the same process), on the CPU and on CUDA when available.")
    p.add_argument("--quick", action="store_true", help="L = 1024 only, 5 repeats (default: L = 1024, 4096; 15)")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None, help="one device (default: every available)")
    p.add_argument("--threads", type=int, default=None, metavar="N", help="torch CPU threads (default: torch's)")
    p.add_argument("--json", nargs="?", const="benchmarks/results/bench_attention.json", default=None, metavar="PATH",
                   help="also write the results as JSON (default path: %(const)s)")
    return p


def main(argv=None):
    args = _parser().parse_args(argv)
    try:
        import torch
    except ImportError:
        print("python -m benchmarks.bench_attention: error: needs torch", file=sys.stderr)
        return 2
    if args.threads is not None:
        if args.threads < 1:
            print("python -m benchmarks.bench_attention: error: --threads must be >= 1", file=sys.stderr)
            return 2
        torch.set_num_threads(args.threads)
    seq_lens = (1024,) if args.quick else (1024, 4096)
    repeat = 5 if args.quick else 15
    t0 = time.perf_counter()
    rows = []
    print(f"PRFAttention(64, 130, 'simplex'), (batch, heads) = (2, 4), {repeat} repeats; ratios of minima")
    for device in _devices(args.device, torch):
        rows += bench(device, seq_lens, repeat, torch)
    print()
    print(table(rows))
    meta = {"torch": torch.__version__, "python": platform.python_version(), "threads": torch.get_num_threads(),
            "cuda_device": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "loadavg": os.getloadavg() if hasattr(os, "getloadavg") else None,
            "seconds": time.perf_counter() - t0}
    print(f"\n{meta}")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        tmp = args.json + ".tmp"
        with open(tmp, "w") as fh:
            json.dump({"meta": meta, "rows": rows}, fh, indent=1)
        os.replace(tmp, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
