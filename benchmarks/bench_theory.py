"""Speed of the closed forms in ``theory`` (issue 2), as ratios against a
baseline measured in the same process.

Baseline: one ``mpmath.hyp1f1(64, 32, x)`` call at 30 digits (the unit of work
of the ORF conformity).  Reported: milliseconds per conformity at d = 64,
v <= 4 (goal < 20 ms), the 200-point MSE-ratio curve of Fig. 6 at d = 64
(goal < 2 s), and the slowdown of the printed double series for rho_SimRF
(eq. simrf_conformity) relative to the fast route, at v in {1, 4, 10}.

Reachable domain (issue 11): ``--domain`` probes every closed form on a grid of
d (2 .. 65536) and v or z (1e-300 .. 1e300) at 30 digits under the work budget
per call, records which calls return and which raise NoConvergence, and
prints the README table (function, d range, v/z range reached, typical time
at 30 digits), plus z_crit(d)/sqrt(d) for d = 3 .. 4096.  Times are wall
times of single calls on the machine that runs it (stated with the table);
the comparison with the baseline above is the speed statement.

Run: ``python -m benchmarks.bench_theory [--json PATH] [--domain]``.
"""

from __future__ import annotations

import statistics
import sys
import time

import mpmath
from mpmath import mp

import theory
from theory import _context
from benchmarks._timing import parsed_json_path, write_json
from theory.cli import int_arg, main_runner, make_parser

PROG = "python -m benchmarks.bench_theory"


def best_time(func, repeat=5, number=1):
    """Minimum over `repeat` runs of the mean time of `number` calls (seconds)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            func()
        best = min(best, (time.perf_counter() - t0) / number)
    return best


def _progress(text):
    print(f"  ... {text}", file=sys.stderr, flush=True)


def run(dps=30, progress=True):
    """The timings at ``dps`` digits; ``progress``: one line on stderr as each part starts."""
    say = _progress if progress else (lambda text: None)
    results = {"dps": dps, "conformity_ms": {}, "ratios_to_baseline": {}}
    with mp.workdps(dps):
        say(f"baseline hyp1f1(64, 32, 8) at {dps} digits")
        base = best_time(lambda: mp.hyp1f1(64, 32, mp.mpf(8)), repeat=7, number=50)
        results["baseline_hyp1f1_ms"] = base * 1e3
        for coupling in ("iid", "orthogonal", "simplex"):
            for v in ("0.5", "1", "2", "4"):
                say(f"conformity {coupling} d = 64 v = {v}")
                t = best_time(lambda: theory.conformity(coupling, 64, v), number=5)
                results["conformity_ms"][f"{coupling} v={v}"] = t * 1e3
                results["ratios_to_baseline"][f"{coupling} v={v}"] = t / base
        vs = [mp.mpf(i) / 50 for i in range(200)]

        def curve():
            for v in vs:
                theory.mse_ratio("orthogonal", "iid", 64, v)
                theory.mse_ratio("simplex", "iid", 64, v)

        say("Fig. 6 curve, 200 v")
        t_curve = best_time(curve, repeat=2)
        results["fig6_curve_200pts_s"] = t_curve
        results["fig6_curve_ratio_to_baseline"] = t_curve / base
        results["printed_over_fast"] = {}
        for v in ("1", "4", "10"):
            say(f"printed double series v = {v}")
            t_fast = best_time(lambda: theory.conformity("simplex", 64, v), number=3)
            t_printed = best_time(lambda: theory.simrf_conformity_series(64, v), repeat=2)
            results["printed_over_fast"][v] = {
                "printed_ms": t_printed * 1e3, "fast_ms": t_fast * 1e3, "ratio": t_printed / t_fast}
    return results


DOMAIN_DS = (2, 3, 64, 1024, 4097, 65536)
DOMAIN_XS = ("1e-300", "1e-3", "1", "10", "100", "1e3", "1e5", "1e10", "1e100", "1e300")


def _domain_functions():
    from theory import certified

    fns = {
        "conformity iid": lambda d, x: theory.conformity("iid", d, x),
        "conformity orthogonal": lambda d, x: theory.conformity("orthogonal", d, x),
        "conformity simplex": lambda d, x: theory.conformity("simplex", d, x),
        "rff_conformity orthogonal": lambda d, x: theory.rff_conformity("orthogonal", d, x),
        "rff_conformity simplex": lambda d, x: theory.rff_conformity("simplex", d, x),
        "mse_ratio simplex/iid": lambda d, x: theory.mse_ratio("simplex", "iid", d, x),
        "rff_mse_ratio simplex/orthogonal": lambda d, x: theory.rff_mse_ratio("simplex", "orthogonal", d, x),
        "pdf_wij simplex (w)": lambda d, x: theory.coupling_pdf("simplex", x, d),
    }
    if certified.available():
        fns["certified.conformity simplex"] = lambda d, x: certified.conformity("simplex", d, x, prec=128)
    return fns


def probe_domain(work=None, dps=30, ds=DOMAIN_DS, xs=DOMAIN_XS):
    """{function: [(d, x, 'ok' | 'no convergence' | error, seconds)]} at ``dps`` digits under a work budget of
    ``work`` units per call (default theory's DEFAULT_WORK): the reach is then the same on every machine, and
    the seconds say what it costs on this one."""
    work = _context.DEFAULT_WORK if work is None else work
    out = {}
    for name, fn in _domain_functions().items():
        rows = out[name] = []
        for d in ds:
            for x in xs:
                t0 = time.perf_counter()
                try:
                    with theory.precision(dps=dps), theory.budget(work=work):
                        fn(d, x)
                    status = "ok"
                except mpmath.libmp.NoConvergence as exc:
                    status = "no convergence: " + str(exc).splitlines()[0][:90]
                except (ValueError, TypeError) as exc:
                    status = "refused: " + str(exc).splitlines()[0][:90]
                except Exception as exc:  # a crash is a finding: record it and go on
                    status = f"CRASH {type(exc).__name__}: " + str(exc).splitlines()[0][:80]
                rows.append((d, x, status, time.perf_counter() - t0))
                print(f"  {name:34s} d = {d:<6d} x = {x:<6s} {status[:40]:40s} {rows[-1][3]:7.2f} s", flush=True)
    return out


def domain_table(probe):
    """Markdown rows: function, d reached, v/z reached (for every d reached), typical time at 30 digits."""
    lines = ["| function | d range | v or z range (all those d) | typical time at 30 digits | not reached |",
             "|---|---|---|---|---|"]
    for name, rows in probe.items():
        ok = [(d, x, t) for d, x, s, t in rows if s == "ok"]
        ds_ok = sorted({d for d, _, _ in ok})
        xs_all = [x for x in DOMAIN_XS if all((d, x) in {(a, b) for a, b, _ in ok} for d in ds_ok)]
        missed = sorted({(d, x) for d, x, s, _ in rows if s != "ok"}, key=lambda p: (p[0], float(p[1])))
        typical = statistics.median(t for _, _, t in ok) if ok else float("nan")
        lines.append(f"| {name} | {ds_ok[0] if ds_ok else '-'} .. {ds_ok[-1] if ds_ok else '-'} | "
                     f"{xs_all[0] if xs_all else '-'} .. {xs_all[-1] if xs_all else '-'} | "
                     f"{typical * 1e3:.0f} ms (max {max((t for _, _, t in ok), default=float('nan')):.1f} s) | "
                     f"{', '.join(f'd={d} x={x}' for d, x in missed[:6])}{' ...' if len(missed) > 6 else ''} |")
    return "\n".join(lines)


def z_crit_ratios(ds=(3, 4, 5, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096), dps=30):
    out = {}
    for d in ds:
        t0 = time.perf_counter()
        with theory.precision(dps=dps):
            z = theory.z_crit(d)
        out[d] = (float(z), float(z / mp.sqrt(d)), time.perf_counter() - t0)
    return out


def main(argv=None):
    """Run the command line; returns the exit status (0 done, 2 bad options, 130 Ctrl-C, 143 SIGTERM; the
    ``--json`` path is checked before any timing, and an interrupted run leaves no partial file)."""
    from montecarlo.experiments.runtime import run_terminable

    return run_terminable(main_runner, PROG, _main, argv)


def _main(argv):
    parser = make_parser(PROG, __doc__.split("\n")[0])
    parser.add_argument("--json", default=None, metavar="PATH",
                        help="also write the results as strict JSON here (checked before any timing)")
    parser.add_argument("--dps", type=int_arg(1, 10_000), default=30, help="decimal digits of working precision")
    parser.add_argument("--domain", action="store_true", help="also probe the reachable domain (minutes)")
    parser.add_argument("--work", type=int_arg(1), default=None,
                        help="work budget per call in the domain probe, in theory's units of work (default: "
                             "theory._context.DEFAULT_WORK, as for any call)")
    parser.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    json_path = parsed_json_path(parser, args.json)
    r = run(args.dps, progress=not args.no_progress)
    print(f"theory benchmarks at {r['dps']} digits (baseline hyp1f1(64, 32, 8): {r['baseline_hyp1f1_ms']:.3f} ms)")
    print(f"{'conformity, d = 64':28s} {'ms':>9s} {'x baseline':>11s}")
    for key, ms in r["conformity_ms"].items():
        print(f"{key:28s} {ms:9.3f} {r['ratios_to_baseline'][key]:11.1f}")
    print(f"Fig. 6 curve, 200 v, ORF and SimRF ratios: {r['fig6_curve_200pts_s']:.3f} s "
          f"({r['fig6_curve_ratio_to_baseline']:.0f} x baseline)")
    for v, row in r["printed_over_fast"].items():
        print(f"printed double series / fast route, v = {v:>2s}: {row['printed_ms']:9.1f} ms / "
              f"{row['fast_ms']:7.2f} ms = {row['ratio']:7.1f} x")
    if args.domain:
        print("z_crit(d) / sqrt(d) at 30 digits:")
        zr = z_crit_ratios()
        for d, (z, ratio, t) in zr.items():
            print(f"  d = {d:5d}  z_crit = {z:12.6f}  z_crit/sqrt(d) = {ratio:.4f}  ({t:.2f} s)")
        r["z_crit"] = {str(d): v for d, v in zr.items()}
        work = _context.DEFAULT_WORK if args.work is None else args.work
        print(f"reachable domain at 30 digits, work budget {work} units per call:")
        probe = probe_domain(work)
        table = domain_table(probe)
        print(table)
        r["domain"] = {k: [list(row) for row in v] for k, v in probe.items()}
        r["domain_table"] = table
    if json_path is not None:
        write_json(json_path, r)
        print(f"wrote {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
