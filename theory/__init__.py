"""Closed forms of Simplex Random Features (Reid et al., ICML 2023) in arbitrary precision.

Every function returns mpmath numbers correct to the caller's working
precision, or raises :class:`~theory.errors.ConvergenceError` (an
``mpmath.NoConvergence``) within a work budget when a series or quadrature
cannot reach it (counted in work, not seconds: the same answer on any machine at any load); bad input raises ``ValueError`` (or
:class:`~theory.validation.ArgumentTypeError`, also a ``TypeError``) naming
the argument.

Precision and threads, grids, the modules and their imports: :ref:`guide-theory`
(``docs/guide/theory_design.rst``).
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
