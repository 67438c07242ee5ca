r"""Downstream experiments of Sec. 5: Gram matrices, kernel-regression classification, PRF attention.

Library code for the paper's downstream claims, vectorised over draws of the
random features, seeded, and returning means with standard errors
(:class:`montecarlo.Estimate`):

The modules, the old paths, and seeding: :ref:`guide-montecarlo.experiments` (``docs/guide/experiments.rst``).
"""

from . import attention, classification, gram, spread, sweeps, uci
from .attention import (
    DEFAULT_LOGIT_STD,
    attention_errors,
    attention_scan,
    prf_attention,
    prf_attention_matrix,
    softmax_attention,
    synthetic_qkv,
)
from .classification import (
    PooledEstimate,
    accuracy_table,
    classification_curve,
    exact_accuracy,
    kernel_regression_exact,
    kernel_regression_prf,
    pool_splits,
    prf_accuracy,
    sigma_search,
)
from .gram import fig7_frobenius, frobenius_curve, gram_errors, gram_frobenius_error, paper_gram_data
from .spread import split_spread
from .sweeps import paired_weights, run_units
from .uci import (
    DATASETS,
    ENV_VAR,
    PAPER_SIGMAS,
    PROTOCOLS,
    DataFileError,
    DataNotFoundError,
    load_all,
    load_dataset,
    make_split,
    mean_v,
    resolve_uci_dir,
)

__all__ = [
    "DATASETS",
    "DEFAULT_LOGIT_STD",
    "ENV_VAR",
    "PAPER_SIGMAS",
    "PROTOCOLS",
    "DataFileError",
    "DataNotFoundError",
    "PooledEstimate",
    "accuracy_table",
    "attention",
    "attention_errors",
    "attention_scan",
    "classification",
    "classification_curve",
    "exact_accuracy",
    "fig7_frobenius",
    "frobenius_curve",
    "gram",
    "gram_errors",
    "gram_frobenius_error",
    "kernel_regression_exact",
    "kernel_regression_prf",
    "load_all",
    "load_dataset",
    "make_split",
    "mean_v",
    "paired_weights",
    "paper_gram_data",
    "pool_splits",
    "prf_accuracy",
    "prf_attention",
    "prf_attention_matrix",
    "resolve_uci_dir",
    "run_units",
    "sigma_search",
    "softmax_attention",
    "split_spread",
    "spread",
    "sweeps",
    "synthetic_qkv",
    "uci",
]
