r"""The feature-kind registry: one record per feature map, hooks registered by each layer.

The hooks, their conventions, the MSE every kind shares, and the steps of adding a kind: :ref:`guide-feature-kinds-hooks`
(``docs/guide/feature_kinds.rst``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from .registry import load_layer
from .validation import ArgumentTypeError, describe

__all__ = [
    "HOOKS",
    "KERNELS",
    "RECORDS",
    "FeatureKind",
    "MissingKindHookError",
    "UnknownKindError",
    "check_kernel",
    "check_kind",
    "get",
    "has_hook",
    "hook",
    "kernel_c",
    "names",
    "register",
]

#: The target kernels (Sec. 1): Gaussian :math:`e^{-\|x-y\|^2/2}` and softmax :math:`e^{x^\top y}`.
KERNELS = ("gaussian", "softmax")

#: Every hook name and the layer that provides it.
HOOKS = {
    "variance": "theory",
    "mean_square": "theory",
    "pair_excess": "theory",
    "pair_couplings": "theory",
    "small_v": "theory",
    "parameters": "theory",
    "log_features": "montecarlo",
    "float_parameters": "montecarlo",
    "features": "montecarlo",
    "statistic": "montecarlo",
    "linear_log_features": "montecarlo",
    "data_parameters": "montecarlo",
}


class UnknownKindError(ValueError):
    """A feature-kind name with no record in the registry."""


class MissingKindHookError(ValueError):
    """A feature kind that exists but lacks the requested closed form or map."""


@dataclass(frozen=True)
class FeatureKind:
    r"""One feature map of the random projections.

    Attributes
    ----------
    name : str
        The one spelling used everywhere (``"prf"``).
    label : str
        Short label for plots and tables (``"PRFs"``).
    description : str
        One line: the map.
    positive : bool
        Features are positive (computed as exp of log-features, stabilised in
        log space; hook ``log_features``); else hook ``features``.
    width : int
        Features per direction (output width ``width * m``).
    kernels : tuple of str
        Target kernels it estimates without bias under exact couplings.
    argument : {'v', 'z'}
        The pair statistic the MSE depends on: :math:`v = \|x+y\|` or
        :math:`z = \|x-y\|`.
    statistics : tuple of str
        Per-direction statistics the map needs: ``"wx"`` (:math:`w_i^\top x`)
        and, for some kinds, ``"w_sq"`` (:math:`\|w_i\|^2`).
    parameters : tuple of str
        Names of extra keyword parameters of the kind (none for the paper's kinds).
    closed_forms, maps : tuple of str
        The theory and montecarlo hooks this kind has.
    modules : tuple of str
        Modules that register its hooks (imported on the first lookup of a hook
        of their layer; montecarlo modules by montecarlo's own loader).
    reference : str
        Where the map comes from.
    """

    name: str
    label: str
    description: str
    positive: bool
    width: int
    kernels: tuple
    argument: str
    statistics: tuple
    closed_forms: tuple
    maps: tuple
    modules: tuple = ()
    parameters: tuple = ()
    reference: str = ""
    style: dict = field(default_factory=dict, compare=False)

    def has(self, hook_name):
        """Whether the record declares ``hook_name``."""
        return hook_name in self.closed_forms or hook_name in self.maps

    def needs_w_sq(self):
        """Whether the map needs the squared norms of the directions."""
        return "w_sq" in self.statistics


_THEORY = ("variance", "mean_square", "pair_excess", "pair_couplings", "small_v")

#: The records, in the order used by every listing, table and legend.
RECORDS = (
    FeatureKind(
        name="prf", label="PRFs",
        description="positive random features exp(w.x - c|x|^2)/sqrt(m) (eq. def_prf)",
        positive=True, width=1, kernels=("gaussian", "softmax"), argument="v", statistics=("wx",),
        closed_forms=_THEORY, maps=("log_features", "statistic", "linear_log_features"),
        modules=("theory.mse", "montecarlo.features"),
        reference="Sec. 1, eq. def_prf (Choromanski et al. 2021)",
        style={"linestyle": "-"}),
    FeatureKind(
        name="rff", label="RFFs",
        description="random Fourier features (sin w.x, cos w.x)/sqrt(m) (eq. rffdef2)",
        positive=False, width=2, kernels=("gaussian",), argument="z", statistics=("wx",),
        closed_forms=_THEORY, maps=("features", "statistic"),
        modules=("theory.mse", "montecarlo.features"),
        reference="Sec. 1, eq. rffdef2 (Rahimi & Recht 2007)",
        style={"linestyle": ":"}),
    FeatureKind(
        name="hyperbolic", label="hyperbolic PRFs",
        description="exp(-c|x|^2)/sqrt(2m) [exp(w.x), exp(-w.x)] (FAVOR+ hyperbolic features)",
        positive=True, width=2, kernels=("gaussian", "softmax"), argument="v", statistics=("wx",),
        closed_forms=_THEORY, maps=("log_features", "statistic", "linear_log_features"),
        modules=("theory.hyperbolic", "montecarlo.hyperbolic"),
        reference="Choromanski et al., Rethinking Attention with Performers (ICLR 2021), Lemma 1",
        style={"linestyle": "--"}),
    FeatureKind(
        name="oprf", label="OPRFs",
        description="optimised PRFs (1-4A)^{d/4} exp(A|w|^2 + sqrt(1-4A) w.x - c|x|^2)/sqrt(m), A < 1/8 (FAVOR++)",
        positive=True, width=1, kernels=("gaussian", "softmax"), argument="v", statistics=("wx", "w_sq"),
        closed_forms=_THEORY + ("parameters",),
        maps=("log_features", "statistic", "float_parameters", "linear_log_features", "data_parameters"),
        modules=("theory.oprf", "montecarlo.oprf"), parameters=("A",),
        reference="Likhosherstov, Choromanski, Dubey, Liu, Sarlos, Weller, Chefs' Random Tables (NeurIPS 2022)",
        style={"linestyle": "-."}),
)

_BY_NAME = {rec.name: rec for rec in RECORDS}
_HOOKS: dict = {}
_LOCK = threading.RLock()
_IMPORTED: set = set()


def names(*, has=(), positive=None, kernel=None):
    """Names of the kinds (registry order), optionally only those with every hook in ``has``,
    of the given positivity, or estimating ``kernel``.

    >>> names(positive=True)
    ('prf', 'hyperbolic', 'oprf')
    """
    has = (has,) if isinstance(has, str) else tuple(has)
    for h in has:
        _check_hook_name(h)
    return tuple(rec.name for rec in RECORDS
                 if all(rec.has(h) for h in has) and (positive is None or rec.positive == positive)
                 and (kernel is None or kernel in rec.kernels))


def get(name, argname="kind"):
    """The :class:`FeatureKind` record of ``name``; :class:`UnknownKindError` if there is none."""
    if not isinstance(name, str):
        raise ArgumentTypeError(f"{argname} must be a feature-kind name ({_choices(names())}), got {describe(name)}")
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UnknownKindError(f"{argname} must be one of {_choices(names())}, got {describe(name)}") from None


def check_kind(kind, name="kind", *, has=(), positive=None, kernel=None):
    """Return ``kind`` if it names a feature kind with every hook in ``has`` (and the positivity /
    target kernel asked for); else raise a ValueError naming the kinds that qualify."""
    rec = get(kind, name)
    has = (has,) if isinstance(has, str) else tuple(has)
    ok = names(has=has, positive=positive, kernel=kernel)
    if kind not in ok:
        why = ("a positive kind" if positive else "a kind that is not positive") if positive is not None and \
            rec.positive != positive else (f"a kind estimating the {kernel} kernel" if kernel is not None and
                                           kernel not in rec.kernels else "a kind with " + ", ".join(
                                               repr(h) for h in has if not rec.has(h)))
        raise MissingKindHookError(f"{name} must be one of {_choices(ok)} here ({why} is needed), "
                                   f"got {describe(kind)}")
    return kind


def check_kernel(kernel, name="kernel"):
    """``kernel`` if it is one of :data:`KERNELS` (the target kernels); else a ValueError (TypeError for a
    non-string) naming them.  RFFs are a feature kind (``kind='rff'``), not a kernel."""
    if not isinstance(kernel, str) or kernel not in KERNELS:
        err = ValueError if isinstance(kernel, str) else ArgumentTypeError
        extra = " (RFFs are asked for with kind='rff'; kernel names the target kernel)" if kernel == "rff" else ""
        raise err(f"{name} must be one of {_choices(KERNELS)}, got {describe(kernel)}{extra}")
    return kernel


def kernel_c(kind, kernel):
    """c in the positive kinds' :math:`e^{-c\\|x\\|^2}`: 1 (Gaussian kernel) or 1/2 (softmax); the kernel is
    checked against the kind's ``kernels``."""
    rec = get(kind)
    check_kernel(kernel)
    if kernel not in rec.kernels:
        raise ValueError(f"kernel must be one of {_choices(rec.kernels)} for kind={kind!r}, got {describe(kernel)}")
    return 1.0 if kernel == "gaussian" else 0.5


def register(kind, hook_name, func=None):
    """Attach ``func`` as hook ``hook_name`` of ``kind`` (usable as a decorator)."""
    if func is None:
        return lambda f: register(kind, hook_name, f)
    rec = get(kind)
    _check_hook_name(hook_name)
    if not rec.has(hook_name):
        raise MissingKindHookError(f"cannot register {hook_name!r} for kind {kind!r}: its record does not declare "
                                   "it (add it to the record's closed_forms or maps)")
    with _LOCK:
        old = _HOOKS.get((kind, hook_name))
        if old is not None and old is not func and _qualname(old) != _qualname(func):
            raise ValueError(f"hook {hook_name!r} of kind {kind!r} is already registered ({_qualname(old)})")
        _HOOKS[(kind, hook_name)] = func
    return func


def has_hook(kind, hook_name):
    """Whether ``kind`` declares ``hook_name`` (no import, no lookup)."""
    return get(kind).has(_check_hook_name(hook_name))


def hook(kind, hook_name, argname="kind"):
    """The function registered as ``hook_name`` of ``kind``.

    Raises :class:`UnknownKindError` for an unknown name and
    :class:`MissingKindHookError` when the kind has no such hook.  A declared
    hook not yet registered is imported from the record's ``modules`` of the
    hook's layer (theory modules here; other layers through the loader they
    set with :func:`theory.registry.set_layer_loader`).
    """
    rec = get(kind, argname)
    _check_hook_name(hook_name)
    if not rec.has(hook_name):
        ok = names(has=(hook_name,))
        raise MissingKindHookError(f"{argname} must be one of {_choices(ok)} here ({kind!r} has no "
                                   f"{hook_name!r}), got {describe(kind)}")
    func = _HOOKS.get((kind, hook_name))
    if func is None:
        _import_layer(rec, HOOKS[hook_name])
        func = _HOOKS.get((kind, hook_name))
    if func is None:
        raise MissingKindHookError(f"kind {kind!r} declares {hook_name!r} but no module registered it: import the "
                                   f"{HOOKS[hook_name]} package (modules named by the record: {rec.modules or 'none'})")
    return func


def _import_layer(rec, layer):
    load_layer(rec.modules, layer, _IMPORTED)


def _check_hook_name(hook_name):
    if hook_name not in HOOKS:
        raise ValueError(f"hook must be one of {_choices(tuple(HOOKS))}, got {describe(hook_name)}")
    return hook_name


def _choices(items):
    return ", ".join(repr(c) for c in items)


def _qualname(func):
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"
