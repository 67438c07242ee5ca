"""Cost of the feature-map object (:class:`montecarlo.FeatureMap`) on the two hot paths, as ratios against a baseline
in the same process.

* ``map``: ``montecarlo.random_features(X, W, kind="prf")`` for N = 4096, d = 64, m = 256 (numpy float64 and
  float32) against the paper's PRF formula written inline (one product, one row offset, one exp).
* ``attention``: ``montecarlo.nn.PRFAttention`` forward (torch CPU, float32, bidirectional and causal, batch 1,
  4 heads, L = 1024, d_head = 64, m = 256) against ``torch.nn.functional.scaled_dot_product_attention`` on the
  same inputs.

Single-threaded (threadpoolctl and ``torch.set_num_threads(1)``), process CPU time, interleaved round-robin; the
ratio of the minima (the median ratio in brackets).  Run it on two trees and compare the ratios (issue 39: no
slowdown beyond noise).  Nothing here asserts.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._timing import finish_json, interleaved, parse_sections, ratio, section_parser  # noqa: E402
from theory.cli import main_runner  # noqa: E402

PROG = "python -m benchmarks.bench_feature_map"
SECTIONS = ("map", "attention")


def _cpu(fns, repeat):
    return interleaved(fns, repeat, clock=time.process_time)


def bench_map(quick):
    import montecarlo as mc

    n, d, m = 4096, 64, 256
    rows = []
    for dtype in (np.float64, np.float32):
        W = mc.sample_weights("simplex", d, m, rng=0).astype(dtype)
        X = (np.random.default_rng(1).standard_normal((n, d)) * 0.2).astype(dtype)

        def inline():
            z = X @ W.T
            z += (-np.sum(X * X, axis=1) - 0.5 * math.log(m))[:, None]
            np.exp(z, out=z)
            return z

        t = _cpu({"inline": inline, "prf": lambda: mc.random_features(X, W, "prf")}, 10 if quick else 30)
        rows.append({"dtype": np.dtype(dtype).name, "inline_ms": 1e3 * min(t["inline"]),
                     "prf_ms": 1e3 * min(t["prf"]), "prf_vs_inline": ratio(t, "prf", "inline")})
    print(f"\n## random_features(kind='prf'), N = {n}, d = {d}, m = {m} (one thread, CPU time)")
    for r in rows:
        print(f"{r['dtype']:<8} inline {r['inline_ms']:7.3f} ms  prf {r['prf_ms']:7.3f} ms  "
              f"prf/inline {r['prf_vs_inline'][0]:.3f} ({r['prf_vs_inline'][1]:.3f})")
    return rows


def bench_attention(quick):
    import torch

    from montecarlo.nn import PRFAttention

    torch.set_num_threads(1)
    L, d, m, heads = 1024, 64, 256, 4
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, heads, L, d, generator=g) * 0.5 for _ in range(3))
    rows = []
    for causal in (False, True):
        att = PRFAttention(d, m, "simplex", causal=causal, seed=0).eval()

        def prf(att=att):
            with torch.no_grad():
                return att(q, k, v)

        def sdpa(causal=causal):
            with torch.no_grad():
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

        t = _cpu({"sdpa": sdpa, "prf": prf}, 5 if quick else 15)
        rows.append({"causal": causal, "sdpa_ms": 1e3 * min(t["sdpa"]), "prf_ms": 1e3 * min(t["prf"]),
                     "prf_vs_sdpa": ratio(t, "prf", "sdpa")})
    print(f"\n## PRFAttention forward, torch CPU float32, (1, {heads}, {L}, {d}), m = {m} (one thread, CPU time)")
    for r in rows:
        print(f"causal={r['causal']!s:<5} sdpa {r['sdpa_ms']:8.2f} ms  prf {r['prf_ms']:8.2f} ms  "
              f"prf/sdpa {r['prf_vs_sdpa'][0]:.3f} ({r['prf_vs_sdpa'][1]:.3f})")
    return rows


def _main(argv):
    parser = section_parser(PROG, __doc__.split("\n")[0], SECTIONS, "bench_feature_map.json", quick_help="fewer repeats")
    args = parse_sections(parser, argv)
    from threadpoolctl import threadpool_limits

    out = {}
    with threadpool_limits(1):
        for name in args.only:
            out[name] = {"map": bench_map, "attention": bench_attention}[name](args.quick)
    finish_json(args.json, out)
    return 0


def main(argv=None):
    """Run the command line; returns the exit status (0 done, 2 bad options, 130 Ctrl-C, 143 SIGTERM)."""
    from montecarlo.experiments.runtime import run_terminable

    return run_terminable(main_runner, PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
