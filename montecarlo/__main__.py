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

from theory.cli import OneLineParser, int_arg, make_parser, real_arg
from .audit import CLAIMABLE_COUPLINGS, DEFAULT_ALPHA, DEFAULT_N, MIN_N, audit, load_sampler

PROG = "python -m montecarlo"


def _parser():
    p = make_parser(PROG, "Tools of the montecarlo package (simplex random features).")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser)
    a = sub.add_parser("audit", help="test a projection-matrix sampler statistically",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                       description="Draw n matrices from a sampler and test marginal Gaussianity, unbiasedness of "
                                   "PRF/RFF kernel estimates and (with --coupling) conformity with theory. "
                                   "Exit 0: all checks pass; 1: a check fails; 2: usage error.")
    a.add_argument("spec", metavar="MODULE:FUNCTION",
                   help="the sampler: dotted.module:function or path/to/file.py:function")
    a.add_argument("--d", type=int_arg(2), required=True, default=argparse.SUPPRESS, help="dimensionality (>= 2; required)")
    a.add_argument("--m", type=int_arg(1), default=None, help="rows per draw (None: d)")
    a.add_argument("--coupling", choices=CLAIMABLE_COUPLINGS, default=None,
                   help="the coupling the sampler claims (enables the conformity and structure checks)")
    a.add_argument("--n", type=int_arg(MIN_N), default=DEFAULT_N, help=f"number of draws (>= {MIN_N})")
    a.add_argument("--seed", type=int_arg(0), default=0, help="seed of the audit (>= 0)")
    a.add_argument("--call", default="d,m,rng",
                   help="argument order of the sampler: tokens d, m and at most one of rng (a "
                        "numpy.random.Generator) or seed (an int per draw); without rng/seed "
                        "the numpy (and torch) global generators are seeded")
    a.add_argument("--alpha", type=real_arg(0.0, strict=True), default=DEFAULT_ALPHA,
                   help="overall false-alarm probability, in (0, 1)")
    a.add_argument("--time-budget", type=real_arg(0.0, strict=True), default=None, metavar="SECONDS",
                   help=f"stop drawing after this many seconds (at least {MIN_N} draws are kept)")
    a.add_argument("--v", type=real_arg(0.0, strict=True), default=1.0, help="|x + y| of the PRF tests (> 0)")
    a.add_argument("--z", type=real_arg(0.0, strict=True), default=1.0, help="|x - y| of the RFF tests (> 0)")
    a.add_argument("--json", action="store_true",
                   help='print the report as strict JSON (NaN as null, an infinite value as "inf" or "-inf")')
    a.add_argument("--verbose", "-v", action="store_true", help="list the failed tests of each failed check")
    a.add_argument("--no-progress", action="store_true",
                   help="no progress bar (shown on stderr only when it is a terminal)")
    return p


def main(argv=None):
    """Entry point; returns the exit code (0 pass, 1 fail, 2 usage error)."""
    args = _parser().parse_args(argv)
    if args.command == "audit":
        return _audit(args)
    return 2  # pragma: no cover (argparse requires a known command)


def _audit(args):
    prog = f"{PROG} audit"
    try:
        sampler = load_sampler(args.spec)
        report = audit(sampler, args.d, args.m, coupling=args.coupling, n_draws=args.n, rng=args.seed, call=args.call,
                       alpha=args.alpha, time_budget=args.time_budget, v=args.v, z=args.z, name=args.spec,
                       progress=not args.no_progress and sys.stderr.isatty())
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except (ValueError, TypeError) as exc:
        print(f"{prog}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except Exception as exc:  # the user's sampler raised (or ran out of memory): the audit could not run
        print(f"{prog}: error: the sampler raised {type(exc).__name__}: {' '.join(str(exc).split())}",
              file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, allow_nan=False))
    else:
        print(report.render(verbose=args.verbose))
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
