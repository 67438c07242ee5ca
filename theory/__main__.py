"""Command line: quick exploration of the closed forms.

Examples
--------
python -m theory ratio --d 64 --v 0.5 --dps 50
python -m theory conformity --coupling simplex --d 64 --v 1
python -m theory table --d 64
python -m theory rff-ratio --d 16 --z 1
python -m theory prefactor --d 64
python -m theory zcrit --d 64

Exit status: 0 on success, 2 for bad arguments, 1 when a computation cannot
reach the requested accuracy (``mpmath.NoConvergence``), 130 on Ctrl-C.
Errors are one line on stderr; rows of ``table`` are printed as they are
computed.
"""

from __future__ import annotations

import argparse
import sys

from mpmath import mp

from ._checks import PRF_COUPLINGS
from ._context import budget, precision
from .conformities import conformity
from .errors import NoConvergence
from .mse import mse_ratio, rff_mse_ratio, simplex_v2_prefactor, z_crit

#: Largest --dps accepted by the command line.
MAX_CLI_DPS = 10_000

PROG = "python -m theory"


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit status 2)."""

    def error(self, message):
        raise _UsageError(message)


class _UsageError(Exception):
    pass


def _dps(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if not 1 <= value <= MAX_CLI_DPS:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_CLI_DPS}, got {value}")
    return value


def _positive_int(name):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
        return value

    return parse


def _seconds(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def build_parser():
    parser = _Parser(prog=PROG, description=__doc__.split("\n")[0],
                     epilog="Exit status: 0 ok, 1 no convergence, 2 bad arguments.")
    sub = parser.add_subparsers(dest="command", required=True)

    def add_common(p, need_v=True):
        p.add_argument("--d", type=_positive_int("d"), required=True, help="dimensionality d")
        if need_v:
            p.add_argument("--v", type=str, required=True, help="v = ||x + y|| (a decimal string is exact)")
        p.add_argument("--dps", type=_dps, default=30,
                       help=f"decimal digits of working precision, 1..{MAX_CLI_DPS} (default 30)")
        p.add_argument("--seconds", type=_seconds, default=None,
                       help="time budget per computation in seconds (default: theory's, 30)")

    p = sub.add_parser("ratio", help="PRF MSE ratios ORF/IID and SimRF/IID (and SimRF/ORF) at one v")
    add_common(p)
    p.add_argument("--m", type=_positive_int("m"), default=None, help="number of features (default d)")
    p = sub.add_parser("conformity", help="RF-conformity of one coupling")
    add_common(p)
    p.add_argument("--coupling", choices=PRF_COUPLINGS, required=True)
    p = sub.add_parser("table", help="table of PRF MSE ratios against v (rows printed as computed)")
    add_common(p, need_v=False)
    p.add_argument("--m", type=_positive_int("m"), default=None)
    p.add_argument("--vs", type=str, default="0,0.1,0.25,0.5,1,1.5,2,3,4",
                   help="comma-separated v values")
    p = sub.add_parser("rff-ratio", help="RFF MSE ratio ORF/IID at one z")
    p.add_argument("--z", type=str, required=True, help="z = ||x - y||")
    add_common(p, need_v=False)
    p.add_argument("--m", type=_positive_int("m"), default=None)
    p = sub.add_parser("prefactor", help="v^2 prefactor of the SimRF MSE (Sec. 5.1)")
    add_common(p, need_v=False)
    p.add_argument("--m", type=_positive_int("m"), default=None)
    p = sub.add_parser("zcrit", help="z_crit(d) below which ORFs beat IIDRFs for RFFs")
    add_common(p, need_v=False)
    return parser


def main(argv=None, out=None):
    """Run the command line; returns the exit status."""
    out = sys.stdout if out is None else out
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    try:
        # the command line owns its process: the global precision is set too, for the arithmetic on results
        with precision(dps=args.dps), mp.workdps(args.dps), budget(args.seconds or 30.0):
            for line in _run(args):
                print(line, file=out, flush=True)
    except NoConvergence as exc:
        print(f"{PROG}: no convergence: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    except (ValueError, TypeError) as exc:
        print(f"{PROG}: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    return 0


def _digits(value, dps):
    return mp.nstr(value, dps)


def _run(args):
    dps = args.dps
    if args.command == "ratio":
        yield f"d = {args.d}, m = {args.m or args.d}, v = {args.v}, {dps} digits"
        for c, b in (("orthogonal", "iid"), ("simplex", "iid"), ("simplex", "orthogonal")):
            yield f"MSE({c}) / MSE({b}) = {_digits(mse_ratio(c, b, args.d, args.v, m=args.m), dps)}"
    elif args.command == "conformity":
        yield _digits(conformity(args.coupling, args.d, args.v), dps)
    elif args.command == "table":
        vs = [t.strip() for t in args.vs.split(",") if t.strip()]
        if not vs:
            raise ValueError("--vs must list at least one value")
        yield f"PRF MSE ratios, d = {args.d}, m = {args.m or args.d} (theory, {dps} digits)"
        yield f"{'v':>6}  {'ORF/IID':>22}  {'SimRF/IID':>22}  {'SimRF/ORF':>22}"
        for v in vs:
            a = mse_ratio("orthogonal", "iid", args.d, v, m=args.m)
            b = mse_ratio("simplex", "iid", args.d, v, m=args.m)
            yield f"{v:>6}  {_digits(a, 18):>22}  {_digits(b, 18):>22}  {_digits(b / a, 18):>22}"
    elif args.command == "rff-ratio":
        r = rff_mse_ratio("orthogonal", "iid", args.d, args.z, m=args.m)
        yield f"RFF MSE(orthogonal) / MSE(iid) at d = {args.d}, z = {args.z}: {_digits(r, dps)}"
    elif args.command == "prefactor":
        yield _digits(simplex_v2_prefactor(args.d, m=args.m), dps)
    elif args.command == "zcrit":
        yield _digits(z_crit(args.d), dps)
    else:  # pragma: no cover - argparse enforces the choices
        raise AssertionError(args.command)


if __name__ == "__main__":
    sys.exit(main())
