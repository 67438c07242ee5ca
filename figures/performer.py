r"""A Fig. 9 analogue: test accuracy of a small Performer-ViT on scikit-learn's digits, per epoch.

The paper's Fig. 9 (``performer_fig``) compares ORF- and SimRF-Performers (ViTs
of 12 layers, 300 epochs, TPUs) on ImageNet2012 and three other sets.  This
figure trains the same kind of model at the scale of one machine
(:mod:`montecarlo.experiments.performer_train`: 2 layers, 16 patch tokens of
the 8 x 8 digits, m = 32 features) with exact attention and
:class:`montecarlo.nn.PRFAttention` for {prf, oprf} x {orthogonal, simplex},
and plots the test accuracy after each epoch (mean +- 1 s.e. over seeds; the
arms share each seed's initial weights).  About a minute or more of CPU: not
part of ``python -m figures``'s main job; drawn by
``python -m figures.reproduce performer [--seeds N --epochs E]``.
"""

from __future__ import annotations

import numpy as np

from .style import PAGE_WIDTH, style

#: Seeds, epochs and training images of the figure and of its quick version.
EFFORT = {"seeds": 5, "epochs": 10, "train_size": None}
QUICK = {"seeds": 2, "epochs": 2, "train_size": 300}


def _arm_style(arm):
    if arm == "exact":
        return {"color": "black", "linestyle": "-", "label": "exact softmax"}
    kind, coupling = arm.split("-", 1)
    s = style(coupling)
    return {"color": s["color"], "linestyle": "-" if kind == "prf" else "--", "label": f"{kind}, {s['label']}"}


def arm_offsets(arms, width=0.32):
    """Horizontal offsets (in epochs) that set the arms side by side at each epoch, centred on it, so that
    their error bars never cover each other (with one epoch, five arms at one x were drawn on top of each
    other)."""
    n = len(arms)
    return {a: (0.0 if n == 1 else width * (k / (n - 1) - 0.5)) for k, a in enumerate(arms)}


def fig9_performer_digits(ctx, effort=None):
    """Draw the digits Performer curves (``effort``: ``seeds``, ``epochs``, ``train_size``); a progress bar over
    the optimiser steps of every run."""
    import matplotlib.pyplot as plt

    from montecarlo.experiments import performer_train as pt

    eff = {**(QUICK if ctx.quick else EFFORT), **(effort or {})}
    cfg = pt.TrainConfig(epochs=eff["epochs"], train_size=eff["train_size"])
    todo = pt.arms_available()
    n_train = len(pt.digits_tokens(cfg.train_size)[0])
    steps = -(-n_train // cfg.batch_size)
    bar = ctx.progress_bar(len(todo) * eff["seeds"] * cfg.epochs * steps, "performer digits (steps)")
    res = pt.train_arms(None, eff["seeds"], cfg, seed=ctx.seed, on_step=lambda *_: bar.update())
    bar.close()
    epochs = np.arange(1, cfg.epochs + 1)
    offsets = arm_offsets(res.arms)
    fig, ax = plt.subplots(figsize=(PAGE_WIDTH / 2, 2.6), layout="constrained")
    for arm in res.arms:
        ax.errorbar(epochs + offsets[arm], res.mean(arm), yerr=res.stderr(arm), capsize=2, lw=1, marker="o",
                    markersize=3.5, markerfacecolor="white", **_arm_style(arm))
    ax.set_xticks(epochs)
    if cfg.epochs == 1:
        ax.set_xlim(0.5, 1.5)
    ax.set_xlabel("epoch (arms side by side)")
    ax.set_ylabel("test accuracy")
    ax.legend(fontsize="x-small")
    paired = {f"{a} - {b}": res.paired(a, b) for a, b in (("prf-simplex", "prf-orthogonal"),
                                                         ("oprf-simplex", "oprf-orthogonal"))
              if len(res.seeds) > 1}
    ctx.save(fig, "fig9_performer_digits", {
        "name": "fig9_performer_digits", "paper_label": "performer_fig",
        "caption": ("Fig. 9 analogue: test accuracy of a 2-layer Performer-ViT on scikit-learn's digits (16 tokens "
                    f"of 2 x 2 pixels, m = {cfg.n_features}) after each epoch, mean +- 1 s.e. over "
                    f"{len(res.seeds)} seeds (markers; the arms set side by side at each epoch), exact attention "
                    "and PRFAttention of each kind and coupling "
                    "(montecarlo.experiments.performer_train; no tuning per arm)."),
        "arms": res.arms, "config": res.config, "seeds": res.seeds, "arm_offsets": offsets,
        "accuracy": res.accuracy, "mean": {a: res.mean(a) for a in res.arms},
        "stderr": {a: res.stderr(a) for a in res.arms}, "final_paired_differences": paired})
