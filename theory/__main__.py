"""Command line: quick exploration of the closed forms.

Examples
--------
python -m theory ratio --d 64 --v 0.5 --dps 50
python -m theory conformity --coupling simplex --d 64 --v 1
python -m theory table --d 64
python -m theory rff-ratio --d 16 --z 1
python -m theory prefactor --d 64
python -m theory zcrit --d 64
"""

from __future__ import annotations

import argparse
import sys

from mpmath import mp

from . import (
    PRF_COUPLINGS,
    conformity,
    mse_ratio,
    rff_mse_ratio,
    simplex_v2_prefactor,
    z_crit,
)


def _digits(value, dps):
    return mp.nstr(value, dps)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m theory", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def add_common(p, need_v=True):
        p.add_argument("--d", type=int, required=True, help="dimensionality d")
        if need_v:
            p.add_argument("--v", type=str, required=True, help="v = ||x + y|| (a decimal string is exact)")
        p.add_argument("--dps", type=int, default=30, help="decimal digits of working precision (default 30)")

    p = sub.add_parser("ratio", help="PRF MSE ratios ORF/IID and SimRF/IID (and SimRF/ORF) at one v")
    add_common(p)
    p.add_argument("--m", type=int, default=None, help="number of features (default d)")
    p = sub.add_parser("conformity", help="RF-conformity of one coupling")
    add_common(p)
    p.add_argument("--coupling", choices=PRF_COUPLINGS, required=True)
    p = sub.add_parser("table", help="table of PRF MSE ratios against v")
    add_common(p, need_v=False)
    p.add_argument("--m", type=int, default=None)
    p.add_argument("--vs", type=str, default="0,0.1,0.25,0.5,1,1.5,2,3,4",
                   help="comma-separated v values")
    p = sub.add_parser("rff-ratio", help="RFF MSE ratio ORF/IID at one z")
    p.add_argument("--d", type=int, required=True)
    p.add_argument("--z", type=str, required=True, help="z = ||x - y||")
    p.add_argument("--m", type=int, default=None)
    p.add_argument("--dps", type=int, default=30)
    p = sub.add_parser("prefactor", help="v^2 prefactor of the SimRF MSE (Sec. 5.1)")
    add_common(p, need_v=False)
    p.add_argument("--m", type=int, default=None)
    p = sub.add_parser("zcrit", help="z_crit(d) below which ORFs beat IIDRFs for RFFs")
    add_common(p, need_v=False)

    args = parser.parse_args(argv)
    try:
        with mp.workdps(args.dps):
            out = _run(args)
    except ValueError as exc:
        parser.error(str(exc))
    print(out)
    return 0


def _run(args):
    dps = args.dps
    if args.command == "ratio":
        lines = [f"d = {args.d}, m = {args.m or args.d}, v = {args.v}, {dps} digits"]
        for c, b in (("orthogonal", "iid"), ("simplex", "iid"), ("simplex", "orthogonal")):
            lines.append(f"MSE({c}) / MSE({b}) = {_digits(mse_ratio(c, b, args.d, args.v, args.m), dps)}")
        return "\n".join(lines)
    if args.command == "conformity":
        return _digits(conformity(args.coupling, args.d, args.v), dps)
    if args.command == "table":
        vs = [t.strip() for t in args.vs.split(",") if t.strip()]
        head = f"{'v':>6}  {'ORF/IID':>22}  {'SimRF/IID':>22}  {'SimRF/ORF':>22}"
        rows = [f"PRF MSE ratios, d = {args.d}, m = {args.m or args.d} (theory, {dps} digits)", head]
        for v in vs:
            a = mse_ratio("orthogonal", "iid", args.d, v, args.m)
            b = mse_ratio("simplex", "iid", args.d, v, args.m)
            rows.append(f"{v:>6}  {_digits(a, 18):>22}  {_digits(b, 18):>22}  {_digits(b / a, 18):>22}")
        return "\n".join(rows)
    if args.command == "rff-ratio":
        r = rff_mse_ratio("orthogonal", "iid", args.d, args.z, args.m)
        return f"RFF MSE(orthogonal) / MSE(iid) at d = {args.d}, z = {args.z}: {_digits(r, dps)}"
    if args.command == "prefactor":
        return _digits(simplex_v2_prefactor(args.d, args.m), dps)
    if args.command == "zcrit":
        return _digits(z_crit(args.d), dps)
    raise AssertionError(args.command)


if __name__ == "__main__":
    sys.exit(main())
