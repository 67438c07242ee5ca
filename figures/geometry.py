r"""Figs. 2 and 3: the geometry of the couplings, drawn from sampled vectors.

Fig. 2 (``fig:scheme``) shows one block of d random vectors for IIDRFs, ORFs
and SimRFs at d = 2 and d = 3, drawn by :func:`montecarlo.sample_weights`
(norms :math:`\chi_d`, random rotation included).  Fig. 3
(``fig:splusfig-main``) shows SimRFs and SimRFs+ at d = 3 for the *same*
norms, before the random rotation (both lie in the plane of the simplex):
with SimRFs all pairs subtend :math:`\arccos(-\frac{1}{d-1}) = 120^\circ`;
with SimRFs+ (eq. ``simpler_updates_main``, :func:`montecarlo.simplex_plus_vectors`)
longer vectors subtend bigger angles.
"""

from __future__ import annotations

import numpy as np

import montecarlo as mc

from ._context import to_numpy
from .style import COLUMN_WIDTH, PAGE_WIDTH, label, style

COUPLINGS_FIG2 = ("iid", "orthogonal", "simplex")


def pairwise_angles(vectors):
    """Angles in degrees between all pairs of rows, as a dict ``"i,j" -> angle`` (1-based)."""
    v = np.asarray(vectors, dtype=float)
    u = v / np.linalg.norm(v, axis=1)[:, None]
    cos = np.clip(u @ u.T, -1.0, 1.0)
    m = v.shape[0]
    return {f"{i + 1},{j + 1}": float(np.degrees(np.arccos(cos[i, j]))) for i in range(m) for j in range(i + 1, m)}


def principal_view(vectors):
    """Coordinates of the rows in the orthonormal frame of their principal directions (a rotation).

    The first two coordinates span the plane of largest spread (the plane of a
    SimRF block at d = 3), the last is the depth; angles and norms are unchanged.
    """
    v = np.asarray(vectors, dtype=float)
    _, _, vt = np.linalg.svd(v)
    return v @ vt.T


def _angle_labels(ax, vecs2d, radius):
    """Write the angle between angularly adjacent coplanar vectors on their bisector."""
    ang = np.arctan2(vecs2d[:, 1], vecs2d[:, 0])
    order = np.argsort(ang)
    for k in range(len(order)):
        a0 = ang[order[k]]
        a1 = ang[order[(k + 1) % len(order)]] + (2 * np.pi if k == len(order) - 1 else 0.0)
        mid = (a0 + a1) / 2
        ax.text(radius * np.cos(mid), radius * np.sin(mid), f"{np.degrees(a1 - a0):.1f}°", ha="center",
                va="center", fontsize=7, color="0.25")


def _arrow2d(ax, vec, color, text=None, linestyle="-"):
    ax.annotate("", xy=(vec[0], vec[1]), xytext=(0.0, 0.0),
                arrowprops={"arrowstyle": "-|>", "color": color, "lw": 1.3, "shrinkA": 0, "shrinkB": 0,
                            "mutation_scale": 8, "linestyle": linestyle})
    if text:
        unit = np.asarray(vec[:2]) / max(float(np.hypot(vec[0], vec[1])), 1e-12)
        x, y = np.asarray(vec[:2]) + 0.22 * unit  # just beyond the tip
        ax.text(x, y, text, color=color, ha="center", va="center", fontsize=7)


def _square_limits(ax, vectors, pad=1.3):
    r = pad * float(np.max(np.linalg.norm(vectors, axis=1)))
    ax.set_xlim(-r, r)
    ax.set_ylim(-r, r)
    ax.set_aspect("equal")


def fig2_geometry(ctx):
    """Fig. 2 (``fig:scheme``): sampled IIDRF, ORF and SimRF blocks at d = 2 and d = 3."""
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(PAGE_WIDTH * 0.6, 3.2))
    panels = []
    for row, d in enumerate((2, 3)):
        for col, coupling in enumerate(COUPLINGS_FIG2):
            w = to_numpy(mc.sample_weights(coupling, d, d, rng=ctx.rng(f"fig2/{coupling}/{d}"), xp=ctx.backend))
            norms = np.linalg.norm(w, axis=1)
            color = style(coupling)["color"]
            idx = row * 3 + col + 1
            ax = fig.add_subplot(2, 3, idx)
            view = principal_view(w) if d == 3 else w
            for i, vec in enumerate(view):
                # d = 3: solid if the vector points out of the page, dotted if into it (the paper's convention)
                into = d == 3 and vec[2] < -1e-9 * norms[i]
                if np.hypot(vec[0], vec[1]) < 0.1 * norms[i]:
                    # (almost) perpendicular to the page: the paper's circled dot (out) or cross (in)
                    ax.plot([vec[0]], [vec[1]], marker="o", ms=9, mfc="white", mec=color, mew=1.2)
                    ax.plot([vec[0]], [vec[1]], marker="x" if into else ".", ms=4 if into else 5, color=color)
                    ax.text(vec[0] + 0.25 * norms.max(), vec[1] - 0.2 * norms.max(), f"$w_{i + 1}$", color=color,
                            fontsize=7, ha="center", va="center")
                    continue
                _arrow2d(ax, vec[:2], color, f"$w_{i + 1}$", linestyle=":" if into else "-")
            ax.plot([0], [0], "k.", ms=3)
            r = 1.3 * float(norms.max())
            ax.set_xlim(-r, r)
            ax.set_ylim(-r, r)
            ax.set_aspect("equal")
            ax.set_xticks([])
            ax.set_yticks([])
            for s in ("left", "bottom"):
                ax.spines[s].set_visible(False)
            angles = pairwise_angles(w)
            ax.set_title(f"{label(coupling)}, $d={d}$\n" + ", ".join(f"{a:.0f}°" for a in angles.values()),
                         fontsize=7)
            panels.append({"coupling": coupling, "d": d, "vectors": w, "norms": norms, "angles_deg": angles})
    data = {
        "name": "fig2_geometry",
        "paper_label": "fig:scheme",
        "caption": ("One sampled block of d random vectors (montecarlo.sample_weights) for IIDRFs, ORFs and "
                    "SimRFs at d = 2 and d = 3 (d = 3 seen along the block's least principal direction, i.e. "
                    "projected on the plane of its two principal directions; dotted arrows point into the page); "
                    "titles give the angles between pairs. ORF pairs are "
                    "perpendicular, SimRF pairs subtend arccos(-1/(d-1)) (180 deg at d = 2, 120 deg at d = 3)."),
        "panels": panels,
    }
    ctx.save(fig, "fig2_geometry", data)


def fig3_simplex_plus(ctx):
    """Fig. 3 (``fig:splusfig-main``): SimRFs vs SimRFs+ at d = 3 for the same sampled norms.

    Norms come from one sampled simplex block (rows of
    :func:`montecarlo.sample_weights`, :math:`\\chi_3`); draws violating the
    polygon inequality :math:`2\\max_i w_i < \\sum_i w_i` (where the SimRFs+
    fixed point degenerates to collinear vectors, about 1 draw in 4) are
    skipped so that the picture shows the generic case.
    """
    import matplotlib.pyplot as plt

    d = 3
    gen = ctx.rng("fig3/norms")
    rejected = 0
    while True:
        w = to_numpy(mc.sample_weights("simplex", d, d, rng=gen, xp=ctx.backend))
        norms = np.linalg.norm(w, axis=1)
        if 2 * norms.max() < norms.sum():
            break
        rejected += 1
    # unrotated geometries (the Haar rotation R is dropped: both lie in the plane x_3 = 0)
    simplex = norms[:, None] * np.asarray(mc.simplex_matrix(d))
    plus, passes, converged = mc.simplex_plus_vectors(norms[None, :].copy(), on_unconverged="raise")
    plus = np.asarray(plus[0])
    fig, axes = plt.subplots(1, 2, figsize=(COLUMN_WIDTH, 1.9))
    panels = []
    for ax, coupling, vecs in zip(axes, ("simplex", "simplex_plus"), (simplex, plus)):
        color = style(coupling)["color"]
        for i, vec in enumerate(vecs):
            _arrow2d(ax, vec[:2], color, f"{norms[i]:.2f}")
        ax.plot([0], [0], "k.", ms=3)
        _square_limits(ax, vecs[:, :2], pad=1.35)
        ax.set_xticks([])
        ax.set_yticks([])
        for s in ("left", "bottom"):
            ax.spines[s].set_visible(False)
        angles = pairwise_angles(vecs)
        _angle_labels(ax, vecs[:, :2], 0.45 * float(norms.min()) + 0.15)
        ax.set_title(label(coupling), fontsize=8)
        panels.append({"coupling": coupling, "vectors": vecs, "angles_deg": angles})
    data = {
        "name": "fig3_simplex_plus",
        "paper_label": "fig:splusfig-main",
        "caption": ("SimRFs vs SimRFs+ at d = 3 for one sampled set of chi_3 norms (arrow labels), before "
                    "the random rotation. SimRF pairs subtend 120 deg; with SimRFs+ (eq. simpler_updates_main, "
                    "montecarlo.simplex_plus_vectors) longer vectors subtend bigger angles."),
        "d": d,
        "norms": norms,
        "rejected_draws": rejected,
        "simplex_plus_passes": int(np.asarray(passes)[0]),
        "panels": panels,
    }
    ctx.save(fig, "fig3_simplex_plus", data)
