"""The random features of :mod:`montecarlo.nn`: projections drawn as torch tensors, the dtypes and input
range of the computations, and the kinds' log-features of queries and keys."""

from __future__ import annotations

import inspect
import math

import array_api_compat
import torch

import montecarlo as mc
from montecarlo.nn._ops import _call, _SquaredNorm, _SquaredNormJvp
from montecarlo.nn._streams import check_generator
from theory import feature_kinds as kinds
from theory.validation import describe


# (STORAGE_DTYPES, INPUT_DTYPES: documented in montecarlo.nn)
STORAGE_DTYPES = (torch.float32, torch.float64)
INPUT_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
#: The array-API namespace of torch tensors handed to the kinds' hooks (looked up once, not per call, so that
#: torch.compile traces no lookup).
_XP = array_api_compat.array_namespace(torch.empty(0))


def check_device(device, name="device"):
    """A ``torch.device`` (or None) that exists here: ValueError naming ``name`` for a malformed string or a
    CUDA device when CUDA is not available."""
    if device is None:
        return None
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"{name} must be None, a string such as 'cpu' or 'cuda:0', or a torch.device, "
                        f"got {describe(device)}")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise ValueError(f"{name} must name a torch device such as 'cpu' or 'cuda:0', got {device!r}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{name}={str(device)!r} asks for CUDA, but CUDA is not available here "
                             "(torch.cuda.is_available() is False)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"{name}={str(device)!r}: only {torch.cuda.device_count()} CUDA device(s) here")
    return dev


def _storage_dtype(dtype, name="dtype"):
    if dtype not in INPUT_DTYPES:
        raise ValueError(f"{name} must be one of torch.float32, torch.float64, torch.bfloat16, torch.float16, "
                         f"got {dtype!r}")
    return dtype if dtype in STORAGE_DTYPES else torch.float32


def _dtype_name(dtype):
    """``torch.float32`` -> ``'float32'``."""
    return str(dtype).replace("torch.", "")


def input_range(dtype, causal):
    r"""The largest magnitude of a log-feature (about :math:`s\|x\|^2/2` for a query or key x) for which
    attention computed in ``dtype`` (float32 or float64) is exact to rounding (module docs, "Range of the
    inputs"): a quarter of the dtype's largest number bidirectionally (the sum of a query's and a key's
    log-features stays finite), :math:`\log(\text{largest})/(8\varepsilon)` causally (the exponents that
    exceed 0 by rounding, about :math:`\varepsilon/2` times the log-features, stay below a quarter of the
    exponential's range)."""
    info = torch.finfo(dtype)
    if causal:
        return math.log(info.max) / (8 * info.eps)
    return info.max / 4


def oprf_a(rho):
    r"""FAVOR++'s variance-minimising A of optimised PRFs for a mean :math:`\rho = \overline{\|x+y\|^2}/d`.

    :math:`A^* = \big(1 - 2\rho - \sqrt{(2\rho+1)^2 + 8\rho}\big)/16` (Likhosherstov et al. 2022):
    the root of :math:`\partial_A` of the log second moment
    :math:`d\log(1-4A) - \tfrac d2\log(1-8A) + \|x+y\|^2/(1-8A)` averaged over the pairs;
    :math:`A^* \le 0`, 0 at :math:`\rho = 0` (plain PRFs).  :func:`montecarlo.oprf.optimal_a` (the formula's
    home, also the oprf record's ``data_parameters`` rule): floats and numpy arrays checked, torch tensors
    elementwise on their device (no synchronisation).
    """
    from montecarlo.oprf import optimal_a

    return optimal_a(rho)


def draw_projections(coupling, d, m, *, generator=None, rng=None, device=None, dtype=torch.float32):
    r"""(m, d) projections of a coupling as a torch tensor, drawn from a torch or numpy generator.

    Parameters
    ----------
    coupling : str
        Any coupling of :data:`montecarlo.COUPLINGS`.
    d, m : int
        Dimensionality and number of projections.
    generator : torch.Generator, optional
        Drawn from on the generator's own device (then moved to ``device``).
    rng : None, int or numpy.random.Generator
        Used when ``generator`` is None (torch's generator is seeded from it).
    device : torch device, optional
        Where the result lives (default: the generator's device, else CPU).
    dtype : torch.float32 or torch.float64
        dtype of the result.

    Returns
    -------
    torch.Tensor of shape (m, d)
        Rows exactly :math:`\mathcal N(0, I_d)` for the exact couplings.
    """
    check_generator(generator)
    device = check_device(device)
    if generator is not None:
        w = mc.sample_weights(coupling, d, m, rng=generator, xp="torch", device=generator.device, dtype=dtype)
        return w if device is None else w.to(device)
    if device is not None and device.type == "meta":  # (no generator there: drawn on the CPU, shape kept)
        return mc.sample_weights(coupling, d, m, rng=rng, xp="torch", device="cpu", dtype=dtype).to(device)
    return mc.sample_weights(coupling, d, m, rng=rng, xp="torch", device=device, dtype=dtype)


def hook_extras(log_map, d):
    """Keywords a log-feature hook takes beyond the common contract: ``d`` for maps whose constant depends on
    it (oprf's :math:`(1-4A)^{d/4}`); looked up once per hook."""
    takes = _TAKES_D.get(log_map)
    if takes is None:
        takes = _TAKES_D[log_map] = "d" in inspect.signature(log_map).parameters
    return {"d": d} if takes else {}


_TAKES_D: dict = {}
#: Kinds whose log-feature hook refused tensor parameters (then one float per forward: a synchronisation).
_FLOAT_PARAMETERS_ONLY: set = set()


def _log_features(x, w, terms, fmap, scale, params, log=True, sq_map=None):
    r"""Log-features (..., L, width m) of :math:`x' = s^{1/2}x` through the kind's feature map ``fmap`` (a
    :class:`montecarlo.FeatureMap` of the softmax kernel, or the kind's record), with the directions' ``terms``
    (:meth:`~montecarlo.FeatureMap.direction_terms`, or None); with ``log=False`` the features of a kind not
    computed in log space, :math:`\|x'\|^2` first passed through ``sq_map`` (the attention's offset of the
    prefactor)."""
    if not isinstance(fmap, mc.FeatureMap):
        fmap = mc.FeatureMap(fmap.name, kernel="softmax", chosen="data")
    m, d = w.shape
    proj = x @ (w * math.sqrt(scale)).transpose(0, 1)  # w.(s^1/2 x), a fresh tensor the hook may overwrite
    sq = _call(_SquaredNorm, _SquaredNormJvp, x) * scale
    if sq_map is not None:
        sq = sq_map(sq)
    return fmap.apply(proj, sq, m=m, d=d, log=log, params=params, xp=_XP, **(terms or {}))
