"""Speed (and HD-product accuracy) of ``montecarlo``: ratios against baselines timed in the same process.

Run ``python -m benchmarks.bench_montecarlo`` (``--quick`` for a smaller run,
``--accuracy`` to add the KS-distance / kernel-bias tables of the fast
couplings (``--only bias``: the bias-by-d table behind
:data:`montecarlo.FAST_BIAS_RESOLVED_D`), ``--json [PATH]`` to write the numbers, by default to
``benchmarks/results/bench_montecarlo.json``, which is gitignored).

Every ratio compares two timings taken in the same process, interleaved
round-robin so that both see the same machine load, and reports the ratio of
the minima over repeats (the median ratio is also stored).  Goals from
issue 3 are printed next to each ratio; nothing here asserts.

Sections
--------
pointwise   pointwise PRF MSE at d = 64: blocks/s of the fast isotropic path
            vs the full Haar path (goal >= 50x) and vs drawing the same random
            numbers bare (d normals + d chi^2 per block; goal <= 2x).
prf         PRF features, N = 4096, d = 64, m = 640, vs one bare X @ W.T (goal <= 2x).
sampling    simplex vs orthogonal blocks at d = 64 (goal <= 1.1x), per backend.
partial     m = 8 rows at d = 1024: only those rows vs a whole block then slicing.
haar        Haar routes (batched QR, CPU QR + transfer, Householder products)
            per backend/device and d; the fastest is the recommended default.
fast        fast_simplex (HD-product, FWHT) vs simplex (dense): sample one
            block (m = d) and project N = 256 points; crossover d and the
            growth exponents (least-squares slope of log time vs log d).
"""

from __future__ import annotations

import os
import platform
import sys
import warnings

import numpy as np

import montecarlo as mc

try:  # optional backend
    import torch
except ImportError:  # pragma: no cover
    torch = None

from benchmarks._timing import finish_json, interleaved, parse_sections, ratio, section_parser  # noqa: E402
from theory.cli import main_runner  # noqa: E402

PROG = "python -m benchmarks.bench_montecarlo"
#: Sections of ``--only`` (the last two are the ``--accuracy`` ones).
SECTIONS = ("pointwise", "prf", "sampling", "partial", "haar", "fast", "accuracy", "bias")


# ---------------------------------------------------------------------------
# timing helpers


def sync(device):
    if torch is not None and device is not None and str(device).startswith("cuda"):
        torch.cuda.synchronize()


def _backends():
    out = [("numpy", None)]
    if torch is not None:
        out.append(("torch", "cpu"))
        if torch.cuda.is_available():
            out.append(("torch", "cuda"))
    return out


def _points(d, v=0.6, delta=0.3):
    x = np.zeros(d)
    y = np.zeros(d)
    x[0] = y[0] = v / 2
    x[1], y[1] = delta, -delta
    return x, y


# ---------------------------------------------------------------------------
# sections


def bench_pointwise(quick):
    d = 64
    n_fast = 50_000 if quick else 200_000
    n_full = 500 if quick else 2_000
    x, y = _points(d)
    rng = np.random.default_rng(0)
    rows = []
    for coupling in ("simplex", "orthogonal"):
        fns = {
            "fast": lambda: mc.empirical_mse(coupling, x, y, d, n_fast, rng=1),
            "full": lambda: mc.empirical_mse(coupling, x, y, d, n_full, rng=1, path="full"),
            "bare": lambda: (rng.standard_normal((n_fast, d)), rng.chisquare(d, (n_fast, d))),
        }
        t = interleaved(fns, 3 if quick else 5)
        per = {k: min(v) / (n_fast if k != "full" else n_full) for k, v in t.items()}
        rows.append({
            "coupling": coupling, "d": d,
            "fast_blocks_per_s": 1 / per["fast"], "full_blocks_per_s": 1 / per["full"],
            "bare_blocks_per_s": 1 / per["bare"],
            "fast_vs_full": per["full"] / per["fast"], "fast_vs_bare": per["fast"] / per["bare"],
        })
    print("\n## Pointwise PRF MSE, d = 64 (numpy, float64), blocks of d = 64 features")
    print(f"{'coupling':<11} {'fast blk/s':>11} {'full blk/s':>11} {'bare blk/s':>11} "
          f"{'fast/full speedup (goal>=50)':>29} {'fast/bare cost (goal<=2)':>25}")
    for r in rows:
        print(f"{r['coupling']:<11} {r['fast_blocks_per_s']:>11.3g} {r['full_blocks_per_s']:>11.3g} "
              f"{r['bare_blocks_per_s']:>11.3g} {r['fast_vs_full']:>29.1f} {r['fast_vs_bare']:>25.2f}")
    return rows


def bench_prf(quick):
    n, d, m = 4096, 64, 640
    rows = []
    for name, device in _backends():
        for dtype in ("float64", "float32"):
            w = mc.sample_weights("simplex", d, m, rng=0, xp=name, device=device, dtype=dtype)
            xn = np.random.default_rng(1).standard_normal((n, d)) * 0.2
            if name == "numpy":
                x = xn.astype(dtype)
                wt = w.T
                mm = lambda: x @ wt  # noqa: E731
            else:
                x = torch.asarray(xn, device=device, dtype=getattr(torch, dtype))
                wt = w.mT
                mm = lambda: x @ wt  # noqa: E731

            def prf():
                mc.prf_features(x, w)
                sync(device)

            def base():
                mm()
                sync(device)

            t = interleaved({"prf": prf, "matmul": base}, 10 if quick else 30)
            r_min, r_med = ratio(t, "prf", "matmul")
            rows.append({"backend": name, "device": str(device or "cpu"), "dtype": dtype,
                         "matmul_ms": 1e3 * min(t["matmul"]), "prf_ms": 1e3 * min(t["prf"]),
                         "ratio": r_min, "ratio_median": r_med})
    print(f"\n## PRF features N = {n}, d = {d}, m = {m} vs one bare X @ W.T (goal <= 2x)")
    print(f"{'backend':<8} {'device':<6} {'dtype':<8} {'matmul ms':>10} {'prf ms':>8} {'ratio':>6} {'(median)':>9}")
    for r in rows:
        print(f"{r['backend']:<8} {r['device']:<6} {r['dtype']:<8} {r['matmul_ms']:>10.2f} {r['prf_ms']:>8.2f} "
              f"{r['ratio']:>6.2f} {r['ratio_median']:>9.2f}")
    return rows


def bench_sampling(quick):
    d = 64
    blocks = 100 if quick else 400
    rows = []
    for name, device in _backends():
        for route in mc.HAAR_ROUTES:
            if route == "cpu_qr" and name == "numpy":
                continue

            def draw(c):
                def f():
                    mc.sample_weights(c, d, d * blocks, rng=0, xp=name, device=device, haar_route=route)
                    sync(device)
                return f

            t = interleaved({"simplex": draw("simplex"), "orthogonal": draw("orthogonal")}, 5 if quick else 15)
            r_min, r_med = ratio(t, "simplex", "orthogonal")
            rows.append({"backend": name, "device": str(device or "cpu"), "route": route,
                         "orthogonal_us_per_block": 1e6 * min(t["orthogonal"]) / blocks,
                         "simplex_us_per_block": 1e6 * min(t["simplex"]) / blocks,
                         "ratio": r_min, "ratio_median": r_med})
    print("\n## Sampling cost, simplex vs orthogonal blocks, d = 64 (goal <= 1.1x)")
    print(f"{'backend':<8} {'device':<6} {'route':<12} {'orth us/blk':>12} {'simp us/blk':>12} {'ratio':>6} "
          f"{'(median)':>9}")
    for r in rows:
        print(f"{r['backend']:<8} {r['device']:<6} {r['route']:<12} {r['orthogonal_us_per_block']:>12.1f} "
              f"{r['simplex_us_per_block']:>12.1f} {r['ratio']:>6.3f} {r['ratio_median']:>9.3f}")
    return rows


def bench_partial(quick):
    """m << d: drawing only the m rows (QR of a d x m Gaussian, O(d m^2)) vs a whole d x d block then slicing."""
    d, m = (512, 4) if quick else (1024, 8)
    rows = []
    for c in ("orthogonal", "simplex"):
        t = interleaved({"rows": lambda c=c: mc.sample_weights(c, d, m, rng=0),
                         "block": lambda c=c: mc.sample_weights(c, d, d, rng=0)[:m]}, 3 if quick else 7)
        r_min, r_med = ratio(t, "block", "rows")
        rows.append({"coupling": c, "d": d, "m": m, "rows_ms": 1e3 * min(t["rows"]),
                     "block_ms": 1e3 * min(t["block"]), "speedup": r_min, "speedup_median": r_med})
    print(f"\n## m = {m} rows at d = {d}: only the rows vs a whole block then slicing (numpy)")
    print(f"{'coupling':<12} {'rows ms':>9} {'block ms':>9} {'speedup':>8} {'(median)':>9}")
    for r in rows:
        print(f"{r['coupling']:<12} {r['rows_ms']:>9.2f} {r['block_ms']:>9.1f} {r['speedup']:>8.0f} "
              f"{r['speedup_median']:>9.0f}")
    return rows


def bench_haar(quick):
    ds = (16, 64) if quick else (16, 64, 128)
    rows = []
    for name, device in _backends():
        for d in ds:
            n = max(8, 20_000 // (d * d) * 4) if not quick else max(4, 4000 // (d * d) * 4)
            fns = {}
            for route in mc.HAAR_ROUTES:
                if route == "cpu_qr" and name == "numpy":
                    continue

                def f(route=route):
                    mc.haar_orthogonal(n, d, rng=0, xp=name, device=device, route=route)
                    sync(device)
                fns[route] = f
            t = interleaved(fns, 3 if quick else 7)
            per = {k: 1e6 * min(v) / n for k, v in t.items()}
            best = min(per, key=per.get)
            rows.append({"backend": name, "device": str(device or "cpu"), "d": d, "us_per_matrix": per,
                         "fastest": best})
    print("\n## Haar routes: microseconds per d x d matrix (fastest marked *)")
    print(f"{'backend':<8} {'device':<6} {'d':>4}  " + "  ".join(f"{r:>12}" for r in mc.HAAR_ROUTES))
    for r in rows:
        cells = []
        for route in mc.HAAR_ROUTES:
            v = r["us_per_matrix"].get(route)
            cells.append(f"{'-':>12}" if v is None else f"{v:>11.1f}{'*' if route == r['fastest'] else ' '}")
        print(f"{r['backend']:<8} {r['device']:<6} {r['d']:>4}  " + "  ".join(cells))
    print(f"current DEFAULT_HAAR_ROUTE = {mc.DEFAULT_HAAR_ROUTE}")
    return rows


def _slope(ds, ts):
    return float(np.polyfit(np.log(ds), np.log(ts), 1)[0])


def bench_fast(quick):
    ds = [16, 32, 64, 128, 256, 512] if quick else [16, 32, 64, 128, 256, 512, 1024, 2048]
    n_pts = 256
    rows = []
    for d in ds:
        x = np.random.default_rng(d).standard_normal((n_pts, d)) * 0.1

        def run(c):
            def f():
                p = mc.sample_projection(c, d, d, rng=0)
                p(x)
            return f

        def samp(c):
            return lambda: mc.sample_projection(c, d, d, rng=0)

        rep = 3 if d >= 1024 else (5 if quick else 9)
        t = interleaved({"simplex": run("simplex"), "fast_simplex": run("fast_simplex"),
                         "simplex_sample": samp("simplex"), "fast_sample": samp("fast_simplex")}, rep)
        rows.append({"d": d, **{k: min(v) for k, v in t.items()}})
    dd = np.array([r["d"] for r in rows], dtype=float)
    upper = dd >= 128
    fits = {k: _slope(dd[upper], [r[k] for r, u in zip(rows, upper) if u])
            for k in ("simplex", "fast_simplex", "simplex_sample", "fast_sample")}
    cross = next((r["d"] for r in rows if r["fast_simplex"] < r["simplex"]), None)
    cross_s = next((r["d"] for r in rows if r["fast_sample"] < r["simplex_sample"]), None)
    print(f"\n## fast_simplex (HD-product, FWHT) vs simplex (dense): one block (m = d), project N = {n_pts} points")
    print(f"{'d':>6} {'simplex ms':>11} {'fast ms':>9} {'ratio':>7}   {'sample only: simplex':>21} {'fast':>9}")
    for r in rows:
        print(f"{r['d']:>6} {1e3 * r['simplex']:>11.3f} {1e3 * r['fast_simplex']:>9.3f} "
              f"{r['simplex'] / r['fast_simplex']:>7.2f}   {1e3 * r['simplex_sample']:>21.3f} "
              f"{1e3 * r['fast_sample']:>9.3f}")
    print(f"fast_simplex overtakes simplex (sample + project) at d = {cross}; sampling alone at d = {cross_s}")
    print("growth exponents (d >= 128): " + ", ".join(f"{k} {v:.2f}" for k, v in fits.items()))
    return {"rows": rows, "crossover_d": cross, "crossover_d_sampling": cross_s, "exponents": fits}


def accuracy(quick):
    sizes = (1_000, 10_000) if quick else (1_000, 10_000, 100_000)
    out = {"ks": {}, "bias": []}
    print("\n## Marginals of the fast couplings: largest KS statistic vs N(0,1) (rows 0, 1, last x 4 directions)")
    print(f"{'coupling':<16} {'d':>3} " + " ".join(f"{'n=' + str(n):>10}" for n in sizes))
    for d in (16, 64):
        for c in ("orthogonal", "fast_orthogonal", "fast_simplex"):
            curve = mc.diagnostics.ks_distance_curve(c, d, sizes, rng=0)
            out["ks"][f"{c}/{d}"] = curve
            print(f"{c:<16} {d:>3} " + " ".join(f"{curve[n]:>10.4f}" for n in sizes))
    d, m = 64, 64
    n = 20_000 if quick else 100_000
    print(f"\n## Relative bias (mean Khat - K)/K of kernel estimates, d = m = {d}, n = {n}")
    print("   PRF: x = y = r u (v = |x + y| = 2r); RFF: x = -y = r u (z = |x - y| = 2r)")
    print(f"{'coupling':<16} {'kernel':<9} {'u':<9} {'2r':>4} {'rel. bias':>10} {'stderr':>9} {'z':>7}")
    for c in ("orthogonal", "fast_orthogonal", "fast_simplex"):
        for row in _bias_rows(c, d, m, n, rng=3):
            out["bias"].append(row)
            print(f"{c:<16} {row['kernel']:<9} {row['direction']:<9} {row['v_or_z']:>4.1f} {row['rel_bias']:>10.2e} "
                  f"{row['stderr']:>9.1e} {row['z']:>7.1f}")
    return out


def _bias_rows(coupling, d, m, n, rng):
    """Relative kernel biases: PRF (x = y = r u) and RFF (x = -y = r u), u in {e_1, diagonal}, 2r in {1, 2}."""
    dirs = mc.diagnostics.standard_directions(d)
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mc.FastCouplingBiasWarning)
        for kernel in ("gaussian", "rff"):
            for name in ("e_1", "diagonal"):
                for r in (0.5, 1.0):
                    x = r * dirs[name]
                    y = x if kernel == "gaussian" else -x
                    b, se = mc.diagnostics.kernel_bias(coupling, x, y, m, n, kernel=kernel, rng=rng)
                    rows.append({"coupling": coupling, "d": d, "kernel": kernel, "direction": name,
                                 "v_or_z": 2 * r, "rel_bias": b, "stderr": se, "z": b / se})
    return rows


#: Dimensions of the bias-by-d table (the fast couplings' warning threshold comes from it).
BIAS_DIMS = (2, 4, 8, 16, 32, 64)


def bias_by_d(quick):
    """Largest KS distance and kernel biases of the fast couplings for d = 2 ... 64 (m = d).

    For each d: the largest KS statistic (rows 0, 1, last x 4 directions, n
    blocks) and the relative kernel biases (PRF Gaussian kernel and RFF, x + y
    or x - y of norm 1 and 2 along e_1 and the diagonal) with their z-scores;
    the exact orthogonal coupling is the control.  The d where no |z| exceeds
    4 is where :data:`montecarlo.couplings.FAST_BIAS_RESOLVED_D` is set.
    """
    n_ks = 20_000 if quick else 100_000
    n = 20_000 if quick else 200_000
    rows = []
    print(f"\n## Fast couplings by d: largest KS (n = {n_ks}) and kernel bias (m = d, n = {n} draws)")
    print(f"{'coupling':<16} {'d':>3} {'KS':>7} {'worst PRF bias':>15} {'z':>6} {'worst RFF bias':>15} {'z':>6}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mc.FastCouplingBiasWarning)
        for d in BIAS_DIMS:
            for c in ("orthogonal", "fast_orthogonal", "fast_simplex"):
                ks = max(r[2] for r in mc.diagnostics.ks_marginals(c, d, n_ks, rng=1))
                worst = {}
                for row in _bias_rows(c, d, d, n, rng=7):
                    rows.append({**row, "ks": ks})
                    k = row["kernel"]
                    if k not in worst or abs(row["z"]) > abs(worst[k][1]):
                        worst[k] = (row["rel_bias"], row["z"])
                print(f"{c:<16} {d:>3} {ks:>7.4f} {worst['gaussian'][0]:>15.2e} {worst['gaussian'][1]:>6.1f} "
                      f"{worst['rff'][0]:>15.2e} {worst['rff'][1]:>6.1f}", flush=True)
    return rows


def main(argv=None):
    """Run the command line; returns the exit status (0 done, 2 bad options, 130 Ctrl-C, 143 SIGTERM; the
    ``--json`` path is checked before any timing, and an interrupted run leaves no partial file)."""
    from montecarlo.experiments.runtime import run_terminable

    return run_terminable(main_runner, PROG, _main, argv)


def _main(argv):
    parser = section_parser(PROG, __doc__.splitlines()[0], SECTIONS, "bench_montecarlo.json",
                            quick_help="smaller sizes and fewer repeats", only_default=SECTIONS[:6],
                            only_help="sections to run (--accuracy adds the last two)")
    parser.add_argument("--accuracy", action="store_true", help="also measure KS distances and biases")
    args = parse_sections(parser, argv)
    chosen = args.only + [s for s in ("accuracy", "bias") if args.accuracy and s not in args.only]
    warnings.simplefilter("ignore", RuntimeWarning)
    info = {"python": sys.version.split()[0], "numpy": np.__version__,
            "torch": getattr(torch, "__version__", None), "cpu_count": os.cpu_count(),
            "machine": platform.machine(), "load_avg": os.getloadavg() if hasattr(os, "getloadavg") else None}
    print(f"# bench_montecarlo  {info}")
    sections = {"pointwise": bench_pointwise, "prf": bench_prf, "sampling": bench_sampling, "partial": bench_partial,
                "haar": bench_haar, "fast": bench_fast, "accuracy": accuracy, "bias": bias_by_d}
    results = {"info": info}
    for name in chosen:
        results[name] = sections[name](args.quick)
    finish_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
