r"""Nonparametric classification by kernel regression with PRFs (Sec. 5.3, Fig. 8, Tables 2-3, App. C.1).

The classifier of Sec. 5.3 (``nonparam_class``): for training pairs
:math:`(x_i, y_i)` with one-hot labels :math:`y_i\in\mathbb R^n` and a test
object :math:`x'`,

.. math::
    y'_{\mathrm{pred}} = \frac{\sum_i K(\sigma x', \sigma x_i)\,y_i}{\sum_i K(\sigma x', \sigma x_i)},
    \qquad \hat c(x') = \arg\max_c\, y'_{\mathrm{pred},c},

with :math:`K = K_{\mathrm{gauss}}` exact (:func:`kernel_regression_exact`,
O(N_test N_train)) or estimated with PRFs of eq. ``def_prf``
(:func:`kernel_regression_prf`), in which case

.. math::
    y'_{\mathrm{pred}} = \frac{\phi(\sigma x')^\top \big(\Phi_{\mathrm{train}}^\top Y\big)}
                              {\phi(\sigma x')^\top \big(\Phi_{\mathrm{train}}^\top \mathbf 1\big)},

O((N_test + N_train) m) per draw of the m features, vectorised over draws.

Numerical safety (log space)
----------------------------
The PRF prefactor :math:`e^{-\sigma^2\|x\|^2}` underflows for large
:math:`\sigma\|x\|` (every feature of a row can round to 0, and a 0/0 ratio
follows).  Here nothing is exponentiated before it is offset:

* training side, per draw and feature f: :math:`o_f = \max_i \ell_{if}` with
  :math:`\ell_{if} = \log\phi_f(\sigma x_i)`, and
  :math:`A_{fc} = \sum_i e^{\ell_{if} - o_f}\,y_{ic}` (every entry <= N_train,
  and :math:`z_f = \sum_c A_{fc} \ge 1`);
* test side, per draw and test row: :math:`r = \max_f(\ell'_f + o_f + \log z_f)`
  and :math:`y'_{\mathrm{pred}} \propto \sum_f e^{\ell'_f + o_f - r} A_{f\cdot}`.

Both offsets cancel exactly in the ratio, the denominator is >= 1 (no 0/0),
no exponent exceeds 0 (no overflow), and a term only underflows when it is
below :math:`10^{-308}` times the largest term of its sum.  The exact
classifier uses the same per-test-row offset on :math:`-\sigma^2\|x'-x_i\|^2/2`.

Standard errors are over independent draws of the features for one fixed
data split (the split is a seed of its own); they do not include the
split-to-split variation (see :func:`accuracy_table` with several
``split_rng``).

References
----------
Reid et al., "Simplex Random Features", ICML 2023: Sec. 5.3 (Fig. 8
``nonparam_results``), Sec. 5.3.1 (Table 2), App. B.2 (Table 3
``tab:fastsims_table``), App. C.1 (Fig. 10 ``tunegraph``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

import montecarlo as mc

from . import uci
from ._common import (
    CHUNK_ELEMENTS,
    check_array,
    check_coupling,
    check_couplings,
    check_int,
    check_labels,
    check_positive_float,
    child_rng,
    chunks,
    coupling_key,
    seed_entropy,
)

#: Couplings of Table 2 / Fig. 8 (m = d): the four exact ones.
TABLE2_COUPLINGS = ("iid", "orthogonal", "simplex", "simplex_plus")
#: Columns of Table 3 (App. B.2): data zero-padded to the next power of two.
TABLE3_COUPLINGS = ("iid", "orthogonal", "fast_orthogonal", "simplex", "fast_simplex")
#: Default sigma grid of :func:`sigma_search` (a coarse log grid, App. C.1).
DEFAULT_SIGMAS = tuple(np.round(np.geomspace(0.05, 2.0, 17), 6))

#: The paper's Table 2 (m = d): dataset -> (SimRFs, SimRFs+) as (mean, stderr).
PAPER_TABLE2 = {
    "abalone": ((0.1421, 0.0002), (0.1419, 0.0002)),
    "banknote": ((0.7229, 0.0012), (0.7132, 0.0012)),
    "car": ((0.6754, 0.0004), (0.6751, 0.0004)),
    "yeast": ((0.3202, 0.0004), (0.3208, 0.0004)),
    "cmc": ((0.4047, 0.0005), (0.4065, 0.0005)),
    "nursery": ((0.6874, 0.0005), (0.6917, 0.0004)),
    "wifi": ((0.6314, 0.0018), (0.6473, 0.0018)),
    "chess": ((0.2000, 0.0001), (0.2000, 0.0001)),
}
#: The paper's Table 3 (padded data, m = p): dataset -> {coupling: (mean, stderr)}.
PAPER_TABLE3 = {
    name: dict(zip(TABLE3_COUPLINGS, [(v, s) for v, s in zip(vals, ses)]))
    for name, vals, ses in [
        ("abalone", (.1432, .1445, .1447, .1455, .1462), (.0003,) * 5),
        ("banknote", (.6441, .6612, .6596, .7196, .7296), (.0024, .0025, .0024, .0019, .0017)),
        ("car", (.6768, .6788, .6784, .6797, .6800), (.0006,) * 5),
        ("yeast", (.3187, .3193, .3171, .3187, .3195), (.0006,) * 5),
        ("cmc", (.4088, .4149, .4159, .4206, .4222), (.0009, .0009, .0009, .0008, .0008)),
        ("nursery", (.5870, .6213, .6193, .7030, .7037), (.0013, .0019, .0019, .0008, .0008)),
        ("wifi", (.4914, .5224, .5310, .6509, .6533), (.0026, .0025, .0024, .0027, .0027)),
        ("chess", (.2011, .2017, .2016, .2021, .2021), (.0002,) * 5),
    ]
}


# ---------------------------------------------------------------------------
# The classifiers


def _check_problem(X_train, y_train, X_test, n_classes):
    X_train = check_array(X_train, "X_train", 2)
    d = X_train.shape[1]
    X_test = check_array(X_test, "X_test", 2, d, "X_train's width")
    y_train = check_labels(y_train, "y_train", X_train.shape[0], n_classes)
    n_classes = int(y_train.max()) + 1 if n_classes is None else check_int(n_classes, "n_classes", 1)
    return X_train, y_train, X_test, n_classes


def kernel_regression_exact(X_train, y_train, X_test, sigma=1.0, n_classes=None):
    r"""Kernel-regression class probabilities with the exact Gaussian kernel (Sec. 5.3).

    Parameters
    ----------
    X_train : array (N, d)
    y_train : array (N,) of int
        Class indices in [0, n_classes).
    X_test : array (N', d)
    sigma : float > 0
        Inputs are multiplied by sigma before :math:`K(x, y) = e^{-\|x-y\|^2/2}`.
    n_classes : int, optional
        Default ``max(y_train) + 1``.

    Returns
    -------
    ndarray (N', n_classes)
        :math:`\sum_i K(\sigma x', \sigma x_i) y_i / \sum_i K(\sigma x', \sigma x_i)`
        (rows sum to 1), computed with a per-row log offset (no underflow).
    """
    X_train, y_train, X_test, n_classes = _check_problem(X_train, y_train, X_test, n_classes)
    sigma = check_positive_float(sigma, "sigma")
    a, b = sigma * X_test, sigma * X_train
    sq = np.einsum("nd,nd->n", a, a)[:, None] + np.einsum("nd,nd->n", b, b)[None, :] - 2 * a @ b.T
    logk = -0.5 * np.maximum(sq, 0.0)
    logk -= logk.max(axis=1, keepdims=True)
    k = np.exp(logk, out=logk)
    num = k @ np.eye(n_classes)[y_train]
    return num / num.sum(axis=1, keepdims=True)


def _flat_logits(X, W):
    """Gaussian PRF log-features laid out (N, R, m) by one matrix product X (N, d) @ (d, R m)."""
    R, m, d = W.shape
    z = X @ W.reshape(R * m, d).T
    z -= (np.einsum("nd,nd->n", X, X) + 0.5 * np.log(m))[:, None]
    return z.reshape(X.shape[0], R, m)


def _prf_numerators(X_train, onehot, X_test, W):
    """Stabilised numerators (R, N', C) for weights W (R, m, d) on already scaled inputs (see module docs).

    The projections of all R draws are one matrix product (N, d) @ (d, R m), which BLAS runs far
    faster than R small batched products when d and m are small."""
    R, m, _ = W.shape
    lt = _flat_logits(X_train, W)  # (N, R, m)
    o = lt.max(axis=0)  # (R, m)
    lt -= o
    np.exp(lt, out=lt)
    A = (onehot.T @ lt.reshape(lt.shape[0], R * m)).reshape(-1, R, m)  # (C, R, m)
    logz = np.log(A.sum(axis=0))  # (R, m), >= 0
    lq = _flat_logits(X_test, W)  # (N', R, m)
    lq += o
    r = (lq + logz).max(axis=2, keepdims=True)
    lq -= r
    np.exp(lq, out=lq)
    return np.matmul(lq.transpose(1, 0, 2), A.transpose(1, 2, 0))  # (R, N', C)


def _reps_per_chunk(n_train, n_test, m):
    return max(1, CHUNK_ELEMENTS // ((n_train + n_test) * m))


def kernel_regression_prf(X_train, y_train, X_test, W, sigma=1.0, n_classes=None):
    r"""Kernel-regression class probabilities with the Gaussian kernel estimated by PRFs (Sec. 5.3).

    Parameters
    ----------
    X_train, y_train, X_test, sigma, n_classes
        As in :func:`kernel_regression_exact`.
    W : array (m, d) or (R, m, d)
        Projections (e.g. :func:`montecarlo.sample_weights` with ``n_draws=R``): one
        or R independent draws, all evaluated at once.

    Returns
    -------
    ndarray (N', n_classes) or (R, N', n_classes)
        :math:`\phi(\sigma x')^\top\Phi^\top Y / \phi(\sigma x')^\top\Phi^\top\mathbf 1`
        with :math:`\phi` of eq. ``def_prf``, log-space stabilised (module docs).
    """
    X_train, y_train, X_test, n_classes = _check_problem(X_train, y_train, X_test, n_classes)
    sigma = check_positive_float(sigma, "sigma")
    Wa = np.asarray(W) if not isinstance(W, np.ndarray) else W
    single = getattr(Wa, "ndim", 0) == 2
    Wa = check_array(Wa[None] if single else Wa, "W", 3, X_train.shape[1], "X_train's width")
    onehot = np.eye(n_classes)[y_train]
    out = np.empty((Wa.shape[0], X_test.shape[0], n_classes))
    step = _reps_per_chunk(X_train.shape[0], X_test.shape[0], Wa.shape[1])
    for sl in chunks(Wa.shape[0], step):
        num = _prf_numerators(sigma * X_train, onehot, sigma * X_test, Wa[sl])
        out[sl] = num / num.sum(axis=2, keepdims=True)
    return out[0] if single else out


def _prf_accuracies(X_train, y_train, X_test, y_test, W, sigma, n_classes, draw=None):
    """Per-draw accuracies (R,) (inputs validated by the caller).

    ``W`` is either an (R, m, d) array of draws, or, with ``draw = (coupling, m, gen)``, the number
    R of draws to make chunk by chunk from the generator (bounded memory for any R; the chunk size
    depends only on the problem's shape, so the result is reproducible from the seed)."""
    onehot = np.eye(n_classes)[y_train]
    n_draws = W if draw is not None else W.shape[0]
    m = draw[1] if draw is not None else W.shape[1]
    acc = np.empty(n_draws)
    step = _reps_per_chunk(X_train.shape[0], X_test.shape[0], m)
    a, b = sigma * X_train, sigma * X_test
    for sl in chunks(n_draws, step):
        if draw is None:
            w = W[sl]
        else:
            w = mc.sample_weights(draw[0], X_train.shape[1], m, rng=draw[2], n_draws=sl.stop - sl.start)
        num = _prf_numerators(a, onehot, b, w)
        acc[sl] = np.mean(num.argmax(axis=2) == y_test[None, :], axis=1)
    return acc


def _estimate(samples):
    n = samples.size
    se = float(samples.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")
    return mc.Estimate(float(samples.mean()), se, n)


# ---------------------------------------------------------------------------
# Accuracies on a split


def _as_split(dataset, uci_dir=None, split_rng=0, validation_fraction=0.0, pad_pow2=False):
    if isinstance(dataset, str):
        dataset = uci.load_dataset(dataset, uci_dir)
    if isinstance(dataset, uci.Dataset):
        dataset = dataset.split(split_rng, validation_fraction=validation_fraction)
    if not isinstance(dataset, uci.Split):
        raise TypeError(f"dataset must be a dataset name, a Dataset or a Split, got {type(dataset).__name__}")
    if validation_fraction > 0 and dataset.X_val is None:
        raise ValueError(f"dataset {dataset.name!r}: this Split has no validation part; "
                         "split with validation_fraction > 0")
    return dataset.padded() if pad_pow2 else dataset


def _sigma_for(split, sigma):
    if sigma is None:
        if split.name not in uci.PAPER_SIGMAS:
            raise ValueError(f"sigma must be given for dataset {split.name!r} (no paper value)")
        return uci.PAPER_SIGMAS[split.name]
    return check_positive_float(sigma, "sigma")


def _eval_arrays(split, on):
    if on == "test":
        return split.X_test, split.y_test
    if on == "validation":
        if split.X_val is None:
            raise ValueError(f"on='validation' but dataset {split.name!r} has no validation split")
        return split.X_val, split.y_val
    raise ValueError(f"on must be 'test' or 'validation', got {on!r}")


def exact_accuracy(split, sigma=None, on="test"):
    """Accuracy of the exact-kernel classifier on a :class:`~montecarlo.experiments.uci.Split`.

    Parameters
    ----------
    split : Split
    sigma : float, optional
        Default: the paper's value for the dataset (:data:`uci.PAPER_SIGMAS`).
    on : {'test', 'validation'}

    Returns
    -------
    float
    """
    sigma = _sigma_for(split, sigma)
    X, y = _eval_arrays(split, on)
    probs = kernel_regression_exact(split.X_train, split.y_train, X, sigma, split.n_classes)
    return float(np.mean(probs.argmax(axis=1) == y))


def prf_accuracy(split, coupling, m, n_draws, sigma=None, rng=None, on="test", return_samples=False):
    """Mean PRF kernel-regression accuracy over ``n_draws`` independent feature draws.

    Parameters
    ----------
    split : Split
    coupling : str
        Any of :data:`montecarlo.COUPLINGS`.
    m : int >= 1
        Number of random features.
    n_draws : int >= 2
    sigma : float, optional
        Default: the paper's value for the dataset.
    rng : None, int or numpy.random.Generator
    on : {'test', 'validation'}
    return_samples : bool
        Also return the per-draw accuracies (n_draws,).

    Returns
    -------
    montecarlo.Estimate
        Mean accuracy and its standard error over the draws (fixed split).
    """
    coupling = check_coupling(coupling)
    m = check_int(m, "m", 1)
    n_draws = check_int(n_draws, "n_draws", 2)
    sigma = _sigma_for(split, sigma)
    X, y = _eval_arrays(split, on)
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(seed_entropy(rng))
    acc = _prf_accuracies(split.X_train, split.y_train, X, y, n_draws, sigma, split.n_classes, (coupling, m, gen))
    est = _estimate(acc)
    return (est, acc) if return_samples else est


# ---------------------------------------------------------------------------
# Fig. 8 curves, Fig. 10 sigma search, Tables 2 and 3


@dataclass(frozen=True)
class CurveResult:
    """Accuracy vs number of features for one dataset (Fig. 8).

    Attributes
    ----------
    dataset : str
    d : int
        Input width (after one-hot encoding, and padding if requested).
    sigma : float
    m : ndarray of int
        Numbers of features (``m_multipliers * d``).
    mean, stderr : dict
        coupling -> ndarray (len(m),) of mean accuracy and standard error.
    n_draws : int
    exact : float
        Exact-kernel accuracy on the same split (the large-m limit).
    n_train, n_test : int
    """

    dataset: str
    d: int
    sigma: float
    m: np.ndarray
    mean: dict
    stderr: dict
    n_draws: int
    exact: float
    n_train: int
    n_test: int


def classification_curve(dataset, couplings=("iid", "orthogonal", "simplex"), m_multipliers=range(1, 11),
                         n_draws=50, rng=0, *, sigma=None, split_rng=0, uci_dir=None, pad_pow2=False):
    """Fig. 8: kernel-regression accuracy vs m / d for several couplings, with standard errors.

    Parameters
    ----------
    dataset : str, Dataset or Split
        A name loads the file from ``uci_dir`` and splits it with ``split_rng``.
    couplings : sequence of str
    m_multipliers : sequence of int >= 1
        m = multiplier * d (the paper: 1 to 10).
    n_draws : int >= 2
        Independent feature draws per (coupling, m).
    rng : None, int or numpy.random.Generator
        Seed of the feature draws; each (coupling, m) cell gets its own
        stream, so a cell's result does not depend on the other cells.
    sigma : float, optional
        Default: the paper's value (App. C.1).
    split_rng : int
        Seed of the shuffle (ignored for a Split).
    uci_dir : path, optional
    pad_pow2 : bool
        Zero-pad the inputs to the next power of two (App. B.2; d becomes p).

    Returns
    -------
    CurveResult
    """
    couplings = check_couplings(couplings)
    mults = [check_int(k, "m_multipliers", 1) for k in m_multipliers]
    if not mults:
        raise ValueError("m_multipliers must not be empty")
    n_draws = check_int(n_draws, "n_draws", 2)
    split = _as_split(dataset, uci_dir, split_rng, pad_pow2=pad_pow2)
    sigma = _sigma_for(split, sigma)
    entropy = seed_entropy(rng)
    ms = np.array([k * split.d for k in mults])
    mean = {c: np.empty(len(ms)) for c in couplings}
    stderr = {c: np.empty(len(ms)) for c in couplings}
    for c in couplings:
        for j, m in enumerate(ms):
            est = prf_accuracy(split, c, int(m), n_draws, sigma, child_rng(entropy, coupling_key(c), m))
            mean[c][j], stderr[c][j] = est.mean, est.stderr
    return CurveResult(split.name, split.d, sigma, ms, mean, stderr, n_draws, exact_accuracy(split, sigma),
                       split.X_train.shape[0], split.X_test.shape[0])


@dataclass(frozen=True)
class SigmaSearch:
    """Validation accuracy vs sigma (App. C.1, Fig. 10).

    Attributes
    ----------
    dataset : str
    sigmas : ndarray
    exact : ndarray
        Exact-kernel validation accuracy per sigma.
    mean, stderr : ndarray
        PRF validation accuracy per sigma (mean and standard error over draws).
    coupling : str
    m : int
    n_draws : int
    best_sigma : float
        Sigma maximising the mean PRF accuracy (the authors' choice).
    best_exact_sigma : float
        Sigma maximising the exact-kernel accuracy.
    """

    dataset: str
    sigmas: np.ndarray
    exact: np.ndarray
    mean: np.ndarray
    stderr: np.ndarray
    coupling: str
    m: int
    n_draws: int
    best_sigma: float
    best_exact_sigma: float


def sigma_search(dataset, sigmas=DEFAULT_SIGMAS, coupling="iid", m_multiplier=10, n_draws=10, rng=0, *,
                 split_rng=0, validation_fraction=0.05, uci_dir=None):
    """App. C.1: coarse search of sigma on a validation split (Fig. 10).

    The data are split into train / validation / test (the test part is not
    touched); for each sigma the exact-kernel and PRF classifiers are trained
    on the training part and scored on the validation part.  The same
    ``n_draws`` feature draws are used for every sigma (common random numbers:
    the curve is smooth in sigma).

    Parameters
    ----------
    dataset : str, Dataset or Split
        A Split must have a validation part.
    sigmas : sequence of float > 0
    coupling : str
        The paper tunes for IIDRFs (``'iid'``).
    m_multiplier : int
        m = m_multiplier * d (the paper: 10).
    n_draws : int >= 2
        Feature draws (the paper: 10).
    rng, split_rng, uci_dir
        As in :func:`classification_curve`.
    validation_fraction : float in (0, 1)
        Fraction of the records in the validation split (default 0.05, the
        test fraction).

    Returns
    -------
    SigmaSearch
    """
    sig = np.array([check_positive_float(s, "sigmas") for s in sigmas], dtype=float)
    if sig.size == 0:
        raise ValueError("sigmas must not be empty")
    coupling = check_coupling(coupling)
    k = check_int(m_multiplier, "m_multiplier", 1)
    n_draws = check_int(n_draws, "n_draws", 2)
    if not (isinstance(validation_fraction, float) and 0 < validation_fraction < 1):
        raise ValueError(f"validation_fraction must be a float in (0, 1), got {validation_fraction!r}")
    split = _as_split(dataset, uci_dir, split_rng, validation_fraction=validation_fraction)
    m = k * split.d
    W = mc.sample_weights(coupling, split.d, m, rng=child_rng(seed_entropy(rng), coupling_key(coupling), m),
                          n_draws=n_draws)
    exact = np.empty(sig.size)
    mean = np.empty(sig.size)
    se = np.empty(sig.size)
    for j, s in enumerate(sig):  # a loop over the sigma grid
        exact[j] = exact_accuracy(split, s, on="validation")
        acc = _prf_accuracies(split.X_train, split.y_train, split.X_val, split.y_val, W, s, split.n_classes)
        est = _estimate(acc)
        mean[j], se[j] = est.mean, est.stderr
    return SigmaSearch(split.name, sig, exact, mean, se, coupling, m, n_draws, float(sig[np.argmax(mean)]),
                       float(sig[np.argmax(exact)]))


@dataclass
class AccuracyTable:
    """Accuracies of several couplings on several datasets (Tables 2 and 3).

    Attributes
    ----------
    couplings : tuple of str
    rows : dict
        dataset -> {coupling: Estimate, 'exact': float, 'd': int, 'm': int, 'sigma': float}.
    missing : list of str
        Datasets whose file was absent (not run).
    n_draws : int
    seconds : float
        Wall time of the whole table.
    """

    couplings: tuple
    rows: dict
    missing: list
    n_draws: int
    seconds: float = 0.0
    settings: dict = field(default_factory=dict)

    def format(self, paper=None):
        """Plain-text table (mean +- stderr); ``paper``: {dataset: {coupling: (mean, se)}} shown alongside."""
        head = ["dataset", "d", "m", "exact"] + list(self.couplings)
        lines = [" | ".join(head)]
        for name, row in self.rows.items():
            cells = [name, str(row["d"]), str(row["m"]), f"{row['exact']:.4f}"]
            for c in self.couplings:
                e = row[c]
                cell = f"{e.mean:.4f}+-{e.stderr:.4f}"
                sd = row.get("split_sd", {}).get(c, float("nan"))
                if np.isfinite(sd):
                    cell += f" [split sd {sd:.3f}]"
                if paper and name in paper and c in paper[name]:
                    pm, ps = paper[name][c]
                    cell += f" (paper {pm:.4f}+-{ps:.4f})"
                cells.append(cell)
            lines.append(" | ".join(cells))
        if self.missing:
            lines.append(f"missing (not run): {', '.join(self.missing)}")
        lines.append(f"n_draws = {self.n_draws}, {self.seconds:.1f} s")
        return "\n".join(lines)


def accuracy_table(couplings=TABLE2_COUPLINGS, m_multiplier=1, n_draws=100, rng=0, *, uci_dir=None, datasets=None,
                   pad_pow2=False, split_rng=0, sigmas=None):
    """Tables 2 and 3: accuracy of each coupling on each dataset at m = m_multiplier * d.

    Parameters
    ----------
    couplings : sequence of str
        Table 2: :data:`TABLE2_COUPLINGS` (m = d); Table 3:
        :data:`TABLE3_COUPLINGS` with ``pad_pow2=True`` (every column then
        sees the same zero-padded data of width p and m = p, App. B.2).
    m_multiplier : int
    n_draws : int >= 2
        Feature draws per dataset, coupling and split.
    rng : seed of the feature draws (one stream per dataset, coupling and split)
    uci_dir : path, optional
    datasets : sequence of str, optional
        Default: all eight; absent files are skipped and listed in ``missing``.
    pad_pow2 : bool
    split_rng : int or sequence of int
        Seed(s) of the shuffle.  With several splits, a cell's mean is the
        average of the per-split means and its standard error is that of this
        average at the given splits (draw noise only), so that couplings,
        which share the splits, compare correctly; ``row['split_sd']`` holds
        the standard deviation of the per-split means (split-to-split spread).
    sigmas : dict, optional
        dataset -> sigma (default the paper's).

    Returns
    -------
    AccuracyTable
        ``rows[name]`` has, per coupling, an :class:`montecarlo.Estimate`;
        ``'exact'`` (mean over splits), ``'d'``, ``'m'``, ``'sigma'``,
        ``'per_split'`` ({coupling: [Estimate per split]}) and ``'split_sd'``.
    """
    couplings = check_couplings(couplings)
    k = check_int(m_multiplier, "m_multiplier", 1)
    n_draws = check_int(n_draws, "n_draws", 2)
    splits = [split_rng] if not isinstance(split_rng, (list, tuple, range)) else list(split_rng)
    splits = [check_int(s, "split_rng", 0) for s in splits]
    if not splits:
        raise ValueError("split_rng must be an int or a non-empty sequence of ints")
    entropy = seed_entropy(rng)
    t0 = time.perf_counter()
    data, missing = uci.load_all(uci_dir, datasets)
    rows = {}
    for name, ds in data.items():
        per = {c: [] for c in couplings}
        exact = []
        for si, seed in enumerate(splits):
            split = ds.split(seed)
            if pad_pow2:
                split = split.padded()
            sigma = _sigma_for(split, None if sigmas is None else sigmas.get(name))
            m = k * split.d
            exact.append(exact_accuracy(split, sigma))
            for c in couplings:
                per[c].append(prf_accuracy(split, c, m, n_draws, sigma,
                                           child_rng(entropy, uci.DATASETS.index(name), coupling_key(c), seed)))
        row = {"d": split.d, "m": m, "sigma": sigma, "exact": float(np.mean(exact)),
               "n_train": split.X_train.shape[0], "n_test": split.X_test.shape[0], "per_split": per,
               "split_sd": {}}
        for c in couplings:
            means = np.array([e.mean for e in per[c]])
            ses = np.array([e.stderr for e in per[c]])
            row[c] = mc.Estimate(float(means.mean()), float(np.sqrt(np.sum(ses ** 2)) / len(splits)),
                                 n_draws * len(splits))
            row["split_sd"][c] = float(means.std(ddof=1)) if len(splits) > 1 else float("nan")
        rows[name] = row
    return AccuracyTable(couplings, rows, missing, n_draws, time.perf_counter() - t0,
                         {"m_multiplier": k, "pad_pow2": pad_pow2, "split_rng": splits, "rng": rng})


def paper_table(which):
    """The paper's numbers as {dataset: {coupling: (mean, se)}} for ``which`` in {2, 3}."""
    if which == 2:
        return {n: {"simplex": a, "simplex_plus": b} for n, (a, b) in PAPER_TABLE2.items()}
    if which == 3:
        return {n: dict(v) for n, v in PAPER_TABLE3.items()}
    raise ValueError(f"which must be 2 or 3, got {which!r}")


def add_table_arguments(p):
    """Command-line options of the accuracy table (used by ``python -m montecarlo.experiments table``)."""
    p.add_argument("--table", type=int, choices=(2, 3), default=2,
                   help="2: exact couplings at m = d; 3: fast variants on zero-padded data (App. B.2)")
    p.add_argument("--uci-dir", default=None, help=f"directory of the UCI files (default ${uci.ENV_VAR})")
    p.add_argument("--n-draws", "--n-reps", dest="n_draws", type=int, default=100,
                   help="random-feature draws per dataset and coupling (--n-reps: old spelling)")
    p.add_argument("--m-multiplier", type=int, default=1)
    p.add_argument("--couplings", nargs="+", default=None)
    p.add_argument("--datasets", nargs="+", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--split-seeds", type=int, nargs="+", default=[0],
                   help="one or more shuffle seeds (several: means over splits)")


def run_table(args):
    couplings = args.couplings or (TABLE2_COUPLINGS if args.table == 2 else TABLE3_COUPLINGS)
    table = accuracy_table(couplings, args.m_multiplier, args.n_draws, args.seed, uci_dir=args.uci_dir,
                           datasets=args.datasets, pad_pow2=args.table == 3, split_rng=args.split_seeds)
    print(table.format(paper_table(args.table)))
    return 0
