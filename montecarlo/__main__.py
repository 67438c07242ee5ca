"""Command line of :mod:`montecarlo`: ``python -m montecarlo audit MODULE:FUNCTION ...``.

Subcommands
-----------
``audit``
    Run :func:`montecarlo.audit.audit` on a sampler named by
    ``MODULE:FUNCTION`` (a dotted module importable from the current
    directory or ``sys.path``) or ``path/to/file.py:FUNCTION``, print the
    report (or its JSON with ``--json``) and exit with

    * 0 when every check passes,
    * 1 when a check fails,
    * 2 when the audit could not run: bad options (argparse), a spec that
      does not import, or a sampler that raises or returns something other
      than a finite real (m, d) array.

Example::

    python -m montecarlo audit mylib.features:orthogonal_matrix --d 16 --m 16 \\
        --coupling orthogonal --n 5000 --seed 0 --call "m,d,seed"
"""

from __future__ import annotations

import argparse
import json
import sys

from .audit import CLAIMABLE_COUPLINGS, DEFAULT_ALPHA, DEFAULT_N, audit, load_sampler


def _parser():
    p = argparse.ArgumentParser(prog="python -m montecarlo",
                                description="Tools of the montecarlo package (simplex random features).")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    a = sub.add_parser("audit", help="test a projection-matrix sampler statistically",
                       description="Draw n matrices from a sampler and test marginal Gaussianity, unbiasedness of "
                                   "PRF/RFF kernel estimates and (with --coupling) conformity with theory. "
                                   "Exit 0: all checks pass; 1: a check fails; 2: usage error.")
    a.add_argument("spec", metavar="MODULE:FUNCTION",
                   help="the sampler: dotted.module:function or path/to/file.py:function")
    a.add_argument("--d", type=int, required=True, help="dimensionality (>= 2)")
    a.add_argument("--m", type=int, default=None, help="rows per draw (default d)")
    a.add_argument("--coupling", choices=CLAIMABLE_COUPLINGS, default=None,
                   help="the coupling the sampler claims (enables the conformity and structure checks)")
    a.add_argument("--n", type=int, default=DEFAULT_N, help=f"number of draws (default {DEFAULT_N})")
    a.add_argument("--seed", type=int, default=0, help="seed of the audit (default 0)")
    a.add_argument("--call", default="d,m,rng",
                   help="argument order of the sampler: tokens d, m and at most one of rng (a "
                        "numpy.random.Generator) or seed (an int per draw); default 'd,m,rng'; without rng/seed "
                        "the numpy (and torch) global generators are seeded")
    a.add_argument("--alpha", type=float, default=DEFAULT_ALPHA,
                   help=f"overall false-alarm probability (default {DEFAULT_ALPHA:g})")
    a.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                   help="stop drawing after this many seconds (at least 50 draws are kept)")
    a.add_argument("--v", type=float, default=1.0, help="|x + y| of the PRF tests (default 1)")
    a.add_argument("--z", type=float, default=1.0, help="|x - y| of the RFF tests (default 1)")
    a.add_argument("--json", action="store_true", help="print the report as JSON")
    a.add_argument("--verbose", "-v", action="store_true", help="list the failed tests of each failed check")
    return p


def main(argv=None):
    """Entry point; returns the exit code (0 pass, 1 fail, 2 usage error)."""
    args = _parser().parse_args(argv)
    if args.command == "audit":
        return _audit(args)
    return 2  # pragma: no cover (argparse requires a known command)


def _audit(args):
    try:
        sampler = load_sampler(args.spec)
        report = audit(sampler, args.d, args.m, coupling=args.coupling, n_draws=args.n, rng=args.seed, call=args.call,
                       alpha=args.alpha, time_budget=args.time_budget, v=args.v, z=args.z, name=args.spec)
    except (ValueError, TypeError) as exc:
        print(f"python -m montecarlo audit: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # the user's sampler raised: the audit could not run
        print(f"python -m montecarlo audit: error: the sampler raised {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.render(verbose=args.verbose))
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
