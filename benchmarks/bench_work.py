"""The work model of theory's budgets, measured (issue 38): CPU time per unit of work at every check site.

theory's budgets count work, not seconds (:mod:`theory._context`): every loop charges its steps in units of
"one elementary function at <= 256 bits", times a precision factor.  This benchmark runs a set of calls that
exercise the loops of theory (each under a work budget, so that the long ones stop at a known amount of work),
attributes the CPU time between consecutive budget checks to the earlier check's site, and prints, per site,
the CPU microseconds per unit charged as a ratio to the baseline: one ``mpmath.exp`` at 53 bits, timed in the
same process.  A ratio near 1 means the site charges what it costs; well above 1, the site is undercharged (a
runaway there runs longer than the budget's nominal time before it is stopped); well below 1, overcharged (a
legitimate call there reaches the budget sooner).  The default budget, ``DEFAULT_WORK`` units, is then about
``DEFAULT_WORK`` x (the baseline) x (the ratio) of CPU time at that site.

Run: ``python -m benchmarks.bench_work [--json PATH] [--work N] [--dps 15,50] [--no-progress]``.
"""

from __future__ import annotations

import collections
import re
import sys
import time

import mpmath

import theory
from benchmarks._timing import parsed_json_path, write_json
from theory import _context, fixed_norm
from theory.cli import int_arg, main_runner, make_parser

PROG = "python -m benchmarks.bench_work"


def _calls():
    """name -> a call that exercises some loops of theory (several stop at the work budget on purpose)."""
    rows = [[1.0, float(i)] for i in range(200)]
    return {
        "Kummer sum, d = 2^63": lambda: theory.orf_conformity_kummer(2**63, "0.5"),
        "ORF 1F1 at d = 10^8": lambda: theory.conformity_orthogonal(10**8, 10**4),
        "RFF ORF recurrence, d = 2^63": lambda: theory.rff_conformity("orthogonal", 2**63, 10**5),
        "wij moment, n = 10^5": lambda: theory.wij_moment(10**5, 8, "-0.1"),
        "SimRF+ objective, 200 vectors": lambda: theory.exact_objective(rows, 1),
        "pdf_wij, w = 1e300": lambda: theory.pdf_wij("1e300", 2**63, "-0.5"),
        "pdf_wij, w = 1.5": lambda: theory.pdf_wij("1.5", 3, "0.2"),
        "pdf_wij, w = 1e10": lambda: theory.pdf_wij("1e10", 8, "1"),
        "simplex pdf, d = 2^63": lambda: theory.coupling_pdf("simplex", 2**32, 2**63),
        "SimRF conformity, v = 4": lambda: theory.conformity("simplex", 64, "4"),
        "SimRF conformity, v = 1000 (quadrature)": lambda: theory.conformity("simplex", 64, 1000),
        "conformity at an angle": lambda: theory.conformity_at_angle(16, 2, "-0.3"),
        "RFF SimRF conformity, z = 30": lambda: theory.rff_conformity("simplex", 64, 30),
        "z_crit(64)": lambda: theory.z_crit(64),
        "z_crit(1024)": lambda: theory.z_crit(1024),
        "PNC PRF MSE, d = 8": lambda: theory.kernel_mse("pnc_orthogonal", 8, "1", kind="prf", x_norm="0.5",
                                                        y_norm="0.5"),
        "PNC OPRF MSE, d = 8": lambda: theory.kernel_mse("pnc_orthogonal", 8, "1", kind="oprf", x_norm="0.5",
                                                         y_norm="0.5"),
        "PNC RFF MSE, d = 8": lambda: theory.rff_mse("pnc_orthogonal", 8, "2"),
        "hyperbolic ratio grid": lambda: theory.kernel_mse_ratio("simplex", "iid", 7, [0.8] * 5, kind="hyperbolic"),
        "simplex_apply, 20000": lambda: theory.simplex_apply([1.0] * 20000),
        "tiny v ratio": lambda: theory.mse_ratio("simplex", "iid", 64, "1e-1000"),
        "fixed-norm MSE": lambda: fixed_norm.fixed_norm_mse(8, "1", x_norm="0.5", y_norm="0.5"),
        "orthogonality gap series": lambda: theory.orthogonality_gap_series(64, "2", x_norm="1", y_norm="1"),
    }


def _site(what):
    """A check's ``what`` with its numbers replaced by '#': one key per site."""
    return re.sub(r"[-+]?\d[\d.e+\-]*", "#", what)[:110]


class _Recorder:
    """CPU time between consecutive budget checks, attributed to the earlier check's site."""

    def __init__(self):
        self.stats = collections.defaultdict(lambda: [0.0, 0, 0])  # seconds, units, checks
        self.last = None

    def __call__(self, what, charge):
        now = time.thread_time()
        self.close(now)
        self.last = (_site(what), charge, now)

    def close(self, now=None):
        if self.last is not None:
            site, charge, t0 = self.last
            row = self.stats[site]
            row[0] += (time.thread_time() if now is None else now) - t0
            row[1] += charge
            row[2] += 1
        self.last = None


def _baseline_us():
    """CPU microseconds of one mpmath.exp at 53 bits (the unit's nominal cost), the best of 5 x 2000 calls."""
    best = float("inf")
    with mpmath.workprec(53):
        x = mpmath.mpf(2) / 3
        for _ in range(5):
            t0 = time.thread_time()
            for _ in range(2000):
                mpmath.exp(x)
            best = min(best, (time.thread_time() - t0) / 2000)
    return best * 1e6


def run(work=100_000, dps_list=(15, 50), progress=True):
    rec = _Recorder()
    per_call = {}
    base = _baseline_us()
    for dps in dps_list:
        for name, call in _calls().items():
            if progress:
                print(f"  ... {name} at {dps} digits", file=sys.stderr, flush=True)
            u0, t0 = _context.work_used(), time.thread_time()
            outcome = "value"
            try:
                with theory.precision(dps=dps), theory.budget(work=work), _context.traced(rec):
                    call()
            except mpmath.libmp.NoConvergence as exc:
                outcome = "work budget" if "work budget" in str(exc) else "no convergence"
            finally:
                rec.close()
            cpu, units = time.thread_time() - t0, _context.work_used() - u0
            per_call[f"{name} @ {dps}"] = {"units": units, "cpu_s": round(cpu, 4), "outcome": outcome,
                                          "ratio": round(cpu * 1e6 / max(units, 1) / base, 3)}
    sites = {site: {"units": u, "checks": n, "cpu_s": round(s, 4), "ratio": round(s * 1e6 / u / base, 3)}
             for site, (s, u, n) in rec.stats.items() if u}
    return {"baseline_exp_us": round(base, 3), "work_per_call": work, "dps": list(dps_list),
            "default_work": _context.DEFAULT_WORK, "calls": per_call, "sites": sites}


def main(argv=None):
    from montecarlo.experiments.runtime import run_terminable

    return run_terminable(main_runner, PROG, _main, argv)


def _dps_list(text):
    try:
        values = tuple(int(t) for t in text.split(","))
    except ValueError:
        raise ValueError(f"--dps must be a comma-separated list of integers, got {text!r}") from None
    if not values or any(not 1 <= v <= 1000 for v in values):
        raise ValueError(f"--dps values must lie in [1, 1000], got {text!r}")
    return values


def _main(argv):
    parser = make_parser(PROG, __doc__.split("\n")[0])
    parser.add_argument("--json", default=None, metavar="PATH",
                        help="also write the results as strict JSON here (checked before any timing)")
    parser.add_argument("--work", type=int_arg(1000, 10**9), default=100_000,
                        help="work budget of each call, in units (the long calls stop there)")
    parser.add_argument("--dps", default="15,50", help="comma-separated working precisions in digits")
    parser.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    try:
        dps_list = _dps_list(args.dps)
    except ValueError as exc:
        parser.error(str(exc))
    json_path = parsed_json_path(parser, args.json)
    r = run(args.work, dps_list, progress=not args.no_progress)
    print(f"work model of theory's budgets: baseline mpmath.exp at 53 bits = {r['baseline_exp_us']:.2f} us of CPU; "
          f"DEFAULT_WORK = {r['default_work']} units")
    print(f"{'CPU per unit / baseline':>24s} {'units':>10s} {'checks':>8s} {'CPU s':>8s}  site")
    for site, row in sorted(r["sites"].items(), key=lambda kv: -kv[1]["ratio"]):
        print(f"{row['ratio']:24.2f} {row['units']:10d} {row['checks']:8d} {row['cpu_s']:8.2f}  {site}")
    print(f"\n{'per call':44s} {'units':>10s} {'CPU s':>8s} {'ratio':>7s}  outcome")
    for name, row in r["calls"].items():
        print(f"{name:44s} {row['units']:10d} {row['cpu_s']:8.2f} {row['ratio']:7.2f}  {row['outcome']}")
    if json_path is not None:
        write_json(json_path, r)
        print(f"wrote {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
