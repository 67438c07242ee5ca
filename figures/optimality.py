r"""Fig. 4 (``corr_inset_main``): RF-conformity of one draw of norms for every geometry.

For one draw of d = 6 norms :math:`w_i \sim \chi_6` and v = 1, the conformity
objective of eq. ``simp+_obj`` (no expectation),

.. math::
    \rho = \frac{1}{d(d-1)}\sum_{i\ne j}{}_0F_1\big(;\tfrac d2;\tfrac{v^2w_{ij}^2}{4}\big),
    \qquad w_{ij} = \|w_i\hat w_i + w_j\hat w_j\|,

is evaluated (:func:`montecarlo.optimum.objective`) for

* IIDRFs: 100 random couplings (independent uniform directions), mean and
  standard deviation, plus its exact mean over directions (one-dimensional
  quadrature over the angle of each pair, :func:`iid_mean_over_directions`);
* ORFs (perpendicular directions), SimRFs (eq. ``simplex_vectors``), SimRFs+
  (eq. ``simpler_updates_main``) and the numerically optimised geometry
  (:func:`montecarlo.optimum.optimise_directions`, L-BFGS-B from the SimRF and
  SimRF+ geometries and random starts).

The expectations over norms (Thm 4.3, :func:`theory.conformity`) are shown
for reference.
"""

from __future__ import annotations

import numpy as np
from scipy import integrate, special

import montecarlo as mc
import theory
from montecarlo.optimum import objective, optimise_directions

from ._context import to_numpy
from .style import COLUMN_WIDTH, label, style

SCHEMES = ("iid", "orthogonal", "simplex", "simplex_plus", "optimum")


def iid_mean_over_directions(norms, v):
    r"""Exact mean of the conformity objective over independent uniform directions.

    For a pair with fixed norms a, b and directions uniform on the sphere, the
    cosine t of their angle has density :math:`\propto (1-t^2)^{(d-3)/2}` on
    [-1, 1], so

    .. math::
        \mathbb E\rho = \frac{1}{d(d-1)}\sum_{i\ne j}\int_{-1}^1
        {}_0F_1\big(;\tfrac d2;\tfrac{v^2(a^2+b^2+2abt)}{4}\big)
        \frac{(1-t^2)^{(d-3)/2}}{B(\frac12,\frac{d-1}{2})}\,dt.

    Parameters
    ----------
    norms : array (d,), d >= 3
    v : float

    Returns
    -------
    float
    """
    norms = np.asarray(norms, dtype=float)
    d = norms.shape[0]
    if d < 3:
        raise ValueError(f"d = len(norms) must be >= 3 for the angle density used here, got {d}")
    beta = special.beta(0.5, (d - 1) / 2)
    total = 0.0
    for i in range(d):
        for j in range(i + 1, d):
            a, b = norms[i], norms[j]

            def f(t, a=a, b=b):
                return special.hyp0f1(d / 2, v * v * (a * a + b * b + 2 * a * b * t) / 4) * (1 - t * t) ** ((d - 3) / 2)

            total += 2 * integrate.quad(f, -1, 1, epsabs=0, epsrel=1e-12)[0] / beta
    return total / (d * (d - 1))


def fig4_conformity(ctx):
    """Fig. 4 (``corr_inset_main``): conformity of one draw of norms, d = 6, v = 1."""
    import matplotlib.pyplot as plt

    d, v = 6, 1.0
    n_iid = 100
    gen = ctx.rng("fig4")
    # one draw of norms: the row norms of one sampled simplex block (chi_d)
    norms = np.linalg.norm(to_numpy(mc.sample_weights("simplex", d, d, rng=gen, xp=ctx.backend)), axis=1)
    # IIDRFs: random independent directions with these norms
    dirs = to_numpy(mc.sample_weights("iid", d, d, rng=gen, xp=ctx.backend, n_draws=n_iid))
    iid_vectors = norms[None, :, None] * dirs / np.linalg.norm(dirs, axis=2, keepdims=True)
    iid_values = np.array([objective(w, v) for w in iid_vectors])
    iid_exact = iid_mean_over_directions(norms, v)
    # ORFs: one Haar block, directions kept, norms replaced (the objective is rotation invariant)
    q = to_numpy(mc.sample_weights("orthogonal", d, d, rng=gen, xp=ctx.backend))
    orth = norms[:, None] * q / np.linalg.norm(q, axis=1)[:, None]
    simplex = norms[:, None] * np.asarray(mc.simplex_matrix(d))
    plus_b, passes, _ = mc.simplex_plus_vectors(norms[None, :].copy(), on_unconverged="raise")
    plus = np.asarray(plus_b[0])
    opt = optimise_directions(norms, v, starts=[simplex, plus], n_random=ctx.n(8, 2), rng=gen)
    vectors = {"orthogonal": orth, "simplex": simplex, "simplex_plus": plus, "optimum": opt.vectors}
    values = {k: objective(w, v) for k, w in vectors.items()}
    with ctx.precision():
        expectation = {c: float(theory.conformity(c, d, v)) for c in ("iid", "orthogonal", "simplex")}
    iid_mean, iid_std = float(iid_values.mean()), float(iid_values.std(ddof=1))

    fig, (ax, az) = plt.subplots(1, 2, figsize=(COLUMN_WIDTH * 1.6, 2.3), gridspec_kw={"width_ratios": [3, 2]})
    xs = np.arange(len(SCHEMES))
    c = style("iid")["color"]
    ax.fill_between([xs[0] - 0.3, xs[0] + 0.3], iid_mean - iid_std, iid_mean + iid_std, color=c, alpha=0.25, lw=0,
                    label=f"IID: ±1 s.d. over {n_iid} couplings")
    ax.plot([xs[0]], [iid_mean], marker="o", color=c, linestyle="none")
    ax.plot([xs[0]], [iid_exact], marker="_", color="k", markersize=10, linestyle="none",
            label="IID: exact mean over directions")
    for x, k in zip(xs[1:], SCHEMES[1:]):
        st = style(k)
        ax.plot([x], [values[k]], marker="o" if k != "optimum" else "*", color=st["color"], linestyle="none",
                markersize=5 if k != "optimum" else 8)
    for x, k in zip(xs, SCHEMES[:3]):
        ax.plot([x + 0.25], [expectation[k]], marker="o", markersize=4, markerfacecolor="white",
                color=style(k)["color"], linestyle="none")
    ax.plot([], [], marker="o", markersize=4, markerfacecolor="white", color="0.3", linestyle="none",
            label=r"mean over $\chi_d$ norms (Thm 4.3)")
    ax.set_xticks(xs)
    ax.set_xticklabels([label(k).replace("numerically optimised", "num. opt.") for k in SCHEMES], rotation=30)
    ax.set_ylabel(r"RF-conformity $\rho$")
    ax.set_title(f"one draw of norms, $d={d}$, $v={v:g}$")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=2)
    # zoom: excess over the numerical optimum, log scale
    exc = {"iid": iid_mean - values["optimum"]}
    exc.update({k: values[k] - values["optimum"] for k in SCHEMES[1:4]})
    for x, k in zip(xs[:4], SCHEMES[:4]):
        az.plot([x, x], [1e-12, max(exc[k], 1e-12)], color=style(k)["color"], lw=1.0)
        az.plot([x], [max(exc[k], 1e-12)], marker="o", color=style(k)["color"], linestyle="none")
    az.set_yscale("log")
    top = max(exc.values())
    az.set_ylim(min(v for v in exc.values() if v > 0) / 3, top * 3)
    az.set_xlim(-0.5, 3.5)
    az.set_xticks(xs[:4])
    az.set_xticklabels([label(k) for k in SCHEMES[:4]], rotation=30)
    az.set_ylabel(r"$\rho - \rho_{\mathrm{num.\,opt.}}$")
    az.set_title("excess over the optimum")
    data = {
        "name": "fig4_conformity",
        "paper_label": "corr_inset_main",
        "caption": ("RF-conformity (eq. simp+_obj, lower is better) for a single draw of chi_d norms, d = 6, "
                    "v = 1: IIDRFs (mean and 1 s.d. over 100 random couplings of the fixed norms, and the exact "
                    "mean over directions), ORFs, SimRFs, SimRFs+ and the numerically optimised geometry; "
                    "open markers: expectation over the norms (Thm 4.3). Right: excess over the optimum."),
        "d": d,
        "v": v,
        "norms": norms,
        "iid": {"values": iid_values, "mean": iid_mean, "std": iid_std, "n": n_iid,
                "exact_mean_over_directions": iid_exact},
        "values": values,
        "vectors": vectors,
        "simplex_plus_passes": int(np.asarray(passes)[0]),
        "optimum_restarts": list(opt.restarts),
        "expectation_over_norms": expectation,
    }
    ctx.save(fig, "fig4_conformity", data)
