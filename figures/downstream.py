r"""Figs. 8 (``nonparam_results``) and 10 (``tunegraph``): kernel-regression classification on UCI data.

Both figures need the eight UCI datasets of Sec. 5.3, from a directory named
by ``--uci-dir DIR`` or the environment variable ``SIMPLEX_RF_UCI_DIR`` (the
tests and CI use ``../shared/uci``); without one they are skipped with a
one-line message.  The experiments are those of
:mod:`montecarlo.experiments.classification`:

* Fig. 8: :func:`~montecarlo.experiments.classification_curve`, accuracy on
  the test split against m/d for IIDRFs, ORFs and SimRFs at the paper's
  sigma, mean and standard error over independent feature draws, with the
  exact-kernel accuracy;
* Fig. 10: :func:`~montecarlo.experiments.sigma_search`, validation accuracy
  against sigma for the exact kernel and IIDRFs with m = 10 d (App. C.1),
  with the authors' sigma and the best sigma found here.

There is no closed form for these accuracies; the figures report what the
experiment code measures.  A dataset whose file is missing is left out (and
listed in the data file); if none is readable the figure is skipped.
"""

from __future__ import annotations

import math
import os

import numpy as np

from ._context import UCI_ENV
from .style import PAGE_WIDTH, label, style

FIG8_COUPLINGS = ("iid", "orthogonal", "simplex")


class Skip(Exception):
    """A figure cannot be produced in this run; the message says why (one line)."""


def resolve_uci_dir(ctx):
    """The UCI directory of the run (``--uci-dir`` first, then ``$SIMPLEX_RF_UCI_DIR``), or raise Skip.

    Unlike :func:`montecarlo.experiments.resolve_uci_dir` there is no
    implicit default: the figures run on UCI data only when asked to.
    """
    path = ctx.uci_dir or os.environ.get(UCI_ENV)
    if not path:
        raise Skip(f"no UCI data directory (pass --uci-dir DIR or set {UCI_ENV})")
    if not os.path.isdir(path):
        raise Skip(f"UCI data directory {path!r} does not exist")
    return path


def _experiments():
    try:
        from montecarlo import experiments
    except ImportError as exc:
        raise Skip(f"needs montecarlo.experiments (downstream-experiments issue), not importable: {exc}") from None
    missing = [n for n in ("classification_curve", "sigma_search", "uci") if not hasattr(experiments, n)]
    if missing:
        raise Skip(f"montecarlo.experiments lacks {', '.join(missing)}")
    return experiments


def _grid(n):
    cols = min(4, n)
    return math.ceil(n / cols), cols


def _band(ax, x, mean, err, key, **kw):
    st = style(key)
    st.update(kw)
    mean, err = np.asarray(mean, dtype=float), np.asarray(err, dtype=float)
    ax.plot(x, mean, **st)
    ax.fill_between(x, mean - err, mean + err, color=st["color"], alpha=0.2, lw=0)


def _per_dataset(ctx, tag, run):
    """Run ``run(name)`` for every dataset; missing files are recorded, not fatal."""
    ex = _experiments()
    data_dir = resolve_uci_dir(ctx)
    results, missing = {}, {}
    names = list(ex.uci.PAPER_SIGMAS)
    bar = ctx.progress_bar(len(names), tag)
    for name in names:
        try:
            results[name] = run(ex, name, data_dir)
        except FileNotFoundError as exc:
            missing[name] = str(exc)
        bar.update()
    bar.close()
    if not results:
        raise Skip(f"no UCI dataset readable in {data_dir!r} ({'; '.join(missing.values())})")
    return ex, results, missing


def fig8_nonparametric(ctx):
    """Fig. 8 (``nonparam_results``): classification accuracy against m/d per coupling, per dataset."""
    import matplotlib.pyplot as plt

    mults = ctx.n((1, 2, 3, 4, 6, 8, 10), (1, 10))
    n_draws = ctx.n(10, 3)

    def run(ex, name, data_dir):
        return ex.classification_curve(name, couplings=FIG8_COUPLINGS, m_multipliers=mults, n_draws=n_draws,
                                       rng=ctx.rng(f"fig8/{name}"), split_rng=ctx.seed, uci_dir=data_dir)

    ex, results, missing = _per_dataset(ctx, "fig8 classification", run)
    rows, cols = _grid(len(results))
    fig, axes = plt.subplots(rows, cols, figsize=(PAGE_WIDTH, 1.6 * rows + 0.4), squeeze=False)
    out = {}
    for ax, (name, r) in zip(axes.flat, results.items()):
        x = np.asarray(r.m, dtype=float) / r.d
        for c in FIG8_COUPLINGS:
            _band(ax, x, r.mean[c], r.stderr[c], c)
        ax.axhline(r.exact, **style("exact"))
        ax.set_title(f"{name} ($d = {r.d}$)")
        ax.set_xlabel("$m / d$")
        ax.set_ylabel("test accuracy")
        out[name] = {"d": r.d, "sigma": r.sigma, "m": r.m, "m_over_d": x, "exact": r.exact, "n_draws": r.n_draws,
                     "n_train": r.n_train, "n_test": r.n_test,
                     "mean": {c: r.mean[c] for c in FIG8_COUPLINGS}, "stderr": {c: r.stderr[c] for c in FIG8_COUPLINGS}}
    for ax in list(axes.flat)[len(results):]:
        ax.set_visible(False)
    handles, _ = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, [label(c) for c in FIG8_COUPLINGS] + [label("exact")], loc="outside lower center",
               ncol=len(handles))
    ctx.save(fig, "fig8_nonparametric", {
        "name": "fig8_nonparametric", "paper_label": "nonparam_results",
        "caption": ("Nonparametric classification by kernel regression (Sec. 5.3) with the Gaussian kernel "
                    "estimated by PRFs: test accuracy against m/d, mean and band of 1 s.e. over "
                    f"{n_draws} feature draws (one data split, seed {ctx.seed}), at the authors' sigma; dotted: "
                    "exact kernel (montecarlo.experiments.classification_curve)."),
        "couplings": FIG8_COUPLINGS, "results": out, "missing": missing})


def fig10_sigma_search(ctx):
    """Fig. 10 (``tunegraph``): validation accuracy against sigma, exact kernel and IIDRFs (m = 10 d)."""
    import matplotlib.pyplot as plt

    sigmas = tuple(np.round(np.geomspace(0.05, 2.0, ctx.n(9, 4)), 6))
    n_draws = ctx.n(10, 2)

    def run(ex, name, data_dir):
        return ex.sigma_search(name, sigmas=sigmas, coupling="iid", m_multiplier=10, n_draws=n_draws,
                               rng=ctx.rng(f"fig10/{name}"), split_rng=ctx.seed, uci_dir=data_dir)

    ex, results, missing = _per_dataset(ctx, "fig10 sigma search", run)
    rows, cols = _grid(len(results))
    fig, axes = plt.subplots(rows, cols, figsize=(PAGE_WIDTH, 1.6 * rows + 0.4), squeeze=False)
    out = {}
    for ax, (name, r) in zip(axes.flat, results.items()):
        ax.plot(r.sigmas, r.exact, **style("exact"))
        _band(ax, r.sigmas, r.mean, r.stderr, "iid")
        paper = ex.uci.PAPER_SIGMAS.get(name)
        if paper is not None:
            ax.axvline(paper, color="0.6", lw=0.6, linestyle="--")
        ax.set_xscale("log")
        ax.set_title(name)
        ax.set_xlabel(r"$\sigma$")
        ax.set_ylabel("validation accuracy")
        out[name] = {"sigmas": r.sigmas, "exact": r.exact, "mean": r.mean, "stderr": r.stderr, "m": r.m,
                     "n_draws": r.n_draws, "best_sigma": r.best_sigma, "best_exact_sigma": r.best_exact_sigma,
                     "paper_sigma": paper}
    for ax in list(axes.flat)[len(results):]:
        ax.set_visible(False)
    from matplotlib.lines import Line2D

    handles, _ = axes.flat[0].get_legend_handles_labels()
    handles.append(Line2D([], [], color="0.6", lw=0.6, linestyle="--", label="authors' sigma"))
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles))
    ctx.save(fig, "fig10_sigma_search", {
        "name": "fig10_sigma_search", "paper_label": "tunegraph",
        "caption": ("Sigma search (App. C.1): validation accuracy against the data rescaling sigma for the exact "
                    f"Gaussian kernel (dotted) and IID PRFs with m = 10 d (mean, band 1 s.e. over {n_draws} "
                    "draws); dashed: the authors' sigma (montecarlo.experiments.sigma_search)."),
        "results": out, "missing": missing})
