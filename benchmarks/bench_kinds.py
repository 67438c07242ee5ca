"""Cost of the feature-kind records: each kind's map and closed form as ratios against baselines in the same process.

* ``map``: the feature maps of every positive kind (``montecarlo.random_features``) for N = 4096, d = 64,
  m = 640, numpy float64 and float32, against the formula of the paper's PRFs written inline (one product,
  one row offset, one exp: what ``prf_features`` computed before the records, commit 1f5ba90).  Goals: PRF
  through the record <= 1.05x the inline formula (issue 18), OPRF <= 1.2x PRF (issue 19).
* ``theory``: ``theory.kernel_mse(kind="oprf")`` (A = None: the optimal A) against the PRF call at d = 64,
  30 digits, for the iid, orthogonal and simplex couplings (goal <= 1.5x, issue 19); hyperbolic for the record.
* ``estimators``: ``montecarlo.empirical_mse`` of every kind against the PRF call (fast path, d = 64).

Single-threaded (threadpoolctl limits BLAS and the row blocks to one thread) and timed with process CPU time,
interleaved round-robin, ratio of the minima (the median ratio is printed too): the shared 2-core machines are
noisy.  Nothing here asserts.
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

PROG = "python -m benchmarks.bench_kinds"

SECTIONS = ("map", "theory", "estimators")


def _cpu_interleaved(fns, repeat):
    return interleaved(fns, repeat, clock=time.process_time)


def bench_map(quick):
    import montecarlo as mc
    from montecarlo.oprf import data_optimal_a

    n, d, m = (1024, 64, 256) if quick else (4096, 64, 640)
    rows = []
    for dtype in (np.float64, np.float32):
        W = mc.sample_weights("simplex", d, m, rng=0).astype(dtype)
        X = (np.random.default_rng(1).standard_normal((n, d)) * 0.2).astype(dtype)
        a = data_optimal_a(X)

        def inline():  # the paper's PRF map written out: what prf_features computed at 1f5ba90
            z = X @ W.T
            z += (-np.sum(X * X, axis=1) - 0.5 * math.log(m))[:, None]
            np.exp(z, out=z)
            return z

        fns = {"inline": inline, "prf": lambda: mc.random_features(X, W, "prf"),
               "oprf": lambda: mc.random_features(X, W, "oprf", A=a),
               "hyperbolic": lambda: mc.random_features(X, W, "hyperbolic")}
        t = _cpu_interleaved(fns, 5 if quick else 15)
        rows.append({"dtype": np.dtype(dtype).name, "ms": {k: 1e3 * min(v) for k, v in t.items()},
                     "prf_vs_inline": ratio(t, "prf", "inline"), "oprf_vs_prf": ratio(t, "oprf", "prf"),
                     "hyperbolic_vs_prf": ratio(t, "hyperbolic", "prf")})
    print(f"\n## feature maps, N = {n}, d = {d}, m = {m} (one thread, CPU time)")
    print(f"{'dtype':<8} {'inline ms':>9} {'prf ms':>7} {'prf/inline (<=1.05)':>20} {'oprf/prf (<=1.2)':>17} "
          f"{'hyperbolic/prf':>15}")
    for r in rows:
        print(f"{r['dtype']:<8} {r['ms']['inline']:>9.2f} {r['ms']['prf']:>7.2f} "
              f"{r['prf_vs_inline'][0]:>11.3f} ({r['prf_vs_inline'][1]:.3f}) {r['oprf_vs_prf'][0]:>8.3f} "
              f"({r['oprf_vs_prf'][1]:.3f}) {r['hyperbolic_vs_prf'][0]:>7.3f} ({r['hyperbolic_vs_prf'][1]:.3f})")
    return rows


def bench_theory(quick):
    from mpmath import mp

    import theory

    rows = []
    kw = dict(x_norm="0.5", y_norm="0.5")
    for coupling in ("iid", "orthogonal", "simplex"):
        for v in ("0.5", "1"):
            with mp.workdps(30):
                fns = {"prf": lambda: theory.kernel_mse(coupling, 64, v, **kw),
                       "oprf": lambda: theory.kernel_mse(coupling, 64, v, kind="oprf", **kw),
                       "hyperbolic": lambda: theory.kernel_mse(coupling, 64, v, kind="hyperbolic", **kw)}
                t = _cpu_interleaved(fns, 3 if quick else 7)
            rows.append({"coupling": coupling, "v": v, "prf_ms": 1e3 * min(t["prf"]),
                         "oprf_vs_prf": ratio(t, "oprf", "prf"), "hyperbolic_vs_prf": ratio(t, "hyperbolic", "prf")})
    print("\n## theory.kernel_mse at d = 64, 30 digits (CPU time)")
    print(f"{'coupling':<11} {'v':>4} {'prf ms':>8} {'oprf/prf (<=1.5)':>17} {'hyperbolic/prf':>15}")
    for r in rows:
        print(f"{r['coupling']:<11} {r['v']:>4} {r['prf_ms']:>8.3f} {r['oprf_vs_prf'][0]:>8.3f} "
              f"({r['oprf_vs_prf'][1]:.3f}) {r['hyperbolic_vs_prf'][0]:>7.3f} ({r['hyperbolic_vs_prf'][1]:.3f})")
    return rows


def bench_estimators(quick):
    import montecarlo as mc
    from theory import feature_kinds as fk

    d, n = 64, (20_000 if quick else 100_000)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(d)
    x *= 0.4 / np.linalg.norm(x)
    y = x + 0.3 * rng.standard_normal(d) / math.sqrt(d)
    fns = {k: (lambda k=k: mc.empirical_mse("simplex", x, y, d, n, fk.get(k).kernels[0], rng=1, kind=k))
           for k in mc.KINDS}  # (each kind's first kernel: trig_softmax estimates the softmax kernel only)
    t = _cpu_interleaved(fns, 3 if quick else 5)
    rows = [{"kind": k, "ms": 1e3 * min(t[k]), "vs_prf": ratio(t, k, "prf")} for k in mc.KINDS]
    print(f"\n## empirical_mse('simplex', d = {d}, m = d, n_draws = {n}), fast path (CPU time)")
    for r in rows:
        print(f"{r['kind']:<11} {r['ms']:>9.1f} ms  {r['vs_prf'][0]:.3f}x PRF ({r['vs_prf'][1]:.3f})")
    return rows


def _main(argv):
    parser = section_parser(PROG, __doc__.split("\n")[0], SECTIONS, "bench_kinds.json", quick_help="smaller sizes and fewer repeats")
    args = parse_sections(parser, argv)
    from threadpoolctl import threadpool_limits

    out = {}
    with threadpool_limits(1):
        for name in args.only:
            out[name] = {"map": bench_map, "theory": bench_theory, "estimators": bench_estimators}[name](args.quick)
    finish_json(args.json, out)
    return 0


def main(argv=None):
    """Run the command line; returns the exit status (0 done, 2 bad options, 130 Ctrl-C, 143 SIGTERM; the
    ``--json`` path is checked before any timing, and an interrupted run leaves no partial file)."""
    from montecarlo.experiments.runtime import run_terminable

    return run_terminable(main_runner, PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
