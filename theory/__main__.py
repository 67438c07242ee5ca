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

import contextlib
import sys

from mpmath import mp

from ._checks import PRF_COUPLINGS, check_dimension, guarded
from .cli import int_arg, main_runner, make_parser, real_arg
from ._context import budget, precision
from .conformities import check_v, conformity
from .mse import mse_ratio, rff_mse_ratio, simplex_v2_prefactor, z_crit

#: Largest --dps accepted by the command line.
MAX_CLI_DPS = 10_000

PROG = "python -m theory"


def build_parser():
    parser = make_parser(PROG, __doc__.split("\n")[0],
                         epilog="Exit status: 0 ok, 1 no convergence, 2 bad arguments, 130 interrupted.")
    sub = parser.add_subparsers(dest="command", required=True)

    def add_common(p, need_v=True):
        p.add_argument("--d", type=int_arg(1), required=True, help="dimensionality d")
        if need_v:
            p.add_argument("--v", type=str, required=True, help="v = ||x + y|| (a decimal string is exact)")
        p.add_argument("--dps", type=int_arg(1, MAX_CLI_DPS), default=30, help="decimal digits of working precision")
        p.add_argument("--work", type=int_arg(1), default=None,
                       help="work budget per computation in units of work (default: theory's DEFAULT_WORK, about a "
                            "minute of a 2-core machine; the same on any machine)")
        p.add_argument("--seconds", type=real_arg(0, strict=True), default=None,
                       help="an additional wall-clock budget per computation in seconds (off by default: on a busy "
                            "machine it can turn a value into an error)")

    def add_m(p):
        p.add_argument("--m", type=int_arg(1), default=None, help="number of features (default d)")

    p = sub.add_parser("ratio", help="PRF MSE ratios ORF/IID and SimRF/IID (and SimRF/ORF) at one v")
    add_common(p)
    add_m(p)
    p = sub.add_parser("conformity", help="RF-conformity of one coupling")
    add_common(p)
    p.add_argument("--coupling", choices=PRF_COUPLINGS, required=True)
    p = sub.add_parser("table", help="table of PRF MSE ratios against v (rows printed as computed)")
    add_common(p, need_v=False)
    add_m(p)
    p.add_argument("--vs", type=str, default="0,0.1,0.25,0.5,1,1.5,2,3,4", help="comma-separated v values")
    p = sub.add_parser("rff-ratio", help="RFF MSE ratio ORF/IID at one z")
    p.add_argument("--z", type=str, required=True, help="z = ||x - y||")
    add_common(p, need_v=False)
    add_m(p)
    p = sub.add_parser("prefactor", help="v^2 prefactor of the SimRF MSE (Sec. 5.1)")
    add_common(p, need_v=False)
    add_m(p)
    p = sub.add_parser("zcrit", help="z_crit(d) below which ORFs beat IIDRFs for RFFs")
    add_common(p, need_v=False)
    return parser


def main(argv=None, out=None):
    """Run the command line; returns the exit status (the contract of :func:`theory.cli.main_runner`)."""
    out = sys.stdout if out is None else out

    def body(argv):
        args = build_parser().parse_args(argv)
        # the command line owns its process: the global precision is set too, for the arithmetic on results
        limits = (budget(args.seconds, work=args.work) if (args.seconds, args.work) != (None, None)
                  else contextlib.nullcontext())
        with precision(dps=args.dps), mp.workdps(args.dps), limits:
            for line in _run(args):
                print(line, file=out, flush=True)
        return 0

    try:
        return main_runner(PROG, body, argv)
    except SystemExit as exc:  # argparse: --help (0) and bad options (2)
        return exc.code if isinstance(exc.code, int) else 2


def _digits(value, dps):
    return mp.nstr(value, dps)


def _run(args):
    """The output lines of one command.  Nothing is printed before every argument is valid: the
    one-value commands compute all their values before their first line, and ``table`` checks d and
    every v of --vs before its header (a bad value is then one line on stderr, nothing on stdout)."""
    dps = args.dps
    if args.command == "ratio":
        ratios = [(c, b, mse_ratio(c, b, args.d, args.v, m=args.m))
                  for c, b in (("orthogonal", "iid"), ("simplex", "iid"), ("simplex", "orthogonal"))]
        yield f"d = {args.d}, m = {args.m or args.d}, v = {args.v}, {dps} digits"
        for c, b, r in ratios:
            yield f"MSE({c}) / MSE({b}) = {_digits(r, dps)}"
    elif args.command == "conformity":
        yield _digits(conformity(args.coupling, args.d, args.v), dps)
    elif args.command == "table":
        vs = [t.strip() for t in args.vs.split(",")]
        if not all(vs):  # ("0.5,,1" skipped its empty item silently: a typo is refused, not guessed)
            raise ValueError(f"--vs must be comma-separated values, none of them empty, got {args.vs!r}")
        _check_table(args.d, vs)
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


@guarded()
def _check_table(d, vs):
    """The arguments of ``table`` checked as the rows will check them: d for the simplex coupling, each v."""
    check_dimension(d, "simplex")
    for v in vs:
        check_v(v)


if __name__ == "__main__":
    sys.exit(main())
