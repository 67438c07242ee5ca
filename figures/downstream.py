r"""Figs. 8 (``nonparam_results``) and 10 (``tunegraph``): kernel-regression classification on UCI data.

The settings, effort, protocol and how the caption is scored: :ref:`guide-figures.downstream`
(``docs/guide/experiments.rst``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from .style import PAGE_WIDTH, label, marker_style, style


class Skip(Exception):
    """A figure cannot be produced in this run; the message says why (one line)."""


@dataclass(frozen=True)
class Effort:
    """How much work Fig. 8 does.

    Attributes
    ----------
    protocol : str
        ``'paper'`` or ``'resampled'`` (:mod:`montecarlo.experiments.uci`).
    split_seeds : tuple of int or None
        None: the protocol's default seeds.
    n_draws : int
        Feature draws per (dataset, coupling, m, split).
    m_multipliers : tuple of int
    datasets : tuple of str or None
        None: all eight.
    paired : bool
        Common random numbers across couplings (the comparison's noise is that of the
        paired differences).
    draws : tuple of (str, int)
        Per-dataset exceptions to ``n_draws``.
    """

    protocol: str = "paper"
    split_seeds: tuple | None = None
    n_draws: int = 150
    m_multipliers: tuple = (1, 2, 4, 10)
    datasets: tuple | None = None
    paired: bool = True
    draws: tuple = ()

    def draws_for(self, name):
        """Feature draws for dataset ``name``."""
        return dict(self.draws).get(name, self.n_draws)


#: Fig. 8 in the main job: the paper's protocol and m / d grid (the public code's 1, 2, 4, 10), paired
#: draws, 150 per cell (chess: 16; a chess draw costs about 1.1 CPU-s over the grid, 5 times nursery's
#: and 100 times the other sets'), about 65 CPU-seconds in all.
FIG8_EFFORT = Effort(n_draws=150, draws=(("chess", 16),))
#: Fig. 8 with ``--quick``.
FIG8_QUICK = Effort(n_draws=3, m_multipliers=(1, 10))
#: The ``|z|`` at or above which a paired difference counts as resolved in the JSON's verdicts.
RESOLVED_Z = 3.0
#: Fig. 10: sigma grid size and draws (main job, quick).
FIG10_EFFORT = {"n_sigmas": 9, "n_draws": 10}
FIG10_QUICK = {"n_sigmas": 4, "n_draws": 2}

FIG8_COUPLINGS = ("iid", "orthogonal", "simplex")


def _experiments():
    from montecarlo import experiments

    return experiments


def uci_dir(ctx):
    """The UCI directory of the run (``--uci-dir``, else ``$SIMPLEX_RF_UCI_DIR``, else the shipped copy).

    Raises
    ------
    FileNotFoundError
        A named directory that does not exist (the run fails; it is not a skip).
    """
    return _experiments().uci.resolve_uci_dir(getattr(ctx, "uci_dir", None))


def _grid(n):
    cols = min(4, n)
    return math.ceil(n / cols), cols


def _missing_or(func, *args):
    """``("ok", func(*args))``, or ``("missing", message)`` when a dataset's file is absent (a unit of the
    figures' sweep, or a step of planning)."""
    try:
        return "ok", func(*args)
    except FileNotFoundError as exc:
        return "missing", str(exc)


def _split_outcomes(names, outcomes, data_dir):
    """``(results, missing)`` from ``[(status, value)]`` per dataset; Skip when no dataset was readable."""
    results = {n: r for n, (status, r) in zip(names, outcomes) if status == "ok"}
    missing = {n: r for n, (status, r) in zip(names, outcomes) if status == "missing"}
    if not results:
        raise Skip(f"no UCI dataset readable in {str(data_dir)!r} ({'; '.join(missing.values())})")
    return results, missing


def fig8_effort(ctx, effort=None):
    """The :class:`Effort` of a run: ``effort`` if given, else the main job's (quick or not)."""
    if effort is not None:
        return effort
    return FIG8_QUICK if ctx.quick else FIG8_EFFORT


#: The pairs whose paired differences Fig. 8's JSON holds, (better-claimed, other).
FIG8_PAIRS = (("simplex", "iid"), ("simplex", "orthogonal"), ("orthogonal", "iid"))


def _pair_key(a, b):
    return f"{a} - {b}"


def fig8_verdicts(r):
    """Per m/d, whether SimRFs are 'best', 'tied' or 'behind' (module docs) from a CurveResult's
    paired z-scores of SimRF - IID and SimRF - ORF.

    The rule, symmetric in the two comparisons: a z >= :data:`RESOLVED_Z` is a resolved win of SimRF, a
    z <= -:data:`RESOLVED_Z` a resolved loss, anything else (``|z|`` below it, or NaN: n/a, nothing resolved)
    neither.  'best' needs a resolved win over both IID and ORF; 'behind' needs one resolved loss (to
    either); otherwise 'tied'.  A win and a loss cannot both hold for one z, so the cases do not overlap.
    """
    z_iid, z_orf = r.z("simplex", "iid"), r.z("simplex", "orthogonal")
    out = []
    for a, b in zip(np.asarray(z_iid, dtype=float), np.asarray(z_orf, dtype=float)):
        wins = [bool(z >= RESOLVED_Z) for z in (a, b)]  # False for NaN
        losses = [bool(z <= -RESOLVED_Z) for z in (a, b)]
        if all(wins):
            out.append("best")
        elif any(losses):
            out.append("behind")
        else:
            out.append("tied")
    return out


#: CPU-seconds per unit of the classification plans' cost estimates (the schedule only).
CLASSIFICATION_SECONDS_PER_COST = 1e-9


def fig8_parts(ctx, effort=None):
    """The classification curve of every readable dataset (:func:`montecarlo.experiments.classification.curve_plan`,
    whose units are blocks of draws), and the datasets whose files are missing."""
    from ._sweep import Planned, Value

    eff = fig8_effort(ctx, effort)
    ex = _experiments()
    names = list(eff.datasets or ex.uci.DATASETS)
    data_dir = uci_dir(ctx)
    outcomes = [_missing_or(lambda name: ex.classification.curve_plan(
        name, couplings=FIG8_COUPLINGS, m_multipliers=eff.m_multipliers, n_draws=eff.draws_for(name),
        rng=ctx.rng(f"fig8/{name}"), protocol=eff.protocol, split_rng=eff.split_seeds, uci_dir=data_dir,
        paired=eff.paired), name) for name in names]
    plans, missing = _split_outcomes(names, outcomes, data_dir)
    parts = {("curve", name): Planned(plan, CLASSIFICATION_SECONDS_PER_COST) for name, plan in plans.items()}
    parts["missing"] = Value(missing)
    return parts


def fig8_nonparametric(ctx, effort=None):
    """Fig. 8 (``nonparam_results``): classification accuracy against m/d per coupling, per dataset.

    Parameters
    ----------
    ctx : figures._context.Context
    effort : Effort, optional
        Default :data:`FIG8_EFFORT` (:data:`FIG8_QUICK` with ``--quick``).
    """
    fig8_render(ctx, ctx.compute(fig8_parts(ctx, effort), "fig8 classification"), effort)


#: Text colour of each verdict on the figure.
VERDICT_COLOR = {"best": "#0072B2", "tied": "0.35", "behind": "#D55E00"}


def _points(ax, x, mean, err, key, **kw):
    """Measured points: markers joined by a thin line, error bars of +-1 s.e. with caps."""
    st = style(key)
    st.update(kw)
    ms = marker_style(key)
    ax.errorbar(x, np.asarray(mean, dtype=float), yerr=np.asarray(err, dtype=float), color=st["color"],
                linestyle=st["linestyle"], lw=0.9, marker=ms["marker"], markersize=3.5, markerfacecolor="white",
                markeredgewidth=0.9, capsize=2, elinewidth=0.9, label=st.get("label"))


def pairing_se_ratio(r, a, b):
    """The paired standard error of a - b over the one independent draws would give (``hypot`` of the two
    couplings' standard errors), per m: how much the common random numbers shrink the comparison."""
    return np.asarray(r.diff_stderr[a, b]) / np.hypot(np.asarray(r.stderr[a]), np.asarray(r.stderr[b]))


def _exact_line(ax, exact, lo, hi):
    """The exact-kernel accuracy: a dotted line when it lies near the measured range [lo, hi], else a label at
    the panel's edge (so that a far-away value does not squeeze the measured points into a sliver)."""
    pad = max(hi - lo, 0.01)
    if lo - pad <= exact <= hi + pad:
        ax.axhline(exact, **style("exact"))
        return True
    above = exact > hi
    ax.text(0.99, 0.03, f"exact kernel: {exact:.3f} ({'above' if above else 'below'} the axis)",
            transform=ax.transAxes, ha="right", va="bottom", fontsize=7, color=style("exact")["color"])
    return False


def fig8_render(ctx, res, effort=None):
    """Draw and save Fig. 8 from the results of :func:`fig8_parts`: per dataset the measured m/d as markers
    with +-1 s.e. bars, the draws and the pairing's s.e. ratio in the title, and at each m/d the verdict on
    "SimRFs consistently perform best" with the paired z of SimRF - ORF and SimRF - IID."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    eff = fig8_effort(ctx, effort)
    results = {k[1]: v for k, v in res.items() if k[0] == "curve"}
    missing = res["missing"]
    n = len(results)
    cols = min(2, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(PAGE_WIDTH, 2.2 * rows + 0.6), squeeze=False)
    out = {}
    for ax, (name, r) in zip(axes.flat, results.items()):
        x = np.asarray(r.m, dtype=float) / r.d
        for c in FIG8_COUPLINGS:
            _points(ax, x, r.mean[c], r.stderr[c], c)
        lo = min(float(np.min(np.asarray(r.mean[c]) - np.asarray(r.stderr[c]))) for c in FIG8_COUPLINGS)
        hi = max(float(np.max(np.asarray(r.mean[c]) + np.asarray(r.stderr[c]))) for c in FIG8_COUPLINGS)
        exact_drawn = _exact_line(ax, r.exact, lo, hi)
        if exact_drawn:
            lo, hi = min(lo, r.exact), max(hi, r.exact)
        span = max(hi - lo, 0.004)
        ax.set_ylim(lo - 0.08 * span, hi + 1.1 * span)  # room above the points for the verdicts
        ax.set_xscale("log")
        ax.set_xlim(x.min() / 1.5, x.max() * 1.5)
        ax.set_xticks(x, [f"{k:g}" for k in x])
        ax.minorticks_off()
        verdicts = fig8_verdicts(r)
        z_orf, z_iid = np.asarray(r.z("simplex", "orthogonal")), np.asarray(r.z("simplex", "iid"))
        for xi, v, zo, zi in zip(x, verdicts, z_orf, z_iid):
            ax.annotate(f"{v}\nO {_z_text(zo)}\nI {_z_text(zi)}", (xi, 1.0), xycoords=("data", "axes fraction"),
                        ha="center", va="top", fontsize=7, color=VERDICT_COLOR[v], linespacing=1.0)
        ratio = {f"{a} - {b}": pairing_se_ratio(r, a, b) for a, b in FIG8_PAIRS}
        simrf = np.concatenate([ratio["simplex - iid"], ratio["simplex - orthogonal"]])
        ax.set_title(f"{name} ($d = {r.d}$), {r.n_draws} draws per point\npaired / unpaired s.e. of "
                     f"SimRF - others: {np.nanmin(simrf):.2f}-{np.nanmax(simrf):.2f}", fontsize=7.5)
        ax.set_xlabel("$m / d$")
        ax.set_ylabel("test accuracy")
        out[name] = {"d": r.d, "sigma": r.sigma, "m": r.m, "m_over_d": x, "exact": r.exact,
                     "exact_drawn_as_line": exact_drawn,
                     "exact_per_split": r.exact_per_split, "n_draws": r.n_draws, "n_train": r.n_train,
                     "n_test": r.n_test, "split_seeds": r.split_seeds, "paired": r.paired,
                     "mean": {c: r.mean[c] for c in FIG8_COUPLINGS}, "stderr": {c: r.stderr[c] for c in FIG8_COUPLINGS},
                     "draw_stderr": {c: r.draw_stderr[c] for c in FIG8_COUPLINGS},
                     "split_sd": {c: r.split_sd[c] for c in FIG8_COUPLINGS},
                     "differences": {_pair_key(a, b): {"mean": r.diff_mean[a, b], "stderr": r.diff_stderr[a, b],
                                                       "z": r.z(a, b)} for a, b in FIG8_PAIRS},
                     "pairing_se_ratio": ratio,
                     "verdict": verdicts}
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    handles, _ = axes.flat[0].get_legend_handles_labels()
    handles = [h for h in handles if not isinstance(h, Line2D) or h.get_label() != label("exact")][:3]
    handles.append(Line2D([], [], **{k: v for k, v in style("exact").items() if k != "label"},
                          label=label("exact")))
    fig.legend(handles=handles, loc="outside lower center", ncol=4, fontsize=7)
    fig.suptitle(f"Above each m/d: the verdict on SimRFs (best / tied / behind at paired |z| >= {RESOLVED_Z:g}) and the "
                 "paired z of SimRF - ORF (O) and SimRF - IID (I)", fontsize=7.5)
    seeds = next(iter(results.values())).split_seeds
    spread = ("over draws and the splits" if len(seeds) > 1 else "over draws at this split")
    draws = ", ".join(f"{n} {results[n].n_draws}" for n in results if results[n].n_draws != eff.n_draws)
    effort_text = f"{eff.n_draws} feature draws per split" + (f" ({draws})" if draws else "")
    all_simrf = {nm: np.concatenate([o["pairing_se_ratio"]["simplex - iid"], o["pairing_se_ratio"]["simplex - orthogonal"]])
                 for nm, o in out.items()}
    pairing = ", ".join(f"{nm} {np.nanmin(v):.2f}-{np.nanmax(v):.2f}" for nm, v in all_simrf.items())
    ctx.save(fig, "fig8_nonparametric", {
        "name": "fig8_nonparametric", "paper_label": "nonparam_results",
        "caption": ("Nonparametric classification by kernel regression (Sec. 5.3) with the Gaussian kernel "
                    f"estimated by PRFs: test accuracy against m/d under the '{eff.protocol}' protocol "
                    f"(split seeds {list(seeds)}), measured at m/d = {', '.join(f'{k:g}' for k in eff.m_multipliers)} "
                    f"(markers), mean and error bar of 1 s.e. {spread} ({effort_text}, "
                    + ("common random numbers across couplings" if eff.paired else "independent draws per coupling")
                    + "), at the authors' sigma; dotted: exact kernel, or its value at the panel's edge when it is "
                    "far from the measured points (montecarlo.experiments.classification_curve). Above each m/d: "
                    "the verdict on 'SimRFs consistently perform best' (best: SimRF beats ORF and IID by paired "
                    f"z >= {RESOLVED_Z:g}; behind: another coupling beats it by that much; tied otherwise) and the "
                    "paired z of SimRF - ORF (O) and SimRF - IID (I). "
                    + ("The pairing (common random numbers) gives the SimRF differences a standard error of "
                       f"{pairing} times the one independent draws would give (per dataset, over m/d and both "
                       "SimRF differences; 'pairing_se_ratio'): draws, not the pairing, resolve them. "
                       if eff.paired else "")
                    + "Paired differences with standard errors and z in 'differences'."),
        "protocol": eff.protocol, "split_seeds": list(seeds), "n_draws": eff.n_draws,
        "n_draws_per_dataset": {n: results[n].n_draws for n in results}, "paired": eff.paired,
        "m_multipliers": list(eff.m_multipliers), "measured_m_over_d": list(eff.m_multipliers),
        "error_bar": f"1 standard error of the mean {spread}",
        "resolved_z": RESOLVED_Z, "couplings": FIG8_COUPLINGS, "results": out, "missing": missing})


def _z_text(z):
    return "n/a" if not np.isfinite(z) else f"{z:+.1f}"


def _fig10_effort(ctx, effort):
    eff = effort or (FIG10_QUICK if ctx.quick else FIG10_EFFORT)
    return eff, tuple(np.round(np.geomspace(0.05, 2.0, eff["n_sigmas"]), 6))


def _sigma_search_unit(name, sigmas, n_draws, rng, protocol, data_dir):
    """One dataset's sigma search (a unit of the figures' sweep): ``("ok", SigmaSearch)`` or ``("missing", ...)``."""
    ex = _experiments()
    return _missing_or(lambda: ex.sigma_search(name, sigmas=sigmas, coupling="iid", m_multiplier=10,
                                               n_draws=n_draws, rng=rng, protocol=protocol, uci_dir=data_dir))


def fig10_parts(ctx, effort=None, protocol="paper"):
    """One sigma search per dataset."""
    from ._sweep import Cell

    eff, sigmas = _fig10_effort(ctx, effort)
    data_dir = uci_dir(ctx)
    return {("search", name): Cell(_sigma_search_unit, (name, sigmas, eff["n_draws"], ctx.rng(f"fig10/{name}"),
                                                        protocol, data_dir), cost=0.1 * eff["n_sigmas"] * eff["n_draws"],
                                    threads=True)
            for name in _experiments().uci.DATASETS}


def fig10_sigma_search(ctx, effort=None, protocol="paper"):
    """Fig. 10 (``tunegraph``): validation accuracy against sigma, exact kernel and IIDRFs (m = 10 d).

    Parameters
    ----------
    ctx : figures._context.Context
    effort : dict, optional
        ``{"n_sigmas": int, "n_draws": int}`` (default :data:`FIG10_EFFORT`,
        ``FIG10_QUICK`` with ``--quick``).
    protocol : {'paper', 'resampled'}
        Where the validation records come from (module docs of
        :mod:`montecarlo.experiments.uci`).
    """
    fig10_render(ctx, ctx.compute(fig10_parts(ctx, effort, protocol), "fig10 sigma search"), effort, protocol)


def fig10_render(ctx, res, effort=None, protocol="paper"):
    """Draw and save Fig. 10 from the results of :func:`fig10_parts`."""
    import matplotlib.pyplot as plt

    eff, sigmas = _fig10_effort(ctx, effort)
    n_draws = eff["n_draws"]
    ex = _experiments()
    names = list(ex.uci.DATASETS)
    results, missing = _split_outcomes(names, [res["search", n] for n in names], uci_dir(ctx))
    rows, cols = _grid(len(results))
    fig, axes = plt.subplots(rows, cols, figsize=(PAGE_WIDTH, 1.6 * rows + 0.4), squeeze=False)
    out = {}
    for ax, (name, r) in zip(axes.flat, results.items()):
        ax.plot(r.sigmas, r.exact, **style("exact"))
        _points(ax, r.sigmas, r.mean, r.stderr, "iid")
        paper = ex.uci.PAPER_SIGMAS.get(name)
        if paper is not None:
            ax.axvline(paper, color="0.6", lw=0.6, linestyle="--")
        ax.set_xscale("log")
        ax.set_title(name)
        ax.set_xlabel(r"$\sigma$")
        ax.set_ylabel("validation accuracy")
        out[name] = {"sigmas": r.sigmas, "exact": r.exact, "mean": r.mean, "stderr": r.stderr, "m": r.m,
                     "n_draws": r.n_draws, "best_sigma": r.best_sigma, "best_exact_sigma": r.best_exact_sigma,
                     "paper_sigma": paper, "n_train": r.n_train, "n_validation": r.n_validation,
                     "split_seed": r.split_seed}
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
                    f"draws), validation records held out of the '{protocol}' protocol's training part, nursery "
                    "and chess restricted to 1000 training and 100 validation records; dashed: the authors' "
                    "sigma (montecarlo.experiments.sigma_search)."),
        "protocol": protocol, "n_draws": n_draws, "results": out, "missing": missing})


def with_effort(effort, **changes):
    """A copy of an :class:`Effort` with some fields changed (None values are left as they are)."""
    return replace(effort, **{k: v for k, v in changes.items() if v is not None})
