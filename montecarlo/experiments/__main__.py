"""Command line: ``python -m montecarlo.experiments {table,sigma,gram,attention} [options]``.

* ``table``: Table 2 (``--table 2``, the exact couplings at m = d) or Table 3
  (``--table 3``, fast variants on zero-padded data) on the UCI data found in
  ``--uci-dir`` or ``$SIMPLEX_RF_UCI_DIR``, next to the paper's numbers;
* ``sigma``: the sigma search of App. C.1 for one dataset;
* ``gram``: Fig. 7's Frobenius errors;
* ``attention``: the attention-approximation errors of Sec. 5.4.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from . import attention, classification, gram, uci


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m montecarlo.experiments", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    classification.add_table_arguments(sub.add_parser("table", help="Tables 2 and 3 (Sec. 5.3, App. B.2)"))
    s = sub.add_parser("sigma", help="sigma search on a validation split (App. C.1)")
    s.add_argument("dataset", choices=uci.DATASETS)
    s.add_argument("--uci-dir", default=None)
    s.add_argument("--n-draws", "--n-reps", dest="n_draws", type=int, default=10)
    s.add_argument("--coupling", default="iid")
    s.add_argument("--seed", type=int, default=0)
    g = sub.add_parser("gram", help="Fig. 7: Gram-matrix Frobenius errors (N = d = 64, sigma = 0.1)")
    g.add_argument("--n-draws", type=int, default=100)
    g.add_argument("--m", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    g.add_argument("--seed", type=int, default=0)
    a = sub.add_parser("attention", help="Sec. 5.4: PRF attention error vs exact softmax attention")
    a.add_argument("--seq-lens", type=int, nargs="+", default=[256, 1024, 4096])
    a.add_argument("--m", type=int, nargs="+", default=[16, 64, 130, 256])
    a.add_argument("--couplings", nargs="+", default=["iid", "orthogonal", "simplex"])
    a.add_argument("--n-draws", type=int, default=20)
    a.add_argument("--logit-std", type=float, default=0.25)
    a.add_argument("--causal", action="store_true")
    a.add_argument("--matrix-max-len", type=int, default=1024)
    a.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    try:
        return _run(args)
    except (FileNotFoundError, ValueError, TypeError) as exc:  # bad data or arguments: one clear line
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _run(args):
    if args.command == "table":
        return classification.run_table(args)
    if args.command == "sigma":
        res = classification.sigma_search(args.dataset, coupling=args.coupling, n_draws=args.n_draws, rng=args.seed,
                                          uci_dir=args.uci_dir)
        print("sigma | exact | PRF mean +- se")
        for s_, e, mu, se in zip(res.sigmas, res.exact, res.mean, res.stderr):
            print(f"{s_:.4g} | {e:.4f} | {mu:.4f}+-{se:.4f}")
        print(f"best sigma (PRF) {res.best_sigma:.4g}, (exact) {res.best_exact_sigma:.4g}; "
              f"paper {uci.PAPER_SIGMAS[args.dataset]:.4g}")
        return 0
    if args.command == "gram":
        res = gram.fig7_frobenius(m_values=args.m, n_draws=args.n_draws, rng=args.seed)
        print("m | " + " | ".join(res.mean))
        for j, m in enumerate(res.m):
            print(f"{m} | " + " | ".join(f"{res.mean[c][j]:.5g}+-{res.stderr[c][j]:.2g}" for c in res.mean))
        return 0
    res = attention.attention_errors(args.couplings, args.seq_lens, args.m, args.n_draws, args.seed,
                                     causal=args.causal, logit_std=args.logit_std,
                                     matrix_max_len=args.matrix_max_len)
    print(res.format())
    return 0


if __name__ == "__main__":
    np.seterr(under="ignore")
    sys.exit(main())
