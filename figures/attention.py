r"""New figure: PRF attention error against sequence length and logit scale (Sec. 5.4 mechanism).

Sec. 5.4 replaces the ORFs of Performers by SimRFs; the mechanism is the
kernel MSE: lower MSE, more accurate attention.  This figure measures how
far that carries: the relative error
:math:`\|\widehat{\mathrm{Att}} - \mathrm{Att}\|_F / \|\mathrm{Att}\|_F` of
PRF attention against exact softmax attention (m = 130 features, head
dimension 64, the paper's Performer setting) on the synthetic
transformer-like data of :func:`montecarlo.experiments.attention.synthetic_qkv`,
against the standard deviation of the logits (``logit_std``) for several
sequence lengths, for IIDRFs, ORFs and SimRFs.  The lower row shows the
one-sided z-scores of ORF < IID and SimRF < ORF with the line z = 3.09
(false alarm 0.001 per cell): the couplings are distinguishable at small
logit scales (errors of a few percent) and stop being so once the errors
approach 1 (about logit std 0.5).

Computed by :func:`montecarlo.experiments.attention.attention_scan`; no
closed form exists for attention errors.
"""

from __future__ import annotations

import numpy as np

from .style import PAGE_WIDTH, label, marker_style, style

#: Couplings, worst first (each is compared with the next).
COUPLINGS = ("iid", "orthogonal", "simplex")
#: Main job and quick settings: sequence lengths, logit scales, draws per cell.
EFFORT = {"seq_lens": (64, 256, 1024), "logit_stds": (0.05, 0.1, 0.25, 0.5, 1.0, 2.0), "n_draws": 12}
QUICK = {"seq_lens": (64, 256), "logit_stds": (0.1, 0.5, 2.0), "n_draws": 4}


def _line(coupling):
    """The coupling's line style with its (hollow) markers."""
    mk = marker_style(coupling)
    return {**style(coupling), "marker": mk["marker"], "markersize": 3, "markerfacecolor": "white"}


def new_attention_scan(ctx, effort=None):
    """PRF attention error vs logit scale and sequence length, and where the couplings separate.

    Parameters
    ----------
    ctx : figures._context.Context
    effort : dict, optional
        ``seq_lens``, ``logit_stds``, ``n_draws`` (default :data:`EFFORT`,
        :data:`QUICK` with ``--quick``).
    """
    import matplotlib.pyplot as plt

    from montecarlo.experiments import attention

    eff = dict(effort or (QUICK if ctx.quick else EFFORT))
    bar = ctx.progress_bar(len(eff["logit_stds"]) * len(eff["seq_lens"]) * len(COUPLINGS), "attention scan")
    res = attention.attention_scan(COUPLINGS, eff["seq_lens"], eff["logit_stds"], 130, eff["n_draws"],
                                   ctx.rng("new_attention_scan"), data_rng=ctx.seed, progress=lambda _: bar.update())
    bar.close()
    x = np.array(res.logit_stds)
    n_len = len(res.seq_lens)
    fig, axes = plt.subplots(2, n_len, figsize=(PAGE_WIDTH, 3.6), sharex=True, squeeze=False)
    for j, L in enumerate(res.seq_lens):
        ax = axes[0, j]
        for c in COUPLINGS:
            ax.errorbar(x, res.mean[c][:, j], yerr=res.stderr[c][:, j], **_line(c), capsize=1.5)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"$L = {L}$")
        ax.set_ylabel("relative error" if j == 0 else "")
        ax = axes[1, j]
        for (better, worse), z in res.z.items():
            ax.plot(x, z[:, j], **{**_line(better), "label": f"{label(better)} < {label(worse)}"})
        ax.axhline(attention.DISTINGUISHABLE_Z, color="0.5", lw=0.6, linestyle="--")
        ax.axhline(0.0, color="0.8", lw=0.5)
        ax.set_xlabel("logit std")
        ax.set_ylabel("z" if j == 0 else "")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    handles2, labels2 = axes[1, 0].get_legend_handles_labels()
    fig.legend(handles + handles2, labels + labels2, loc="outside lower center", ncol=len(handles) + len(handles2))
    ctx.save(fig, "new_attention_scan", {
        "name": "new_attention_scan", "paper_label": None,
        "caption": ("PRF attention (m = 130, d = 64, synthetic transformer-like queries and keys) against exact "
                    "softmax attention: relative output error (mean +- 1 s.e. over "
                    f"{res.n_draws} draws) against the logit std for each sequence length L (top), and one-sided "
                    f"z-scores of ORF < IID and SimRF < ORF (bottom; dashed: z = {attention.DISTINGUISHABLE_Z}, "
                    "false alarm 0.001 per cell) (montecarlo.experiments.attention.attention_scan)."),
        "m": res.m, "d_head": 64, "n_draws": res.n_draws, "causal": res.causal,
        "seq_lens": res.seq_lens, "logit_stds": res.logit_stds, "distinguishable_z": attention.DISTINGUISHABLE_Z,
        "mean": res.mean, "stderr": res.stderr, "z": {f"{a}<{b}": z for (a, b), z in res.z.items()},
        "distinguishable": {f"{a}<{b}": d for (a, b), d in res.distinguishable.items()},
        "default_logit_std": attention.DEFAULT_LOGIT_STD})
