"""Array-backend plumbing: namespaces, devices, dtypes and random generators.

Every sampler and estimator of :mod:`montecarlo` runs on an array namespace
obtained through ``array_api_compat`` (numpy by default; torch and cupy when
installed) and draws its random numbers from a :class:`Random` bound to one
backend, one device and one floating dtype, so that nothing in the hot path
moves data between devices.

Seeding
-------
``rng`` is ``None`` (fresh OS entropy), an ``int`` seed or a
:class:`numpy.random.Generator`.  numpy draws directly from that generator.
torch and cupy get a native generator on the target device seeded with one
63-bit integer drawn from ``numpy.random.default_rng(rng)``; passing the same
int therefore reproduces a run exactly on the same backend and device, and a
numpy ``Generator`` passed to successive calls advances deterministically.
A ``torch.Generator`` (torch backend) or a ``cupy.random.Generator`` (cupy
backend) may also be passed and is used as is.  Different backends (and CPU
vs CUDA torch generators) give different streams: the results agree in
distribution, not bit for bit.
"""

from __future__ import annotations

import math
import numbers

import array_api_compat
import numpy as np

from theory.validation import check_rng as _check_rng

_NAMES = ("numpy", "torch", "cupy")


def namespace(xp=None):
    """Return the array-API-compatible namespace for ``xp``.

    Parameters
    ----------
    xp : None, str or module
        ``None`` or ``"numpy"`` (default), ``"torch"``, ``"cupy"``, or one of
        the modules ``numpy``, ``torch``, ``cupy`` (or their
        ``array_api_compat`` wrappers).

    Returns
    -------
    module
        The ``array_api_compat`` namespace of that backend.
    """
    if xp is None:
        xp = "numpy"
    if isinstance(xp, str):
        if xp not in _NAMES:
            raise ValueError(f"xp must be one of 'numpy', 'torch', 'cupy' or such a module, got {xp!r}")
        try:
            module = __import__(xp)
        except ImportError as exc:
            raise ValueError(f"xp={xp!r} requested but {xp} is not installed") from exc
        xp = module
    asarray = getattr(xp, "asarray", None)
    if asarray is None:
        raise ValueError(f"xp must be one of 'numpy', 'torch', 'cupy' or such a module, got {xp!r}")
    try:
        return array_api_compat.array_namespace(asarray(0.0))
    except TypeError as exc:
        raise ValueError(f"xp={xp!r} is not an array namespace supported by array_api_compat") from exc


def backend_name(xp):
    """'numpy', 'torch' or 'cupy' for a compat namespace."""
    if array_api_compat.is_numpy_namespace(xp):
        return "numpy"
    if array_api_compat.is_torch_namespace(xp):
        return "torch"
    if array_api_compat.is_cupy_namespace(xp):
        return "cupy"
    raise ValueError(f"unsupported array namespace {xp!r}")


def resolve_device(xp, device):
    """Validate ``device`` for the backend and return the native device object."""
    name = backend_name(xp)
    if name == "numpy":
        if device not in (None, "cpu"):
            raise ValueError(f"device must be None or 'cpu' for the numpy backend, got {device!r}")
        return "cpu"
    if name == "torch":
        import torch

        try:
            dev = torch.device("cpu" if device is None else device)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(f"device must be a torch device ('cpu', 'cuda', 'cuda:0', ...), got {device!r}") from exc
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device={device!r} requested but CUDA is not available to torch")
        return dev
    import cupy

    if device is None:
        return cupy.cuda.Device()
    if isinstance(device, cupy.cuda.Device):
        return device
    if isinstance(device, numbers.Integral):
        return cupy.cuda.Device(int(device))
    raise ValueError(f"device must be None, an int or a cupy.cuda.Device for the cupy backend, got {device!r}")


def device_kind(xp, device):
    """'cpu' or 'cuda' (the key used to choose per-device algorithms)."""
    name = backend_name(xp)
    if name == "numpy":
        return "cpu"
    if name == "torch":
        return device.type
    return "cuda"


def resolve_dtype(xp, dtype):
    """Validate a real floating dtype (``None`` means float64)."""
    if dtype is None:
        return xp.float64
    if isinstance(dtype, str):
        if dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
        return getattr(xp, dtype)
    if dtype in (xp.float32, xp.float64):
        return dtype
    raise ValueError(f"dtype must be float32 or float64 of the chosen backend, got {dtype!r}")


def _seed_from(rng):
    """A 63-bit seed drawn from ``numpy.random.default_rng(rng)``."""
    return int(np.random.default_rng(rng).integers(0, 2**63 - 1))


def check_rng(rng, name="rng"):
    """Validate ``rng``: None, an int >= 0, a numpy Generator or SeedSequence, or a native generator.

    The shared rule of :func:`theory.validation.check_rng` (a legacy
    ``numpy.random.RandomState`` is refused), plus ``torch.Generator`` and
    ``cupy.random.Generator`` when those libraries are loaded.
    """
    import sys

    extra = []
    torch = sys.modules.get("torch")
    if torch is not None:
        extra.append(torch.Generator)
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        extra.append(cupy.random.Generator)
    return _check_rng(rng, name, tuple(extra))


class Random:
    """Random numbers on one backend, device and dtype.

    Parameters
    ----------
    rng : None, int, numpy.random.Generator (or a native torch/cupy generator)
    xp : compat namespace
    device : native device (from :func:`resolve_device`)
    dtype : floating dtype of ``xp``

    Notes
    -----
    ``chi`` uses numpy's ``chisquare`` on numpy; on torch and cupy it uses the
    Marsaglia-Tsang rejection sampler for Gamma(df/2) (exact, acceptance
    > 0.95 per try for shape >= 1, with the boost
    :math:`\\Gamma(a) = \\Gamma(a+1)U^{1/a}` for shape < 1), so that norms are
    drawn on the device with the backend's own generator.
    """

    def __init__(self, rng, xp, device, dtype):
        self.xp = xp
        self.device = device
        self.dtype = dtype
        self.backend = backend_name(xp)
        rng = check_rng(rng)
        if self.backend == "numpy":
            if not (rng is None or isinstance(rng, (int, np.random.Generator, np.random.SeedSequence))):
                raise ValueError(f"rng must be None, an int >= 0, a numpy.random.Generator or SeedSequence for the "
                                 f"numpy backend, got {type(rng).__module__}.{type(rng).__qualname__}")
            self.gen = np.random.default_rng(rng)
        elif self.backend == "torch":
            import torch

            if isinstance(rng, torch.Generator):
                if rng.device.type != self.device.type:
                    raise ValueError(f"rng is a torch.Generator on {rng.device}, but device is {self.device}")
                self.gen = rng
            else:
                self.gen = torch.Generator(device=self.device)
                self.gen.manual_seed(_seed_from(rng))
        else:
            import cupy

            with self.device:
                if isinstance(rng, cupy.random.Generator):
                    self.gen = rng
                else:
                    self.gen = cupy.random.default_rng(_seed_from(rng))

    # -- primitive draws -------------------------------------------------
    def normal(self, shape):
        """Standard normal array of ``shape``."""
        shape = tuple(int(s) for s in shape)
        if self.backend == "numpy":
            return self.gen.standard_normal(shape, dtype=self.dtype)
        if self.backend == "torch":
            import torch

            return torch.randn(shape, generator=self.gen, device=self.device, dtype=self.dtype)
        with self.device:
            return self.gen.standard_normal(shape, dtype=self.dtype)

    def uniform(self, shape):
        """Uniform [0, 1) array of ``shape``."""
        shape = tuple(int(s) for s in shape)
        if self.backend == "numpy":
            return self.gen.random(shape, dtype=self.dtype)
        if self.backend == "torch":
            import torch

            return torch.rand(shape, generator=self.gen, device=self.device, dtype=self.dtype)
        with self.device:
            return self.gen.random(shape, dtype=self.dtype)

    def rademacher(self, shape):
        """Independent +-1 entries (as floats) of ``shape``."""
        u = self.uniform(shape)
        return self.xp.where(u < 0.5, self.xp.asarray(-1.0, dtype=self.dtype, device=self.device),
                             self.xp.asarray(1.0, dtype=self.dtype, device=self.device))

    def chi(self, df, shape, method=None):
        """Chi-distributed array with ``df`` degrees of freedom (norms of N(0, I_df)).

        ``method`` is ``None`` (backend default), ``"numpy"`` or
        ``"marsaglia_tsang"`` (the device sampler; selectable on numpy for tests).
        """
        shape = tuple(int(s) for s in shape)
        if method is None:
            method = "numpy" if self.backend == "numpy" else "marsaglia_tsang"
        if method == "numpy":
            if self.backend != "numpy":
                raise ValueError("method='numpy' is only available on the numpy backend")
            x = self.gen.chisquare(df, shape)
            return np.sqrt(x, out=x).astype(self.dtype, copy=False)
        if method != "marsaglia_tsang":
            raise ValueError(f"method must be None, 'numpy' or 'marsaglia_tsang', got {method!r}")
        return self.xp.sqrt(2.0 * self.gamma(df / 2.0, shape))

    def gamma(self, shape_param, shape):
        """Gamma(shape_param, 1) variates by Marsaglia-Tsang (2000), vectorised."""
        xp = self.xp
        a = float(shape_param)
        if not a > 0:
            raise ValueError(f"gamma shape must be > 0, got {a}")
        n = math.prod(shape)
        if a < 1.0:
            g = self.gamma(a + 1.0, shape)
            return g * self.uniform(shape) ** (1.0 / a)
        dd = a - 1.0 / 3.0
        c = 1.0 / math.sqrt(9.0 * dd)
        out = xp.zeros((n,), dtype=self.dtype, device=self.device)
        todo = None  # indices still to fill (None: all)
        while True:
            k = n if todo is None else int(todo.shape[0])
            if k == 0:
                break
            x = self.normal((k,))
            u = self.uniform((k,))
            v = (1.0 + c * x) ** 3
            ok = v > 0
            vs = xp.where(ok, v, xp.ones_like(v))
            accept = ok & (xp.log(1.0 - u) < 0.5 * x * x + dd - dd * vs + dd * xp.log(vs))
            val = dd * vs
            if todo is None:
                out = xp.where(accept, val, out)
                todo = xp.nonzero(~accept)[0]
            else:
                acc_idx = todo[accept]
                out[acc_idx] = val[accept]
                todo = todo[~accept]
        return xp.reshape(out, shape)


def exp_inplace(z, xp):
    """``exp`` overwriting ``z`` (numpy, cupy, torch), to save an allocation in hot loops."""
    name = backend_name(xp)
    if name == "torch":
        return z.exp_()
    return __import__(name).exp(z, out=z)


def to_numpy(a):
    """Copy an array of any backend to a numpy array (used only at the end of a computation)."""
    if isinstance(a, np.ndarray):
        return a
    if hasattr(a, "detach"):
        return a.detach().cpu().numpy()
    if hasattr(a, "get"):
        return a.get()
    return np.asarray(a)
