"""Speed of the pnc_orthogonal closed forms (issue 38) as ratios against the orthogonal coupling's time.

For each kind (prf, oprf with its optimal A, rff), precision, d and v, ``theory.kernel_mse`` is timed under
``pnc_orthogonal`` and under ``orthogonal`` (the baseline, the same call), in one process, in CPU time
(``time.process_time``: on a shared machine other jobs change it little; ``--wall`` for wall time).  Two
pnc times per point:

* **cold**: every memo of ``theory.pnc`` emptied first (its rules, partners and moments;
  ``theory.pnc.clear_caches``, or the older ``_partner_cached`` / ``_sum_moment_cached``); the Gauss-rule
  tables, which depend on the node count and the precision only, stay (as mpmath keeps its own quadrature
  nodes), and the first call of the process, which builds them, is reported apart;
* **warm**: in a curve, v increasing at fixed (kind, precision, d) with the memos kept from the previous v.

The baseline is the minimum of three calls just before each pnc call.  A call that raises is recorded with
its exception and time (and left out of the ratios).  The summary gives the median and the largest cold and
warm ratio over the grid (goal, issue 38: median <= 50, largest <= 200).  The same file measures an older
tree (``PYTHONPATH=/path/to/old/tree python -m benchmarks.bench_pnc ...``) for the before/after table;
``--quick`` is the grid the issue measured (d in {3, 8, 64}, v in {0.25, 1}, prf and oprf, 15 digits).

Run: ``python -m benchmarks.bench_pnc [--quick] [--dps 15 30] [--kinds prf oprf rff] [--json PATH]``.
"""

from __future__ import annotations

import statistics
import sys
import time

from mpmath import mp

import theory
from benchmarks._timing import parsed_json_path, write_json
from theory.cli import int_arg, main_runner, make_parser

PROG = "python -m benchmarks.bench_pnc"

DS = (2, 3, 5, 8, 64, 256, 1024)
#: v (|x + y| for prf and oprf, z = |x - y| for rff) from 1e-300 to the documented maximum (theory.pnc:
#: v, z <= 6; the OPRF grid of theory.oprf reaches v = 3).
VS = ("1e-300", "1e-30", "1e-8", "1e-4", "0.01", "0.25", "1", "3", "6")
KINDS = ("prf", "oprf", "rff")
QUICK = {"ds": (3, 8, 64), "vs": ("0.25", "1"), "kinds": ("prf", "oprf"), "dps": (15,)}


def max_v(kind):
    """The largest v of the grid for ``kind`` (the documented maximum)."""
    return 3 if kind == "oprf" else 6


def clear_pnc_caches():
    """Empty the memos of theory.pnc (this tree's ``clear_caches``, else the older trees' two caches)."""
    import theory.pnc as pnc

    if hasattr(pnc, "clear_caches"):
        pnc.clear_caches()
        return
    for name in ("_partner_cached", "_sum_moment_cached"):
        cache = getattr(pnc, name, None)
        if cache is not None:
            cache.cache_clear()


def call(coupling, kind, d, v):
    kw = {} if kind == "rff" else {"x_norm": mp.mpf(v) / 2, "y_norm": mp.mpf(v) / 2}
    return theory.kernel_mse(coupling, d, v, kind=kind, **kw)


def timed(func, clock):
    t0 = clock()
    try:
        func()
        status = "ok"
    except Exception as exc:  # a ConvergenceError (or a crash) is a result of the benchmark: recorded
        status = f"{type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
    return clock() - t0, status


def _progress(text):
    print(f"  ... {text}", file=sys.stderr, flush=True)


def run(ds=DS, vs=VS, kinds=KINDS, dps_list=(15, 30), clock=time.process_time, progress=True):
    """{"rows": [...], "first_call_s": {...}}: one row per (dps, kind, d, v) with the cold and warm pnc times,
    the orthogonal baseline and their ratios."""
    say = _progress if progress else (lambda text: None)
    out = {"rows": [], "first_call_s": {}, "clock": clock.__name__}
    for dps in dps_list:
        with mp.workdps(dps):
            clear_pnc_caches()
            t, status = timed(lambda: call("pnc_orthogonal", "prf", 8, mp.mpf(1)), clock)
            out["first_call_s"][str(dps)] = {"seconds": t, "status": status, "call": "prf d = 8 v = 1"}
            for kind in kinds:
                for d in ds:
                    points = [v for v in vs if mp.mpf(v) <= max_v(kind)]
                    clear_pnc_caches()
                    warm = {}
                    for v in points:  # the curve: v increasing, memos kept
                        say(f"{dps} digits {kind} d = {d} v = {v} (warm)")
                        warm[v] = timed(lambda: call("pnc_orthogonal", kind, d, mp.mpf(v)), clock)
                    for v in points:
                        say(f"{dps} digits {kind} d = {d} v = {v} (cold)")
                        base = min(timed(lambda: call("orthogonal", kind, d, mp.mpf(v)), clock)[0] for _ in range(3))
                        clear_pnc_caches()
                        cold = timed(lambda: call("pnc_orthogonal", kind, d, mp.mpf(v)), clock)
                        row = {"dps": dps, "kind": kind, "d": d, "v": v, "orthogonal_s": base,
                               "cold_s": cold[0], "cold_status": cold[1], "warm_s": warm[v][0],
                               "warm_status": warm[v][1]}
                        row["cold_ratio"] = cold[0] / base if cold[1] == "ok" and base > 0 else None
                        row["warm_ratio"] = warm[v][0] / base if warm[v][1] == "ok" and base > 0 else None
                        out["rows"].append(row)
    out["summary"] = summary(out["rows"])
    return out


def summary(rows):
    """Median and largest cold and warm ratio, over all rows and per precision."""
    def stats(sel):
        res = {}
        for key in ("cold_ratio", "warm_ratio"):
            vals = [r[key] for r in sel if r[key] is not None]
            res[key] = {"median": statistics.median(vals) if vals else None, "max": max(vals) if vals else None,
                        "n": len(vals)}
        res["errors"] = sum(1 for r in sel if r["cold_status"] != "ok")
        return res

    out = {"all": stats(rows)}
    for dps in sorted({r["dps"] for r in rows}):
        out[f"{dps} digits"] = stats([r for r in rows if r["dps"] == dps])
    return out


def table(rows, key="cold_ratio"):
    """Markdown: one line per (dps, kind, d), one column per v, the ratio ``key`` (x orthogonal)."""
    vs = [v for v in VS if any(r["v"] == v for r in rows)]
    lines = ["| digits | kind | d | " + " | ".join(f"v = {v}" for v in vs) + " |",
             "|---|---|---|" + "---|" * len(vs)]
    groups = {}
    for r in rows:
        groups.setdefault((r["dps"], r["kind"], r["d"]), {})[r["v"]] = r
    for (dps, kind, d), cells in groups.items():
        texts = []
        for v in vs:
            r = cells.get(v)
            if r is None:
                texts.append("")
            elif r[key] is None:
                texts.append("err")
            else:
                texts.append(f"{r[key]:.0f}" if r[key] >= 10 else f"{r[key]:.1f}")
        lines.append(f"| {dps} | {kind} | {d} | " + " | ".join(texts) + " |")
    return "\n".join(lines)


def main(argv=None):
    """Run the command line; returns the exit status (0 done, 2 bad options, 130 Ctrl-C, 143 SIGTERM; the
    ``--json`` path is checked before any timing, and an interrupted run leaves no partial file)."""
    from montecarlo.experiments.runtime import run_terminable

    return run_terminable(main_runner, PROG, _main, argv)


def _main(argv):
    parser = make_parser(PROG, __doc__.split("\n")[0])
    parser.add_argument("--json", default=None, metavar="PATH",
                        help="also write the results as strict JSON here (checked before any timing)")
    parser.add_argument("--dps", type=int_arg(1, 1000), nargs="+", default=[15, 30],
                        help="decimal digits of working precision")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS), help="feature kinds")
    parser.add_argument("--ds", type=int_arg(2, 2 ** 20), nargs="+", default=list(DS), help="dimensions d")
    parser.add_argument("--quick", action="store_true",
                        help="the grid issue 38 measured: d in {3, 8, 64}, v in {0.25, 1}, prf and oprf, 15 digits")
    parser.add_argument("--wall", action="store_true", help="wall time instead of process CPU time")
    parser.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    json_path = parsed_json_path(parser, args.json)
    grid = dict(ds=tuple(args.ds), vs=VS, kinds=tuple(args.kinds), dps_list=tuple(args.dps))
    if args.quick:
        grid = dict(ds=QUICK["ds"], vs=QUICK["vs"], kinds=QUICK["kinds"], dps_list=QUICK["dps"])
    r = run(**grid, clock=time.perf_counter if args.wall else time.process_time, progress=not args.no_progress)
    print(f"pnc_orthogonal / orthogonal, theory.kernel_mse, {r['clock']}; cold (memos emptied):")
    print(table(r["rows"], "cold_ratio"))
    print("warm (in a curve over v):")
    print(table(r["rows"], "warm_ratio"))
    for name, s in r["summary"].items():
        c, w = s["cold_ratio"], s["warm_ratio"]
        if c["n"]:
            print(f"{name}: cold median {c['median']:.1f} max {c['max']:.1f} ({c['n']} points); warm median "
                  f"{w['median']:.1f} max {w['max']:.1f}; {s['errors']} calls raised")
    for dps, f in r["first_call_s"].items():
        print(f"first call of the process at {dps} digits ({f['call']}, Gauss tables built): {f['seconds']:.3f} s "
              f"({f['status']})")
    errors = [row for row in r["rows"] if row["cold_status"] != "ok" or row["warm_status"] != "ok"]
    for row in errors:
        print(f"raised: {row['dps']} digits {row['kind']} d = {row['d']} v = {row['v']}: {row['cold_status']}")
    if json_path is not None:
        write_json(json_path, r)
        print(f"wrote {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
