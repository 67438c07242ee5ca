"""Closed forms of Simplex Random Features (Reid et al., ICML 2023) in arbitrary precision.

Every function returns mpmath numbers correct to the caller's working
precision, or raises :class:`~theory.errors.ConvergenceError` (an
``mpmath.NoConvergence``) within a work budget when a series or quadrature
cannot reach it (counted in work, not seconds: the same answer on any machine at any load); bad input raises ``ValueError`` (or
:class:`~theory.validation.ArgumentTypeError`, also a ``TypeError``) naming
the argument.

Precision and threads.  The caller's precision is read once per call: the
thread's own :func:`precision` setting if one is active, else
``mpmath.mp.dps`` (``mp.workdps`` is process-global, by mpmath's design).  The
computation runs in a private mpmath context under one lock, so results never
depend on other threads and ``mpmath.mp`` is never changed; :func:`budget`
sets the work budget of each call, a call over a grid of arguments included
(without it, :data:`~theory._context.DEFAULT_WORK` units for each point, about a
minute of a 2-core machine), and an opt-in wall-clock limit
(``budget(seconds=...)``).  See :mod:`theory._context`.

Grids.  Functions of v, z, w, cos(theta), d and m accept a sequence or numpy
array for those arguments and return a numpy object array of mpf of the
broadcast shape (scalars stay scalars).  The MSE functions share one order,
``(coupling[, baseline], d, v or z)``, with ``kind``, ``m``, ``x_norm``, ``y_norm``
and ``kernel`` keyword-only.  Feature kinds (``"prf"``, ``"rff"``,
``"hyperbolic"``) have one record each in :mod:`theory.feature_kinds`
(:func:`feature_kind`); :func:`kernel_mse` and :func:`kernel_mse_ratio` take
any of them.

Modules (one home per formula): :mod:`theory.kernels` (kernels, Thm 3.2,
ensembles), :mod:`theory.distributions` (Lemmas 4.1, 4.2),
:mod:`theory.conformities` (Thm 4.3 and its routes), :mod:`theory.mse`
(MSEs, ratios, gaps, Cor 4.4-4.6, Sec. 5.1, z_crit), :mod:`theory.geometry`
(simplex vectors, Algorithm 1), :mod:`theory.simplex_plus` (Sec. 3.2),
:mod:`theory.symbolic` (sympy derivations), :mod:`theory.certified`
(rigorous balls, python-flint) and :mod:`theory._hypergeometric` (Kummer's
function with relative accuracy).  Shared by every package of the toolkit:
:mod:`theory.registry` (one record per coupling, hooks per layer),
:mod:`theory.validation` (argument checks) and :mod:`theory.errors` (the
failure family).

Importing :mod:`theory` (or one of its shared modules, as :mod:`montecarlo`
does) is cheap: the names below are loaded from their modules on first use
(PEP 562), so ``import theory.registry`` does not load mpmath's closed forms.
"""


import importlib
import importlib.util

#: Public name -> the module that defines it (loaded on first access).
_HOMES = {
    "registry": None, "validation": None, "feature_kinds": None, "errors": None,
    "PRF_COUPLINGS": "_checks", "RFF_COUPLINGS": "_checks",
    "budget": "_context", "precision": "_context",
    "CertificationError": "errors", "ConvergenceError": "errors",
    "feature_kind": "feature_kinds",
    **dict.fromkeys(("conformity", "conformity_at_angle", "conformity_at_angle_quad", "rff_conformity_at_angle",
                     "rff_conformity_at_angle_quad", "conformity_from_moments", "conformity_iid",
                     "conformity_orthogonal", "orf_conformity_kummer", "orf_conformity_series",
                     "simrf_conformity_series", "theta_conformity_series"), "conformities"),
    **dict.fromkeys(("chi_moment", "coupling_pdf", "pdf_chi", "pdf_wij", "pdf_wij_convolution", "pdf_wij_float",
                     "pdf_wij_iid", "wij_moment", "wij_moment_iid"), "distributions"),
    **dict.fromkeys(("simplex_apply", "simplex_gram", "simplex_vectors"), "geometry"),
    **dict.fromkeys(("block_sizes", "coupled_pairs", "ensemble_conformity", "gaussian_kernel",
                     "prf_mse_from_conformity", "rff_mse_from_conformity", "softmax_kernel",
                     "softmax_to_gaussian_factor"), "kernels"),
    **dict.fromkeys(("kernel_mse", "kernel_mse_ratio", "kind_couplings", "mean_conformity", "mse_ratio",
                     "orthogonality_gap", "orthogonality_gap_series", "prf_mse", "rff_asymptotic_ratio",
                     "rff_conformity", "rff_mse", "rff_mse_ratio", "rff_orf_conformity_series",
                     "rff_orthogonality_gap", "simplex_v2_prefactor", "simplex_v2_prefactor_printed", "z_crit"),
                    "mse"),
    **dict.fromkeys(("exact_objective", "simplex_plus_update", "truncated_objective",
                     "truncated_objective_minimum"), "simplex_plus"),
}

__all__ = sorted(_HOMES)


def __getattr__(name):
    home = _HOMES.get(name, ...)
    if home is ...:
        if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
            return importlib.import_module(f"{__name__}.{name}")  # a submodule: theory.hyperbolic, theory.pnc, ...
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if home is None:
        value = importlib.import_module(f"{__name__}.{name}")
    elif name == "feature_kind":
        value = importlib.import_module(f"{__name__}.feature_kinds").get
    else:
        value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
