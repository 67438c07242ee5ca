r"""Figs. 8 (``nonparam_results``) and 10 (``tunegraph``): downstream experiments on UCI data.

These figures need two things that are not part of this package:

* a UCI data directory (``--uci-dir DIR`` or the environment variable
  ``SIMPLEX_RF_UCI_DIR``; the tests and CI use ``../shared/uci``), and
* the experiment code of the downstream-experiments issue,
  :mod:`montecarlo.experiments`.

Without either, the figure is skipped with a one-line message saying which
is missing.  The experiment module is looked up at run time; the functions
this module calls (its contract with :mod:`montecarlo.experiments`) are

``nonparametric_classification(data_dir, quick=..., rng=..., xp=...)``
    returns ``{dataset: {"m_over_d": [...], "exact": float or None,
    coupling: {"mean": [...], "stderr": [...]}, ...}}`` (Fig. 8: accuracy
    against m/d per coupling);
``sigma_search(data_dir, quick=..., rng=..., xp=...)``
    returns ``{dataset: {"sigma": [...], "exact": {"mean": [...], "stderr": [...]},
    "iid": {"mean": [...], "stderr": [...]}}}`` (Fig. 10: accuracy against
    sigma, exact kernel and IID PRFs, m = 10 d).

If the module exists but lacks these names, the skip message names the
missing ones.
"""

from __future__ import annotations

import importlib
import math
import os

import numpy as np

from ._context import UCI_ENV
from .style import PAGE_WIDTH, style


class Skip(Exception):
    """A figure cannot be produced in this run; the message says why (one line)."""


def resolve_uci_dir(ctx):
    """The UCI directory of the run (``--uci-dir`` first, then ``$SIMPLEX_RF_UCI_DIR``), or raise Skip."""
    path = ctx.uci_dir or os.environ.get(UCI_ENV)
    if not path:
        raise Skip(f"no UCI data directory (pass --uci-dir DIR or set {UCI_ENV})")
    if not os.path.isdir(path):
        raise Skip(f"UCI data directory {path!r} does not exist")
    return path


def _experiment(name):
    try:
        module = importlib.import_module("montecarlo.experiments")
    except ImportError as exc:
        raise Skip(f"needs montecarlo.experiments (downstream-experiments issue), not importable: {exc}") from None
    func = getattr(module, name, None)
    if func is None:
        raise Skip(f"montecarlo.experiments has no {name}() (see figures.downstream for the expected contract)")
    return func


def _grid(n):
    cols = min(4, n)
    return math.ceil(n / cols), cols


def _band(ax, x, series, coupling, **kw):
    st = style(coupling)
    st.update(kw)
    mean = np.asarray(series["mean"], dtype=float)
    err = np.asarray(series["stderr"], dtype=float)
    ax.plot(x, mean, **st)
    ax.fill_between(x, mean - err, mean + err, color=st["color"], alpha=0.2, lw=0)


def fig8_nonparametric(ctx):
    """Fig. 8 (``nonparam_results``): classification accuracy against m/d per coupling, per dataset."""
    import matplotlib.pyplot as plt

    data_dir = resolve_uci_dir(ctx)
    run = _experiment("nonparametric_classification")
    results = run(data_dir, quick=ctx.quick, rng=ctx.rng("fig8"), xp=ctx.backend)
    rows, cols = _grid(len(results))
    fig, axes = plt.subplots(rows, cols, figsize=(PAGE_WIDTH, 1.7 * rows), squeeze=False)
    for ax, (name, res) in zip(axes.flat, results.items()):
        x = np.asarray(res["m_over_d"], dtype=float)
        for c in ("iid", "orthogonal", "simplex", "simplex_plus"):
            if c in res:
                _band(ax, x, res[c], c)
        if res.get("exact") is not None:
            ax.axhline(res["exact"], **style("exact"))
        ax.set_title(name)
        ax.set_xlabel("$m/d$")
        ax.set_ylabel("accuracy")
    for ax in list(axes.flat)[len(results):]:
        ax.set_visible(False)
    axes.flat[0].legend(loc="lower right")
    ctx.save(fig, "fig8_nonparametric", {
        "name": "fig8_nonparametric", "paper_label": "nonparam_results",
        "caption": ("Nonparametric classification by kernel regression with the Gaussian kernel approximated by "
                    "PRFs: mean accuracy against m/d, band 1 s.e. (montecarlo.experiments)."),
        "results": results})


def fig10_sigma_search(ctx):
    """Fig. 10 (``tunegraph``): accuracy against the data scale sigma, exact kernel and IID PRFs."""
    import matplotlib.pyplot as plt

    data_dir = resolve_uci_dir(ctx)
    run = _experiment("sigma_search")
    results = run(data_dir, quick=ctx.quick, rng=ctx.rng("fig10"), xp=ctx.backend)
    rows, cols = _grid(len(results))
    fig, axes = plt.subplots(rows, cols, figsize=(PAGE_WIDTH, 1.7 * rows), squeeze=False)
    for ax, (name, res) in zip(axes.flat, results.items()):
        x = np.asarray(res["sigma"], dtype=float)
        _band(ax, x, res["exact"], "exact")
        _band(ax, x, res["iid"], "iid")
        ax.set_xscale("log")
        ax.set_title(name)
        ax.set_xlabel(r"$\sigma$")
        ax.set_ylabel("accuracy")
    for ax in list(axes.flat)[len(results):]:
        ax.set_visible(False)
    axes.flat[0].legend(loc="lower left")
    ctx.save(fig, "fig10_sigma_search", {
        "name": "fig10_sigma_search", "paper_label": "tunegraph",
        "caption": ("Classification accuracy against the data rescaling sigma with the exact Gaussian kernel and "
                    "IID PRFs (m = 10 d), band 1 s.e., used to tune sigma (App. C.1; montecarlo.experiments)."),
        "results": results})
