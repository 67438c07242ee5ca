"""Speed of the closed forms in ``theory`` (issue 2), as ratios against a
baseline measured in the same process.

Baseline: one ``mpmath.hyp1f1(64, 32, x)`` call at 30 digits (the unit of work
of the ORF conformity).  Reported: milliseconds per conformity at d = 64,
v <= 4 (goal < 20 ms), the 200-point MSE-ratio curve of Fig. 6 at d = 64
(goal < 2 s), and the slowdown of the printed double series for rho_SimRF
(eq. simrf_conformity) relative to the fast route, at v in {1, 4, 10}.

Run: ``python -m benchmarks.bench_theory [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from mpmath import mp

import theory


def best_time(func, repeat=5, number=1):
    """Minimum over `repeat` runs of the mean time of `number` calls (seconds)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            func()
        best = min(best, (time.perf_counter() - t0) / number)
    return best


def run(dps=30):
    results = {"dps": dps, "conformity_ms": {}, "ratios_to_baseline": {}}
    with mp.workdps(dps):
        base = best_time(lambda: mp.hyp1f1(64, 32, mp.mpf(8)), repeat=7, number=50)
        results["baseline_hyp1f1_ms"] = base * 1e3
        for coupling in ("iid", "orthogonal", "simplex"):
            for v in ("0.5", "1", "2", "4"):
                t = best_time(lambda: theory.conformity(coupling, 64, v), number=5)
                results["conformity_ms"][f"{coupling} v={v}"] = t * 1e3
                results["ratios_to_baseline"][f"{coupling} v={v}"] = t / base
        vs = [mp.mpf(i) / 50 for i in range(200)]

        def curve():
            for v in vs:
                theory.mse_ratio("orthogonal", "iid", 64, v)
                theory.mse_ratio("simplex", "iid", 64, v)

        t_curve = best_time(curve, repeat=2)
        results["fig6_curve_200pts_s"] = t_curve
        results["fig6_curve_ratio_to_baseline"] = t_curve / base
        results["printed_over_fast"] = {}
        for v in ("1", "4", "10"):
            t_fast = best_time(lambda: theory.conformity("simplex", 64, v), number=3)
            t_printed = best_time(lambda: theory.simrf_conformity_series(64, v), repeat=2)
            results["printed_over_fast"][v] = {
                "printed_ms": t_printed * 1e3, "fast_ms": t_fast * 1e3, "ratio": t_printed / t_fast}
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    parser.add_argument("--dps", type=int, default=30)
    args = parser.parse_args(argv)
    r = run(args.dps)
    print(f"theory benchmarks at {r['dps']} digits (baseline hyp1f1(64, 32, 8): {r['baseline_hyp1f1_ms']:.3f} ms)")
    print(f"{'conformity, d = 64':28s} {'ms':>9s} {'x baseline':>11s}")
    for key, ms in r["conformity_ms"].items():
        print(f"{key:28s} {ms:9.3f} {r['ratios_to_baseline'][key]:11.1f}")
    print(f"Fig. 6 curve, 200 v, ORF and SimRF ratios: {r['fig6_curve_200pts_s']:.3f} s "
          f"({r['fig6_curve_ratio_to_baseline']:.0f} x baseline)")
    for v, row in r["printed_over_fast"].items():
        print(f"printed double series / fast route, v = {v:>2s}: {row['printed_ms']:9.1f} ms / "
              f"{row['fast_ms']:7.2f} ms = {row['ratio']:7.1f} x")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(r, indent=2))


if __name__ == "__main__":
    main()
