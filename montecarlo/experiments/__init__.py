r"""Downstream experiments of Sec. 5: Gram matrices, kernel-regression classification, PRF attention.

Library code for the paper's downstream claims, vectorised over draws of the
random features, seeded, and returning means with standard errors
(:class:`montecarlo.Estimate`):

:mod:`~montecarlo.experiments.gram`
    Frobenius error of PRF Gram matrices (Sec. 5.2, Fig. 7);
    :func:`~montecarlo.experiments.gram.fig7_frobenius` is the paper's setting.
:mod:`~montecarlo.experiments.uci`
    Loaders for the eight UCI datasets of Sec. 5.3 from a directory named by
    the caller or ``$SIMPLEX_RF_UCI_DIR`` (the project does not ship them).
:mod:`~montecarlo.experiments.classification`
    Kernel-regression classification with the exact Gaussian kernel or PRFs of
    any coupling (Fig. 8, Tables 2 and 3, the sigma search of App. C.1);
    ``python -m montecarlo.experiments.classification --table 2|3``.
:mod:`~montecarlo.experiments.attention`
    FAVOR+-style PRF attention in numpy (bidirectional and causal), exact
    softmax attention, and the attention-approximation experiment (Sec. 5.4).
:mod:`~montecarlo.experiments.attention_torch`
    The same attention as a torch ``nn.Module`` (imported on demand: needs torch).

Every function takes ``rng`` (None, an int or a ``numpy.random.Generator``);
experiments derive one independent stream per (coupling, m) cell, so a cell's
result does not depend on which other cells are run.
"""

from . import attention, classification, gram, uci
from .attention import attention_errors, prf_attention, prf_attention_matrix, softmax_attention, synthetic_qkv
from .classification import (
    accuracy_table,
    classification_curve,
    exact_accuracy,
    kernel_regression_exact,
    kernel_regression_prf,
    prf_accuracy,
    sigma_search,
)
from .gram import fig7_frobenius, frobenius_curve, gram_errors, gram_frobenius_error, paper_gram_data
from .uci import ENV_VAR, PAPER_SIGMAS, load_all, load_dataset, resolve_uci_dir

__all__ = [
    "ENV_VAR",
    "PAPER_SIGMAS",
    "accuracy_table",
    "attention",
    "attention_errors",
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
    "paper_gram_data",
    "prf_accuracy",
    "prf_attention",
    "prf_attention_matrix",
    "resolve_uci_dir",
    "sigma_search",
    "softmax_attention",
    "synthetic_qkv",
    "uci",
]
