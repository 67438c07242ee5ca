r"""Fig. 6 (``var_comp_fig``) and the new MSE-ratio figures (PRFs for several d, RFFs).

Analytic curves are :func:`theory.mse_ratio` / :func:`theory.rff_mse_ratio`
(one block, m = d) at the run's mpmath precision.  Monte Carlo points are
ratios of two independent :func:`montecarlo.empirical_mse` estimates at
:math:`x = y = \frac v2 e_1` (PRFs; the ratio depends on the data only through
:math:`v = \|x+y\|`) or :math:`x = -y = \frac z2 e_1` (RFFs, :math:`z =
\|x-y\|`), with the delta-method error bar
:math:`r\sqrt{(s_c/M_c)^2 + (s_b/M_b)^2}`.

The PRF points stop at v = 1.25: beyond, :math:`(\hat K - K)^2` is so
heavy-tailed (its variance grows like :math:`e^{8v^2}`) that the sample
standard error is unreliable at any affordable number of draws.
"""

from __future__ import annotations

import numpy as np

import montecarlo as mc
import theory
from theory import feature_kinds as theory_kinds

from .style import COLUMN_WIDTH, DIMENSION_CMAP, PAGE_WIDTH, label, marker_style, mc_legend_handle, style

#: v values of the Monte Carlo points of Fig. 6.
PRF_MC_V = (0.25, 0.5, 0.75, 1.0, 1.25)
#: z values of the Monte Carlo points of the RFF figure.
RFF_MC_Z = (0.5, 1.0, 2.0, 3.0)
#: Dimensions of the MSE-ratio family (new figure).
FAMILY_D = (4, 8, 16, 32, 64, 128, 256)
#: Dimensions of the RFF panels (new figure).
RFF_D = (4, 16, 64)


def _ratio_with_error(num, den):
    r = num.mean / den.mean
    return r, abs(r) * np.hypot(num.stderr / num.mean, den.stderr / den.mean)


def _mc_ratios(ctx, tag, d, points, couplings, n_draws, kind, bar):
    """Monte Carlo MSEs of every coupling at every point (t = |x + y| for the positive kinds, |x - y| for
    RFFs), and ratios to IID (delta-method errors)."""
    raw = {c: [] for c in ("iid",) + tuple(couplings)}
    positive = theory_kinds.get(kind).positive
    for t in points:
        x = np.zeros(d)
        x[0] = t / 2
        y = x if positive else -x
        for c in raw:
            est = mc.empirical_mse(c, x, y, d, n_draws, kind=kind, rng=ctx.rng(f"{tag}/{c}/{d}/{t}"),
                                   xp=ctx.backend)
            raw[c].append(est)
            bar.update()
    out = []
    for c in couplings:
        rs = [_ratio_with_error(a, b) for a, b in zip(raw[c], raw["iid"])]
        out.append({"coupling": c, "baseline": "iid", "d": d, "x": list(points),
                    "ratio": [r for r, _ in rs], "stderr": [s for _, s in rs],
                    "mse": [e.mean for e in raw[c]], "mse_stderr": [e.stderr for e in raw[c]],
                    "baseline_mse": [e.mean for e in raw["iid"]], "baseline_mse_stderr": [e.stderr for e in raw["iid"]],
                    "n_draws": n_draws})
    return out


def fig6_mse_ratio(ctx):
    """Fig. 6 (``var_comp_fig``): PRF MSE ratios ORF/IID and SimRF/IID against v at d = 64."""
    import matplotlib.pyplot as plt

    d = 64
    vs = np.linspace(0.0, 3.0, ctx.n(121, 61))
    analytic = []
    with ctx.precision():
        for c in ("orthogonal", "simplex"):
            analytic.append({"coupling": c, "baseline": "iid", "d": d, "m": d, "v": vs,
                             "ratio": [float(theory.mse_ratio(c, "iid", d, v)) for v in vs],
                             "source": "theory.mse_ratio"})
        exact_mse = {c: [float(theory.prf_mse(c, d, v, x_norm=v / 2, y_norm=v / 2)) for v in PRF_MC_V]
                     for c in ("iid", "orthogonal", "simplex")}
    n_draws = ctx.n(200_000, 20_000)
    bar = ctx.progress_bar(len(PRF_MC_V) * 3, "fig6 MSE")
    mcs = _mc_ratios(ctx, "fig6", d, PRF_MC_V, ("orthogonal", "simplex"), n_draws, "prf", bar)
    bar.close()
    for s in mcs:
        s["theory_mse"] = exact_mse[s["coupling"]]
        s["theory_baseline_mse"] = exact_mse["iid"]

    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 2.3))
    ax.axhline(1.0, color=style("iid")["color"], linestyle=style("iid")["linestyle"], lw=1.0,
               label=f"{label('iid')} (= 1)")
    for a, s in zip(analytic, mcs):
        st = style(a["coupling"])
        st["label"] = f"{label(a['coupling'])} / {label('iid')}"
        ax.plot(a["v"], a["ratio"], **st)
        ax.errorbar(s["x"], s["ratio"], yerr=s["stderr"], elinewidth=0.8, capsize=1.5,
                    **marker_style(s["coupling"]))
    ax.set_yscale("log")
    ax.set_xlabel(r"$v = \|\mathbf{x} + \mathbf{y}\|_2$")
    ax.set_ylabel(r"$\mathrm{MSE} / \mathrm{MSE}_{\mathrm{IIDRF}}$")
    ax.set_title(f"PRF kernel estimator, $d = m = {d}$")
    ax.set_xlim(0, vs[-1])
    handles, _ = ax.get_legend_handles_labels()
    ax.legend(handles=handles + [mc_legend_handle()], loc="lower right")
    data = {
        "name": "fig6_mse_ratio",
        "paper_label": "var_comp_fig",
        "caption": ("MSE ratio of the PRF Gaussian-kernel estimator, ORFs/IIDRFs and SimRFs/IIDRFs, against "
                    "v = |x + y| at d = m = 64 (lower is better): closed forms (theory.mse_ratio; v = 0 is the "
                    "limit) and Monte Carlo ratios (montecarlo.empirical_mse at x = y = v/2 e_1, "
                    f"{n_draws} draws per coupling and point, error bars 1 s.e. by the delta method)."),
        "d": d,
        "analytic": analytic,
        "monte_carlo": mcs,
    }
    ctx.save(fig, "fig6_mse_ratio", data)


def new_mse_ratio_vs_d(ctx):
    """New: PRF MSE ratios ORF/IID and SimRF/IID against v for d = 4 ... 256 (m = d)."""
    import matplotlib.pyplot as plt
    from matplotlib import colormaps
    from matplotlib.colors import LogNorm
    from matplotlib.cm import ScalarMappable

    vs = np.linspace(0.0, 3.0, ctx.n(61, 21))
    cmap = colormaps[DIMENSION_CMAP]
    norm = LogNorm(FAMILY_D[0], FAMILY_D[-1])
    curves = []
    fig, axes = plt.subplots(1, 2, figsize=(PAGE_WIDTH * 0.8, 2.3), sharex=True)
    bar = ctx.progress_bar(len(FAMILY_D), "new MSE ratio vs d")
    with ctx.precision():
        for d in FAMILY_D:
            for ax, c in zip(axes, ("simplex", "orthogonal")):
                ratio = [float(theory.mse_ratio(c, "iid", d, v)) for v in vs]
                curve = {"coupling": c, "baseline": "iid", "d": d, "m": d, "v": vs, "ratio": ratio,
                         "source": "theory.mse_ratio"}
                if c == "simplex":
                    curve["v2_prefactor"] = float(theory.simplex_v2_prefactor(d))
                    ax.plot([0], [curve["v2_prefactor"]], marker="^", color=cmap(norm(d)),
                            markersize=3.5, linestyle="none", clip_on=False)
                curves.append(curve)
                ax.plot(vs, ratio, color=cmap(norm(d)), linestyle=style(c)["linestyle"], lw=1.0)
            bar.update()
    bar.close()
    for ax, c in zip(axes, ("simplex", "orthogonal")):
        ax.set_xlabel(r"$v = \|\mathbf{x} + \mathbf{y}\|_2$")
        ax.set_title(f"{label(c)} / {label('iid')}")
        ax.set_xlim(0, vs[-1])
    axes[0].set_yscale("log")
    axes[0].set_ylabel(r"$\mathrm{MSE} / \mathrm{MSE}_{\mathrm{IIDRF}}$")
    axes[0].plot([], [], marker="^", color="0.3", linestyle="none", markersize=3.5,
                 label=r"Sec. 5.1 $v^2$ prefactor")
    axes[0].legend(loc="lower right")
    sm = ScalarMappable(norm=norm, cmap=cmap)
    cb = fig.colorbar(sm, ax=axes, pad=0.02, ticks=FAMILY_D)
    cb.ax.set_yticklabels([str(d) for d in FAMILY_D])
    cb.set_label("$d$ (= $m$)")
    data = {
        "name": "new_mse_ratio_vs_d",
        "paper_label": None,
        "caption": ("Beyond the paper: PRF MSE ratios SimRFs/IIDRFs (left, log scale) and ORFs/IIDRFs (right) "
                    "against v for d = m = 4 ... 256 (theory.mse_ratio). Triangles at v = 0: the Sec. 5.1 v^2 "
                    "prefactor (theory.simplex_v2_prefactor), which the curves reach. The SimRF gain at small v "
                    "grows like 1/(2d); ORFs give no gain at v -> 0."),
        "curves": curves,
    }
    ctx.save(fig, "new_mse_ratio_vs_d", data)


def new_rff_mse_ratio(ctx):
    """New: RFF MSE ratios against ``z = |x - y|`` for d = 4, 16, 64 (m = d), with Monte Carlo points.

    ORF/IID from :func:`theory.rff_mse_ratio` (Thm 4.5), its 1/d form (Cor 4.6,
    :func:`theory.rff_asymptotic_ratio`) and :math:`z_{\\mathrm{crit}}`
    (:func:`theory.z_crit`).  SimRF/IID analytic when :mod:`theory` supports
    the simplex coupling for RFFs (``'simplex' in theory.RFF_COUPLINGS``);
    its Monte Carlo points are drawn either way.
    """
    import matplotlib.pyplot as plt

    zs = np.linspace(0.0, 4.5, ctx.n(91, 31))
    simplex_theory = "simplex" in theory.RFF_COUPLINGS
    analytic_couplings = ("orthogonal", "simplex") if simplex_theory else ("orthogonal",)
    n_draws = ctx.n(100_000, 10_000)
    fig, axes = plt.subplots(1, len(RFF_D), figsize=(PAGE_WIDTH, 2.2), sharey=True)
    panels = []
    bar = ctx.progress_bar(len(RFF_D) * len(RFF_MC_Z) * 3, "new RFF MSE")
    for ax, d in zip(axes, RFF_D):
        panel = {"d": d, "m": d, "analytic": [], "monte_carlo": []}
        with ctx.precision():
            for c in analytic_couplings:
                ratio = [float(theory.rff_mse_ratio(c, "iid", d, z)) for z in zs]
                panel["analytic"].append({"coupling": c, "baseline": "iid", "z": zs, "ratio": ratio,
                                          "source": "theory.rff_mse_ratio"})
                st = style(c)
                st["label"] = f"{label(c)} / {label('iid')}"
                ax.plot(zs, ratio, **st)
            asym = [float(theory.rff_asymptotic_ratio(d, z)) for z in zs]
            panel["asymptotic"] = {"coupling": "orthogonal", "z": zs, "ratio": asym,
                                   "source": "theory.rff_asymptotic_ratio (Cor 4.6)"}
            ax.plot(zs, asym, color=style("orthogonal")["color"], lw=0.7, linestyle=":",
                    label=r"ORFs, $O(1/d)$ (Cor. 4.6)")
            zc = float(theory.z_crit(d))
            panel["z_crit"] = zc
        if zc <= zs[-1]:
            ax.axvline(zc, color="0.5", lw=0.6)
            ax.text(zc + 0.05, 0.5, r"$z_{\mathrm{crit}}$", transform=ax.get_xaxis_transform(), ha="left",
                    fontsize=6, color="0.4")
        mcs = _mc_ratios(ctx, "rff", d, RFF_MC_Z, ("orthogonal", "simplex"), n_draws, "rff", bar)
        with ctx.precision():
            for s in mcs:
                if s["coupling"] in theory.RFF_COUPLINGS:
                    s["theory_mse"] = [float(theory.rff_mse(s["coupling"], d, z)) for z in RFF_MC_Z]
                s["theory_baseline_mse"] = [float(theory.rff_mse("iid", d, z)) for z in RFF_MC_Z]
        for s in mcs:
            ax.errorbar(s["x"], s["ratio"], yerr=s["stderr"], elinewidth=0.8, capsize=1.5,
                        **marker_style(s["coupling"]))
        panel["monte_carlo"] = mcs
        ax.axhline(1.0, color=style("iid")["color"], lw=0.8, label=f"{label('iid')} (= 1)")
        ax.set_yscale("log")
        ax.set_xlabel(r"$z = \|\mathbf{x} - \mathbf{y}\|_2$")
        ax.set_title(f"RFFs, $d = m = {d}$")
        ax.set_xlim(0, zs[-1])
        panels.append(panel)
    bar.close()
    axes[0].set_ylabel(r"$\mathrm{MSE} / \mathrm{MSE}_{\mathrm{IIDRF}}$")
    handles, _ = axes[0].get_legend_handles_labels()
    if not simplex_theory:
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], **marker_style("simplex"), label=f"{label('simplex')} (Monte Carlo only)"))
    axes[-1].legend(handles=handles + [mc_legend_handle()], loc="lower right")
    data = {
        "name": "new_rff_mse_ratio",
        "paper_label": None,
        "caption": ("Beyond the paper: MSE ratios of the RFF Gaussian-kernel estimator against z = |x - y| "
                    "(m = d): ORFs/IIDRFs exactly (Thm 4.5, theory.rff_mse_ratio) and to O(1/d) (Cor 4.6), "
                    + ("SimRFs/IIDRFs exactly (theory.rff_mse_ratio), " if simplex_theory else "")
                    + f"Monte Carlo ratios ({n_draws} draws per coupling and point, error bars 1 s.e.) and "
                    "z_crit (theory.z_crit) where ORFs stop beating IIDRFs."),
        "simplex_analytic": simplex_theory,
        "panels": panels,
    }
    ctx.save(fig, "new_rff_mse_ratio", data)


#: Grid of the RFF SimRF-vs-ORF map (new figure).
MAP_D = (2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128, 256, 1024)


def new_rff_simplex_map(ctx):
    """New: where SimRFs beat or lose to ORFs for RFFs, a map over d and z (m = d).

    Colour: :math:`\\log_2` of the RFF MSE ratio SimRF/ORF from the closed forms
    (:func:`theory.rff_mse_ratio`, beyond the paper); the contour marks ratio 1.
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    zs = np.linspace(0.0, 5.0, ctx.n(51, 21))
    ds = MAP_D if not ctx.quick else (2, 3, 8, 64, 1024)
    ratio = np.empty((len(ds), len(zs)))
    bar = ctx.progress_bar(len(ds), "new RFF SimRF/ORF map")
    with ctx.precision():
        for i, d in enumerate(ds):
            ratio[i] = [float(theory.rff_mse_ratio("simplex", "orthogonal", d, z)) for z in zs]
            bar.update()
    bar.close()
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH * 1.25, 2.6))
    logr = np.log2(ratio)
    norm = TwoSlopeNorm(vmin=min(logr.min(), -0.2), vcenter=0.0, vmax=max(logr.max(), 0.2))
    mesh = ax.pcolormesh(zs, np.arange(len(ds)), logr, cmap="RdBu_r", norm=norm, shading="nearest")
    ax.contour(zs, np.arange(len(ds)), logr, levels=[0.0], colors="k", linewidths=0.8)
    ax.set_yticks(np.arange(len(ds)), [str(d) for d in ds])
    ax.set_xlabel(r"$z = \|\mathbf{x} - \mathbf{y}\|_2$")
    ax.set_ylabel("$d$ (= $m$)")
    ax.set_title("RFFs: SimRFs vs ORFs (blue: SimRFs better)")
    cb = fig.colorbar(mesh, ax=ax, pad=0.02)
    cb.set_label(r"$\log_2 \mathrm{MSE}_{\mathrm{SimRF}} / \mathrm{MSE}_{\mathrm{ORF}}$")
    data = {
        "name": "new_rff_simplex_map",
        "paper_label": None,
        "caption": ("Beyond the paper: RFF MSE ratio SimRFs/ORFs (m = d) over d and z from the closed forms "
                    "(theory.rff_mse_ratio; w_i + w_j and w_i - w_j subtend theta and pi - theta). Red: SimRFs "
                    "worse, at every d for small z (limit (3 + d/(d-1))/3); blue: better, only in a window "
                    "around z ~ 3 at small d. Black contour: ratio 1 (for d >= 16 and z >~ 3.5 the ratio is within "
                    "1e-3 of 1 and the contour follows its tiny oscillations)."),
        "d": list(ds),
        "z": zs,
        "ratio": ratio,
        "source": "theory.rff_mse_ratio('simplex', 'orthogonal', d, z)",
    }
    ctx.save(fig, "new_rff_simplex_map", data)
