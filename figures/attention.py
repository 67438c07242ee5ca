r"""New figure: random-feature attention error against logit scale, per feature kind, coupling and m (Sec. 5.4).

Sec. 5.4 replaces the ORFs of Performers by SimRFs; the mechanism is the
kernel MSE: lower MSE, more accurate attention.  This figure measures how
far that carries, and against what: the relative error
:math:`\|\widehat{\mathrm{Att}} - \mathrm{Att}\|_F / \|\mathrm{Att}\|_F` of
random-feature attention against exact softmax attention (head dimension 64,
L = 1024 tokens of the synthetic transformer-like data of
:func:`montecarlo.experiments.attention.synthetic_qkv`), against the
standard deviation of the logits, for PRFs (FAVOR+), optimised PRFs
(FAVOR++, A from each batch's query/key statistics) and FAVOR#'s SDERFs
(their anisotropic optimum from the same batch), each under IIDRFs, ORFs and
SimRFs, at m = 64, 130 (the paper's Performers) and 512 features, next to
**uniform attention** (every row the mean of V), the estimate a noisy
random-feature attention degenerates to.  A kind and coupling beats uniform
attention where its line lies below the dashed one (resolved where the
JSON's ``beats_uniform`` is +1).  The bottom row shows the paired z-scores of
SimRF - ORF for each kind (common random numbers: every coupling's draws
from one seed, every kind on the same draws), with the lines z = -+3.09.

Computed by :func:`montecarlo.experiments.attention.attention_scan` (parallel
units, ``ctx.n_jobs``; bit-identical for any number of workers); no closed form
exists for attention errors.  ``python -m figures.reproduce attention --draws 50``
draws it at a higher effort.
"""

from __future__ import annotations

import numpy as np

from .style import PAGE_WIDTH, label, style

#: Couplings, worst first.
COUPLINGS = ("iid", "orthogonal", "simplex")
#: Feature kinds: PRFs, optimised PRFs (FAVOR++), SDERFs (FAVOR#).
KINDS = ("prf", "oprf", "sderf")
#: Main job and quick settings: sequence lengths (the figure draws the longest; the JSON holds all), logit
#: scales, numbers of features, draws per cell.
EFFORT = {"seq_lens": (1024,), "logit_stds": (0.05, 0.1, 0.25, 0.5, 1.0, 2.0), "m_values": (64, 130, 512),
          "n_draws": 12}
QUICK = {"seq_lens": (256,), "logit_stds": (0.1, 0.5, 2.0), "m_values": (64, 130), "n_draws": 4}
#: Display names of the kinds.
KIND_LABEL = {"prf": "PRF (FAVOR+)", "oprf": "OPRF (FAVOR++)", "sderf": "SDERF (FAVOR#)",
              "hyperbolic": "hyperbolic PRF"}
KIND_MARKER = {"prf": "o", "oprf": "s", "sderf": "^", "hyperbolic": "v"}


def _key(name):
    """``'prf/simplex'`` for the (kind, coupling) pair."""
    return "/".join(name)


def scan_json(res):
    """The JSON record of an :class:`~montecarlo.experiments.attention.AttentionScan` (arrays indexed
    [logit std, L, m]; paired differences keyed ``'prf/simplex - prf/orthogonal'``)."""
    from montecarlo.experiments import attention

    names = list(res.mean)
    return {
        "kinds": res.kinds, "couplings": res.couplings, "seq_lens": res.seq_lens, "logit_stds": res.logit_stds,
        "m_values": res.m_values, "d_head": res.d_head, "n_draws": res.n_draws, "causal": res.causal,
        "paired": res.paired, "distinguishable_z": attention.DISTINGUISHABLE_Z,
        "default_logit_std": attention.DEFAULT_LOGIT_STD,
        "uniform": res.uniform,
        "mean": {_key(n): res.mean[n] for n in names}, "stderr": {_key(n): res.stderr[n] for n in names},
        "beats_uniform": {_key(n): res.beats_uniform(*n) for n in names},
        "uniform_z": {_key(n): res.uniform_z(*n) for n in names},
        "paired_diff_mean": {f"{_key(a)} - {_key(b)}": v for (a, b), v in res.diff_mean.items()},
        "paired_diff_stderr": {f"{_key(a)} - {_key(b)}": v for (a, b), v in res.diff_stderr.items()},
        "paired_z": {f"{_key(a)} - {_key(b)}": res.z(a, b) for (a, b) in res.diff_mean},
        "data_params": res.data_params,
        "data_rules": {k: attention.DATA_DRIVEN[k] for k in res.kinds if k in attention.DATA_DRIVEN},
    }


#: CPU-seconds per unit of the attention plan's cost estimates (the schedule only).
ATTENTION_SECONDS_PER_COST = 2.5e-10


def _effort(ctx, effort):
    return {**(QUICK if ctx.quick else EFFORT), **(effort or {})}


def new_attention_scan_parts(ctx, effort=None):
    """The scan's units ((logit std, L, m, block of draws) cells; :func:`~montecarlo.experiments.attention.attention_scan_plan`)."""
    from montecarlo.experiments import attention

    from ._sweep import Planned

    eff = _effort(ctx, effort)
    plan = attention.attention_scan_plan(COUPLINGS, eff["seq_lens"], eff["logit_stds"], eff["m_values"],
                                         eff["n_draws"], ctx.rng("new_attention_scan"), kinds=KINDS,
                                         data_rng=ctx.seed)
    return {"scan": Planned(plan, ATTENTION_SECONDS_PER_COST)}


def new_attention_scan(ctx, effort=None):
    """Random-feature attention error vs logit scale: kinds x couplings x m, with uniform attention.

    Parameters
    ----------
    ctx : figures._context.Context
    effort : dict, optional
        Any of ``seq_lens``, ``logit_stds``, ``m_values``, ``n_draws`` (the rest from
        :data:`EFFORT`, ``QUICK`` with ``--quick``).
    """
    new_attention_scan_render(ctx, ctx.compute(new_attention_scan_parts(ctx, effort), "attention scan"), effort)


#: Colours of the kinds in the z row (Okabe-Ito colours the couplings do not use).
KIND_COLOR = {"prf": "#000000", "oprf": "#CC79A7", "sderf": "#D55E00", "hyperbolic": "#56B4E9"}


def new_attention_scan_render(ctx, results, effort=None):
    """Draw and save the attention scan from :func:`new_attention_scan_parts`: one row per kind (each coupling
    in its colour and marker, error bars +-1 s.e.), and the paired z of SimRF - ORF with each kind in a colour
    and marker of its own."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from montecarlo.experiments import attention

    from .style import marker_style

    res = results["scan"]
    x = np.array(res.logit_stds)
    j = int(np.argmax(res.seq_lens))
    L = res.seq_lens[j]
    n_m = len(res.m_values)
    fig, axes = plt.subplots(len(KINDS) + 1, n_m, figsize=(PAGE_WIDTH, 1.6 * (len(KINDS) + 1) + 0.3), sharex=True,
                             sharey="row", squeeze=False)
    rel_se = max(float(np.nanmax(res.stderr[kind, c][:, j] / res.mean[kind, c][:, j]))
                 for kind in KINDS for c in COUPLINGS)
    for r, kind in enumerate(KINDS):
        for l, m in enumerate(res.m_values):
            ax = axes[r, l]
            ax.plot(x, res.uniform[:, j], color="0.2", linestyle="--", lw=0.9)
            for c in COUPLINGS:
                st, ms = style(c), marker_style(c)
                ax.errorbar(x, res.mean[kind, c][:, j, l], yerr=res.stderr[kind, c][:, j, l], color=st["color"],
                            linestyle=st["linestyle"], marker=ms["marker"], markersize=3.5,
                            markerfacecolor="white", markeredgewidth=0.9, capsize=2.5, elinewidth=1.0, lw=0.9)
            ax.set_xscale("log")
            ax.set_yscale("log")
            if r == 0:
                ax.set_title(f"$m = {m}$, $L = {L}$")
            if l == 0:
                ax.set_ylabel(f"{KIND_LABEL.get(kind, kind)}\nrelative error")
    zrow = axes[len(KINDS)]
    for l, m in enumerate(res.m_values):
        ax = zrow[l]
        for kind in KINDS:
            z = res.z((kind, "simplex"), (kind, "orthogonal"))[:, j, l]
            ax.plot(x, z, color=KIND_COLOR.get(kind, "0.2"), marker=KIND_MARKER.get(kind, "o"), markersize=4,
                    markerfacecolor="white", markeredgewidth=1.0, lw=0.9)
        for zc in (-attention.DISTINGUISHABLE_Z, attention.DISTINGUISHABLE_Z):
            ax.axhline(zc, color="0.5", lw=0.6, linestyle="--")
        ax.axhline(0.0, color="0.8", lw=0.5)
        ax.set_xlabel("logit std")
        if l == 0:
            ax.set_ylabel(f"paired z\n{label('simplex')} $-$ {label('orthogonal')}")
    handles = [Line2D([], [], color="0.2", linestyle="--", lw=0.9, label="uniform attention (exact)")]
    for c in COUPLINGS:
        st, ms = style(c), marker_style(c)
        handles.append(Line2D([], [], color=st["color"], linestyle=st["linestyle"], marker=ms["marker"],
                              markersize=3.5, markerfacecolor="white", label=f"{st['label']} (mean ±1 s.e.)"))
    for kind in KINDS:
        handles.append(Line2D([], [], color=KIND_COLOR.get(kind, "0.2"), marker=KIND_MARKER.get(kind, "o"),
                              markersize=4, markerfacecolor="white", label=f"z row: {KIND_LABEL.get(kind, kind)}"))
    handles.append(Line2D([], [], color="0.5", linestyle="--", lw=0.6,
                          label=f"z row: |z| = {attention.DISTINGUISHABLE_Z}"))
    fig.legend(handles=handles, loc="outside lower center", ncol=4, fontsize=7)
    ctx.save(fig, "new_attention_scan", {
        "name": "new_attention_scan", "paper_label": None,
        "caption": (f"Random-feature attention (d = {res.d_head}, L = {L}, synthetic transformer-like queries and "
                    "keys) "
                    "against exact softmax attention: relative output error (mean +- 1 s.e. over "
                    f"{res.n_draws} draws; the error bars are at most {100 * rel_se:.1f} % of the mean, mostly "
                    "within the markers) against the logit std, for PRFs, OPRFs (FAVOR++, A from the batch) and "
                    "SDERFs (FAVOR#, (a, Q) from the batch), one row each, under IID, ORF and SimRF couplings "
                    "(colour and marker per coupling) at each m, next to uniform attention (dashed; the mean of "
                    "V); bottom: paired z of SimRF - ORF, one colour and marker per kind "
                    f"(dashed: |z| = {attention.DISTINGUISHABLE_Z}, false alarm 0.001 per cell) "
                    "(montecarlo.experiments.attention.attention_scan; common random numbers across couplings "
                    "and kinds)."),
        "largest_relative_stderr": rel_se,
        **scan_json(res)})
