r"""Downstream experiments of Sec. 5: Gram matrices, kernel-regression classification, PRF attention.

Library code for the paper's downstream claims, vectorised over draws of the
random features, seeded, and returning means with standard errors
(:class:`montecarlo.Estimate`):

:mod:`~montecarlo.experiments.gram`
    Frobenius error of PRF Gram matrices (Sec. 5.2, Fig. 7);
    :func:`~montecarlo.experiments.gram.fig7_frobenius` is the paper's setting.
:mod:`~montecarlo.experiments.uci`
    The eight UCI datasets of Sec. 5.3, shipped with the package (CC BY 4.0,
    cited in ``data/uci/README.md``; ``uci_dir`` / ``$SIMPLEX_RF_UCI_DIR``
    name another copy), a strict parser, and the two split protocols:
    ``'resampled'`` (default: several random splits, validation held out) and
    ``'paper'`` (the authors' split, which reproduces Table 2's mean v).
:mod:`~montecarlo.experiments.classification`
    Kernel-regression classification with the exact Gaussian kernel or PRFs of
    any coupling (Fig. 8, Tables 2 and 3, the sigma search of App. C.1), with
    error bars over draws and splits; ``python -m montecarlo.experiments
    table --table 2|3 [--protocol paper]``.
:mod:`~montecarlo.experiments.attention`
    FAVOR+-style PRF attention in numpy (bidirectional and causal), exact
    softmax attention, and the attention-approximation experiments of
    Sec. 5.4 (one default logit scale, :data:`~montecarlo.experiments.attention.DEFAULT_LOGIT_STD`,
    for the Python API and the command line; :func:`~montecarlo.experiments.attention.attention_scan`
    over sequence length and logit scale).
:mod:`~montecarlo.experiments.performer_train`
    The Fig. 9 analogue: a small Performer-ViT on scikit-learn's digits
    (``python -m montecarlo.experiments performer-train``; needs torch, imported
    when it runs).
:mod:`~montecarlo.experiments.sweeps`
    The sweeps' engine: independent units on joblib (``n_jobs``; threads by
    default, processes or a Dask cluster through ``joblib.parallel_config``),
    one BLAS thread per worker, per-unit seeds (the numbers do not depend on
    the schedule), and common random numbers across couplings
    (:func:`~montecarlo.experiments.sweeps.paired_weights`).
:mod:`~montecarlo.experiments.spread`
    Table 2's cells over many split seeds of the paper's protocol
    (``python -m montecarlo.experiments split-spread cmc wifi``).

The production torch module is :class:`montecarlo.nn.PRFAttention` and the
performer-pytorch adapter :mod:`montecarlo.performer` (the old paths
``montecarlo.experiments.attention_torch`` / ``.performer`` warn and are removed
in 0.3); the scikit-learn transformers live in :mod:`montecarlo.kernel_approximation`.

Every function takes ``rng`` (None, an int >= 0, a ``numpy.random.Generator``
or ``SeedSequence``; checked, never passed raw to numpy);
the sweeps derive one seed per unit (split, m, block of draws), shared by the
couplings under the paired design, so a cell's result depends neither on
which other cells are run nor on ``n_jobs`` or the joblib backend.
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
