"""Command line: ``python -m montecarlo.experiments {table,curve,sigma,gram,attention,split-spread,performer-train}
[options]``.

The subcommands: :ref:`guide-montecarlo.experiments.__main__` (``docs/guide/experiments.rst``).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np

from theory import feature_kinds
from theory.cli import int_arg, main_runner, make_parser, n_jobs_arg, real_arg

from . import attention, classification, gram, spread, sweeps, uci
from ._common import format_z, run_terminable


PROG = "python -m montecarlo.experiments"
_SEED = int_arg(0)
_COUNT = int_arg(1)
_DRAWS = int_arg(2)
_POSITIVE = real_arg(0.0, strict=True)


#: Positive feature kinds without parameters (a kind with parameters, e.g. OPRFs' A, is for the Python API).
_PLAIN_POSITIVE = tuple(k for k in feature_kinds.names(log_space=True) if not feature_kinds.get(k).parameters)


def _sweep(p, paired=True, kinds=None):
    """Options of the parallel sweeps: workers, common random numbers, feature kind (one of ``kinds``)."""
    p.add_argument("--n-jobs", type=n_jobs_arg, default=None, metavar="N",
                   help=f"parallel workers (joblib; None: every core, -1 likewise; |N| <= {sweeps.MAX_N_JOBS}, and "
                        "never more than the sweep's units of work); the numbers do not depend on it")
    if paired:
        p.add_argument("--paired", action=argparse.BooleanOptionalAction, default=None,
                       help="common random numbers across couplings (the same norms and Gaussian blocks behind "
                            "every coupling; None: paired except under --protocol paper, which keeps the authors' "
                            "independent draws)")
    if kinds:
        p.add_argument("--kind", choices=kinds, default="prf", help="feature kind (theory.feature_kinds)")


def _sub(sub, name, **kwargs):
    """A subcommand parser that shows each default once (argparse does not pass the formatter down)."""
    from ._common import HelpFormatter

    return sub.add_parser(name, formatter_class=HelpFormatter, **kwargs)


def _common(p, data=True, splits=False):
    """Options shared by the subcommands: data directory and protocol, split seeds, seed, quiet."""
    if splits:
        p.add_argument("--split-seeds", type=_SEED, nargs="+", default=None, metavar="SEED",
                       help="split seeds (default: the protocol's, 0 1 2 3 4 or 42)")
    if data:
        p.add_argument("--uci-dir", default=None, metavar="DIR",
                       help=f"directory of the UCI files (default: ${uci.ENV_VAR}, else the copy shipped "
                            "with the package)")
        p.add_argument("--protocol", choices=tuple(uci.PROTOCOLS), default=uci.DEFAULT_PROTOCOL,
                       help="resampled: several random splits, validation held out, error bars over draws and "
                            "splits; paper: the authors' split (seed 42), as Tables 2-3 and Fig. 8 were run")
    p.add_argument("--seed", type=_SEED, default=0, help="seed of the random-feature draws (an integer >= 0)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def _parser():
    p = make_parser(PROG, ("Reproduce the downstream experiments of Simplex Random Features (Reid et al., ICML 2023): "
                           "Tables 2 and 3, Fig. 8, the sigma search of App. C.1, Fig. 7, the attention errors of "
                           "Sec. 5.4, the split-seed spread of Table 2 and a Fig. 9 analogue. Exit status: 0 done, "
                           "2 bad arguments or data, 1 out of memory or no convergence, 130 Ctrl-C, 143 SIGTERM."))
    from ._common import HelpFormatter, one_default_help

    one_default_help(p)
    sub = p.add_subparsers(dest="command", required=True,
                           metavar="{table,curve,sigma,gram,attention,split-spread,performer-train}")

    t = _sub(sub, "table", help="Tables 2 and 3 next to the paper's values (Sec. 5.3.1, App. B.2)",
             description="Tables 2 and 3: accuracy per coupling and dataset at m = d (Table 3: data "
                         "zero-padded to a power of two, m = p), with the paper's value and the z-score "
                         "(reproduced - paper) / reproduced standard error.")
    t.add_argument("--table", type=int, choices=(2, 3), default=2,
                   help="2: exact couplings at m = d; 3: fast variants on zero-padded data (App. B.2)")
    t.add_argument("--n-draws", "--n-reps", dest="n_draws", type=_DRAWS, default=100,
                   help="random-feature draws per dataset, coupling and split (--n-reps: old spelling)")
    t.add_argument("--m-multiplier", type=_COUNT, default=1, help="m = multiplier * d")
    t.add_argument("--couplings", nargs="+", default=None, metavar="COUPLING",
                   help="couplings to run (default: the table's columns)")
    t.add_argument("--datasets", nargs="+", default=None, metavar="NAME", choices=uci.DATASETS,
                   help="datasets to run (default all eight; a requested file that is missing is an error)")
    _sweep(t, kinds=_PLAIN_POSITIVE)
    _common(t, splits=True)

    c = _sub(sub, "curve", help="Fig. 8's numbers: accuracy against m / d (Sec. 5.3)",
             description="Fig. 8 as numbers: accuracy against m / d per coupling (python -m "
                         "figures.reproduce fig8 draws the figure).")
    c.add_argument("datasets", nargs="+", choices=uci.DATASETS, metavar="DATASET",
                   help=f"one or more of {', '.join(uci.DATASETS)}")
    c.add_argument("--n-draws", type=_DRAWS, default=50, help="draws per coupling, m and split")
    c.add_argument("--m-multipliers", type=_COUNT, nargs="+", default=[1, 2, 4, 10], metavar="K",
                   help="m = K d for each K")
    c.add_argument("--couplings", nargs="+", default=list(classification.FIG8_COUPLINGS), metavar="COUPLING",
                   help="couplings to run")
    _sweep(c, kinds=_PLAIN_POSITIVE)
    _common(c, splits=True)

    s = _sub(sub, "sigma", help="sigma search on a validation split (App. C.1)",
             description="App. C.1: validation accuracy against sigma for the exact kernel and PRFs "
                         "(nursery and chess restricted to 1000 training and 100 validation records).")
    s.add_argument("dataset", choices=uci.DATASETS, metavar="DATASET", help=f"one of {', '.join(uci.DATASETS)}")
    s.add_argument("--n-draws", "--n-reps", dest="n_draws", type=_DRAWS, default=10, help="feature draws")
    s.add_argument("--coupling", default="iid", help="coupling of the PRFs (the paper tunes IIDRFs)")
    s.add_argument("--m-multiplier", type=_COUNT, default=10, help="m = multiplier * d (the paper: 10)")
    s.add_argument("--sigmas", type=_POSITIVE, nargs="+", default=list(classification.DEFAULT_SIGMAS),
                   metavar="SIGMA", help="the sigma grid")
    s.add_argument("--split-seed", type=_SEED, default=None, help="split seed (default: the protocol's first)")
    s.add_argument("--no-restrict", action="store_true",
                   help="search on the full nursery and chess sets (App. C.1 restricts them to 1000 / 100)")
    _common(s)

    g = _sub(sub, "gram", help="Fig. 7: Gram-matrix Frobenius errors (N = d = 64, sigma = 0.1)",
             description="Fig. 7: mean squared Frobenius error of the PRF Gram matrix, N = d = 64, "
                         "x ~ N(0, 0.1^2 I).")
    g.add_argument("--n-draws", type=_DRAWS, default=100, help="draws per coupling and m")
    g.add_argument("--m", type=_COUNT, nargs="+", default=[16, 32, 64, 128, 256], metavar="M",
                   help="numbers of features")
    g.add_argument("--independent", action="store_true",
                   help="an independent stream per coupling (default: common random numbers across couplings)")
    _sweep(g, paired=False, kinds=tuple(k for k in feature_kinds.names(kernel="gaussian")  # (Fig. 7's kernel)
                                        if not feature_kinds.get(k).parameters))
    _common(g, data=False)

    a = _sub(sub, "attention", help="Sec. 5.4: PRF attention error vs exact softmax attention",
             description="Sec. 5.4: relative error of PRF attention against exact softmax attention on "
                         "synthetic transformer-like queries and keys (d = 64).")
    a.add_argument("--seq-lens", type=_COUNT, nargs="+", default=[256, 1024, 4096], metavar="L",
                   help="sequence lengths")
    a.add_argument("--m", type=_COUNT, nargs="+", default=[16, 64, 130, 256], metavar="M",
                   help="numbers of features (the paper's Performers: 130)")
    a.add_argument("--couplings", nargs="+", default=["iid", "orthogonal", "simplex"], metavar="COUPLING",
                   help="couplings to compare")
    a.add_argument("--n-draws", type=_DRAWS, default=20, help="feature draws per cell")
    a.add_argument("--logit-std", type=_POSITIVE, default=attention.DEFAULT_LOGIT_STD,
                   help="standard deviation of the logits q.k/sqrt(d) of unrelated tokens "
                        "(montecarlo.experiments.attention.DEFAULT_LOGIT_STD)")
    a.add_argument("--causal", action="store_true", help="causal (autoregressive) attention")
    a.add_argument("--matrix-max-len", type=int_arg(0), default=1024,
                   help="also measure the O(L^2) attention-matrix error up to this L")
    _common(a, data=False)

    ss = _sub(sub, "split-spread", help="Table 2's cells over 40 other split seeds of the paper's protocol",
              description="The split-seed sweep: SimRF and SimRF+ accuracies (m = d) on the split of the paper's "
                          "procedure for seeds 43 ... 82 (and the authors' 42, reported apart), their range and "
                          "s.d., and the quantile of the printed Table 2 value among them.")
    ss.add_argument("datasets", nargs="+", choices=uci.DATASETS, metavar="DATASET",
                    help=f"one or more of {', '.join(uci.DATASETS)}")
    ss.add_argument("--couplings", nargs="+", default=["simplex", "simplex_plus"], metavar="COUPLING",
                    help="couplings (Table 2 prints simplex and simplex_plus)")
    ss.add_argument("--n-splits", type=_COUNT, default=len(spread.DEFAULT_SEEDS),
                    help="number of split seeds (first-seed, first-seed + 1, ...)")
    ss.add_argument("--first-seed", type=int_arg(43), default=spread.DEFAULT_SEEDS[0],
                    help="first split seed of the sweep (above the authors' 42)")
    ss.add_argument("--n-draws", type=_DRAWS, default=200, help="draws per split and coupling")
    _sweep(ss, paired=False)
    ss.add_argument("--uci-dir", default=None, metavar="DIR",
                    help=f"directory of the UCI files (default: ${uci.ENV_VAR}, else the copy shipped with the "
                         "package)")
    ss.add_argument("--seed", type=_SEED, default=0, help="seed of the random-feature draws (an integer >= 0)")
    ss.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    from . import performer_train  # its parser only; torch is imported when the command runs

    performer_train.add_parser(sub)
    sub.choices["performer-train"].formatter_class = HelpFormatter  # each default once, like the others
    return p


def main(argv=None):
    """Run the command line; returns the exit status (0 success, 2 bad arguments or data, 1 other failure).

    Errors follow the toolkit's contract (:func:`theory.cli.main_runner`): one line
    ``python -m montecarlo.experiments: error: ...`` on stderr, status 2 for bad input (a missing or
    malformed data file included), 1 for out of memory or no convergence, 130 for Ctrl-C, 143 for SIGTERM
    (handled like Ctrl-C: a file being written, ``performer-train --out``, is removed, never left half-written).
    """
    return run_terminable(main_runner, PROG, _main, argv)


def _main(argv):
    args = _parser().parse_args(argv)
    progress = None if args.quiet else _stderr_progress
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        try:
            return _run(args, progress)
        except FileNotFoundError as exc:  # a missing data file or directory is bad input, said in one line
            raise ValueError(str(exc)) from None
        finally:
            seen = set()
            for w in caught:  # one line per distinct warning, on stderr
                text = f"{PROG}: warning: {str(w.message).splitlines()[0]}"
                if text not in seen:
                    seen.add(text)
                    print(text, file=sys.stderr)


def _stderr_progress(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _run(args, progress):
    if args.command == "performer-train":
        from . import performer_train

        return performer_train.run(args)
    if args.command == "table":
        couplings = args.couplings or (classification.TABLE2_COUPLINGS if args.table == 2
                                       else classification.TABLE3_COUPLINGS)
        table = classification.accuracy_table(couplings, args.m_multiplier, args.n_draws, args.seed,
                                              uci_dir=args.uci_dir, datasets=args.datasets,
                                              pad_pow2=args.table == 3, protocol=args.protocol,
                                              split_rng=args.split_seeds, require=args.datasets is not None,
                                              progress=progress, kind=args.kind, paired=args.paired,
                                              n_jobs=args.n_jobs)
        print(f"Table {args.table}" + (" (zero-padded to a power of two, m = p)" if args.table == 3 else " (m = d)"))
        print(table.format(classification.paper_table(args.table)))
        return 0
    if args.command == "curve":
        for name in args.datasets:
            r = classification.classification_curve(name, args.couplings, args.m_multipliers, args.n_draws,
                                                    args.seed, protocol=args.protocol, split_rng=args.split_seeds,
                                                    uci_dir=args.uci_dir, progress=progress, kind=args.kind,
                                                    paired=args.paired, n_jobs=args.n_jobs)
            print(f"{name}: d = {r.d}, sigma = {r.sigma:.4g}, exact {r.exact:.4f}, protocol {r.protocol}, "
                  f"splits {list(r.split_seeds)}, {r.n_draws} draws per split, "
                  + ("paired draws" if r.paired else "independent draws"))
            print("m/d | " + " | ".join(r.mean) + " | " + " | ".join(f"{a}-{b} (z)" for a, b in r.diff_mean))
            for j, m in enumerate(r.m):
                print(f"{m // r.d} | " + " | ".join(f"{r.mean[c][j]:.4f}+-{r.stderr[c][j]:.4f}" for c in r.mean)
                      + " | " + " | ".join(f"{r.diff_mean[p][j]:+.4f}+-{r.diff_stderr[p][j]:.4f} "
                                           f"({format_z(r.z(*p)[j])})" for p in r.diff_mean))
        return 0
    if args.command == "sigma":
        res = classification.sigma_search(args.dataset, args.sigmas, args.coupling, args.m_multiplier, args.n_draws,
                                          args.seed, protocol=args.protocol, split_rng=args.split_seed,
                                          restrict=not args.no_restrict, uci_dir=args.uci_dir, progress=progress)
        print(f"{res.dataset}: protocol {res.protocol}, split {res.split_seed}, {res.n_train} training and "
              f"{res.n_validation} validation records, m = {res.m}, {res.n_draws} draws")
        print("sigma | exact | PRF mean +- se")
        for s_, e, mu, se in zip(res.sigmas, res.exact, res.mean, res.stderr):
            print(f"{s_:.4g} | {e:.4f} | {mu:.4f}+-{se:.4f}")
        print(f"best sigma (PRF) {res.best_sigma:.4g}, (exact) {res.best_exact_sigma:.4g}; "
              f"paper {uci.PAPER_SIGMAS[args.dataset]:.4g}")
        return 0
    if args.command == "gram":
        res = gram.fig7_frobenius(m_values=args.m, n_draws=args.n_draws, rng=args.seed, kind=args.kind,
                                  paired=not args.independent, n_jobs=args.n_jobs, progress=progress)
        print("m | " + " | ".join(res.mean) + " | " + " | ".join(f"{a}-{b} (z)" for a, b in res.diff_mean))
        for j, m in enumerate(res.m):
            print(f"{m} | " + " | ".join(f"{res.mean[c][j]:.5g}+-{res.stderr[c][j]:.2g}" for c in res.mean)
                  + " | " + " | ".join(f"{res.diff_mean[p][j]:+.4g}+-{res.diff_stderr[p][j]:.2g} "
                                       f"({format_z(res.z(*p)[j])})" for p in res.diff_mean))
        print(f"kind {res.kind}, {res.n_draws} draws, " + ("paired draws" if res.paired else "independent draws"))
        return 0
    if args.command == "split-spread":
        seeds = tuple(range(args.first_seed, args.first_seed + args.n_splits))
        res = spread.split_spread(args.datasets, args.couplings, seeds, args.n_draws, args.seed,
                                  uci_dir=args.uci_dir, n_jobs=args.n_jobs, progress=progress)
        print(res.format())
        return 0
    res = attention.attention_errors(args.couplings, args.seq_lens, args.m, args.n_draws, args.seed,
                                     causal=args.causal, logit_std=args.logit_std,
                                     matrix_max_len=args.matrix_max_len, progress=progress)
    print(res.format())
    return 0


if __name__ == "__main__":
    np.seterr(under="ignore")
    sys.exit(main())
