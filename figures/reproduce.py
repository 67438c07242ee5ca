"""``python -m figures.reproduce``: the downstream figures with chosen protocol and effort.

``python -m figures`` draws Figs. 8 and 10 and the attention scan at an
effort that keeps the main job near a minute.  This command draws one of
them with the effort exposed, e.g. Fig. 8 so that the curves do not cross by
noise::

    python -m figures.reproduce fig8 --draws 1000                  # the paper's effort, paired draws
    python -m figures.reproduce fig8 --protocol resampled --splits 5 --draws 100
    python -m figures.reproduce fig8 --protocol paper --draws 200 --datasets banknote wifi --independent
    python -m figures.reproduce attention --draws 50 --logit-stds 0.05 0.1 0.2 0.5 1
    python -m figures.reproduce winners --full                      # every PNC closed form, OPRF's included

The figure's JSON records the protocol, the split seeds and the draws.
Progress bars go to stderr; errors are one line on stderr with a non-zero
exit status.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from montecarlo.experiments.runtime import HelpFormatter, one_default_help
from theory.cli import check_output_dir, int_arg, main_runner, make_parser, n_jobs_arg, real_arg


PROG = "python -m figures.reproduce"
#: Most splits of ``fig8 --splits`` and points of ``fig10 --n-sigmas``: each is a whole classification run per
#: dataset (the paper uses 1 split and 9 sigmas); a larger count is refused before any work, not run for days.
MAX_SPLITS = 1000
MAX_SIGMAS = 1000


def _count_arg(minimum, maximum, what):
    """argparse ``type=``: an integer >= ``minimum`` (:func:`theory.cli.int_arg`'s message) and <= ``maximum``."""
    below = int_arg(minimum)

    def count(text):
        value = below(text)
        if value > maximum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum} and <= {maximum} ({what}), got {value}")
        return value

    return count


def _sub(sub, name, common=None, **kwargs):
    """A subcommand's parser; ``common(parser, suppress=True)`` adds the shared options (given after the name)."""
    q = sub.add_parser(name, formatter_class=HelpFormatter, **kwargs)
    if common is not None:
        common(q, suppress=True)
    return q


def _parser():
    from montecarlo.experiments import uci

    from .attention import EFFORT as ATT
    from .downstream import FIG8_EFFORT, FIG10_EFFORT
    from .winners import EFFORT as WINNERS

    def common(q, suppress=False):
        """The options every subcommand shares, on the main parser and (``suppress``: no default, so that a value
        given after the subcommand's name overrides one given before it) on each subcommand's."""
        def d(value):
            return argparse.SUPPRESS if suppress else value

        q.add_argument("--out", default=d("simplex_rf_figures"),
                       help="output directory (checked and created before anything is computed)")
        q.add_argument("--seed", type=int_arg(0), default=d(0), help="base random seed")
        q.add_argument("--uci-dir", default=d(None), metavar="DIR",
                       help=f"UCI data directory (default: ${uci.ENV_VAR}, else the copy shipped with the package)")
        q.add_argument("--no-progress", action="store_true", default=d(False), help="no progress bars")
        q.add_argument("--n-jobs", type=n_jobs_arg, default=d(None), metavar="N",
                       help="parallel workers of the sweeps (joblib; None: every core); the numbers do not depend on "
                            "it")

    p = one_default_help(make_parser(PROG, "The downstream figures with chosen protocol and effort: Fig. 8, Fig. 10, "
                                           "the attention scan, the Fig. 9 analogue and the winners' map."))
    common(p)
    sub = p.add_subparsers(dest="figure", required=True, metavar="{fig8,fig10,attention,performer,winners}")
    f8 = _sub(sub, "fig8", common, help="Fig. 8: accuracy against m / d")
    f8.add_argument("--protocol", choices=tuple(uci.PROTOCOLS), default=FIG8_EFFORT.protocol,
                    help="paper: the authors' split; resampled: several random splits")
    f8.add_argument("--splits", type=_count_arg(1, MAX_SPLITS, "each split is a whole run"), default=None,
                    help="number of splits (seeds 0 ... N-1 for resampled, 42, 43, ... for paper; "
                         f"default: the protocol's, 5 or 1; at most {MAX_SPLITS})")
    exceptions = ", ".join(f"{n} on {name}" for name, n in FIG8_EFFORT.draws)
    f8.add_argument("--draws", type=int_arg(2), default=None,
                    help="feature draws per dataset, coupling, m and split, the same on every dataset (default: "
                         f"the main job's, {FIG8_EFFORT.n_draws}" + (f", {exceptions}" if exceptions else "") + ")")
    f8.add_argument("--independent", action="store_true",
                    help="an independent stream per coupling (default: common random numbers across couplings)")
    f8.add_argument("--m-multipliers", type=int_arg(1), nargs="+", default=list(FIG8_EFFORT.m_multipliers),
                    metavar="K", help="m = K d")
    f8.add_argument("--datasets", nargs="+", choices=uci.DATASETS, default=None, metavar="NAME",
                    help="datasets (default all eight)")
    f10 = _sub(sub, "fig10", common, help="Fig. 10: the sigma search")
    f10.add_argument("--protocol", choices=tuple(uci.PROTOCOLS), default="paper",
                     help="where the validation records come from")
    f10.add_argument("--draws", type=int_arg(2), default=FIG10_EFFORT["n_draws"], help="feature draws")
    f10.add_argument("--n-sigmas", type=_count_arg(2, MAX_SIGMAS, "each sigma is a whole run"),
                     default=FIG10_EFFORT["n_sigmas"],
                     help=f"points of the sigma grid (0.05 ... 2, log-spaced; at most {MAX_SIGMAS})")
    at = _sub(sub, "attention", common,
              help="random-feature attention error (PRF/OPRF/SDERF x couplings x m) vs logit scale")
    at.add_argument("--draws", type=int_arg(2), default=ATT["n_draws"], help="feature draws per cell")
    at.add_argument("--seq-lens", type=int_arg(1), nargs="+", default=list(ATT["seq_lens"]), metavar="L",
                    help="sequence lengths")
    at.add_argument("--logit-stds", type=real_arg(0.0, strict=True), nargs="+", default=list(ATT["logit_stds"]),
                    metavar="S", help="logit standard deviations")
    pf = _sub(sub, "performer", common, help="Fig. 9 analogue: a small Performer-ViT on scikit-learn's digits")
    pf.add_argument("--seeds", type=int_arg(2), default=5, help="seeds per arm")
    pf.add_argument("--epochs", type=int_arg(1), default=10, help="training epochs")
    wn = _sub(sub, "winners", common, help="who wins where: every (kind x coupling) closed form over (d, v)")
    wn.add_argument("--full", action="store_true",
                    help="evaluate every pnc_orthogonal contestant exactly, OPRF x PNC included (minutes)")
    wn.add_argument("--ds", type=int_arg(2), nargs="+", default=None, metavar="D",
                    help="dimensions (None: the main job's, 2 ... 1024)")
    wn.add_argument("--vs", type=real_arg(0.0, strict=True, maximum=1e300), nargs="+", default=None, metavar="V",
                    help="values of v = |x + y| up to the closed forms' reach, 1e300 (None: the main job's, "
                         "0.05 ... 5)")
    wn.add_argument("--draws", type=int_arg(2), default=None,
                    help="Monte Carlo draws per simplex_plus point (default: the main job's, "
                         f"{WINNERS['mc_draws']}); the points are (d, v) = "
                         + ", ".join(f"({d}, {v})" for d, v in WINNERS["mc_points"])
                         + ", and at least one must lie in the --ds / --vs grid")
    return p


#: The list options whose values must not repeat (a repeated value would be computed and drawn twice).
_NO_REPEATS = (("m_multipliers", "--m-multipliers"), ("datasets", "--datasets"), ("seq_lens", "--seq-lens"),
               ("logit_stds", "--logit-stds"), ("ds", "--ds"), ("vs", "--vs"))


def _refuse_repeats(parser, args):
    """A parser error (status 2, nothing computed) naming the first list option with a repeated value
    (:func:`montecarlo.experiments.runtime.refuse_repeats`)."""
    from montecarlo.experiments.runtime import refuse_repeats

    for attr, option in _NO_REPEATS:
        values = getattr(args, attr, None)
        if values is not None:
            try:
                refuse_repeats(values, option, "a value")
            except ValueError as exc:
                parser.error(str(exc))


def main(argv=None):
    """Run the command line; returns the exit status (0 written, 2 bad arguments or data, 1 other failure,
    130 Ctrl-C, 143 SIGTERM; an interrupted run leaves no temporary ``.NAME.PID.part`` file)."""
    from montecarlo.experiments.runtime import run_terminable

    return run_terminable(main_runner, PROG, _main, argv)


def _refuse_idle_draws(parser, args):
    """``winners --draws N`` with no simplex_plus Monte Carlo point in the chosen grid was silently ignored; now
    a parser error naming the points (status 2, nothing computed)."""
    if getattr(args, "figure", None) != "winners" or args.draws is None:
        return
    from .winners import EFFORT, mc_points_in

    ds = tuple(args.ds) if args.ds is not None else EFFORT["ds"]
    vs = tuple(repr(v) for v in args.vs) if args.vs is not None else EFFORT["vs"]
    if not mc_points_in(EFFORT["mc_points"], ds, vs):
        points = ", ".join(f"({d}, {v})" for d, v in EFFORT["mc_points"])
        parser.error(f"--draws {args.draws}: no simplex_plus Monte Carlo point (d, v) = {points} lies in the chosen "
                     "--ds / --vs grid, so no draw would be made; add one of them to the grid or leave --draws out")


def _main(argv):
    parser = _parser()
    args = parser.parse_args(argv)
    _refuse_repeats(parser, args)
    _refuse_idle_draws(parser, args)
    from montecarlo.experiments import uci

    from . import attention, downstream
    from ._context import Context
    from .style import use_paper_style

    out = check_output_dir(args.out, "--out")
    try:  # before any computing: a folder that cannot be made is bad input, said at once
        os.makedirs(out, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--out {out!r}: cannot create the directory ({exc.strerror or exc})") from None
    ctx = Context(out=out, seed=args.seed, progress=not args.no_progress, uci_dir=args.uci_dir, n_jobs=args.n_jobs)
    use_paper_style()
    try:
        if args.figure == "fig8":
            seeds = None
            if args.splits is not None:
                first = uci.get_protocol(args.protocol).default_seeds[0]
                seeds = tuple(range(first, first + args.splits))
            effort = downstream.with_effort(downstream.FIG8_EFFORT, protocol=args.protocol, split_seeds=seeds,
                                            n_draws=args.draws, m_multipliers=tuple(args.m_multipliers),
                                            datasets=None if args.datasets is None else tuple(args.datasets),
                                            paired=not args.independent, draws=None if args.draws is None else ())
            downstream.fig8_nonparametric(ctx, effort)
            name = "fig8_nonparametric"
        elif args.figure == "fig10":
            downstream.fig10_sigma_search(ctx, {"n_sigmas": args.n_sigmas, "n_draws": args.draws}, args.protocol)
            name = "fig10_sigma_search"
        elif args.figure == "winners":
            from .winners import new_winners_map

            effort = {"full": args.full}
            if args.ds is not None:
                effort["ds"] = tuple(args.ds)
            if args.vs is not None:
                effort["vs"] = tuple(repr(v) for v in args.vs)
            if args.draws is not None:
                effort["mc_draws"] = args.draws
            new_winners_map(ctx, effort)
            name = "new_winners_map"
        elif args.figure == "performer":
            from .performer import fig9_performer_digits

            fig9_performer_digits(ctx, {"seeds": args.seeds, "epochs": args.epochs})
            name = "fig9_performer_digits"
        else:
            attention.new_attention_scan(ctx, {"seq_lens": tuple(args.seq_lens),
                                               "logit_stds": tuple(args.logit_stds), "n_draws": args.draws})
            name = "new_attention_scan"
    except (downstream.Skip, FileNotFoundError) as exc:  # no data: bad input, one line
        raise ValueError(str(exc)) from None
    print(f"{name} -> {os.path.join(ctx.out, name)}.{{png,pdf,json}}")
    return 0


if __name__ == "__main__":
    from ._sweep import exit_now

    np.seterr(under="ignore")
    exit_now(main())
