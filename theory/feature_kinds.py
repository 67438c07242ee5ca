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
    "load",
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
    "prepare": "montecarlo",
    "batch_parameters": "montecarlo",
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
    log_space : bool
        The features are positive and computed as the exp of log-features (hook
        ``log_features``, stabilised in log space; the statistic hook returns
        :math:`\log b_i`); else the features themselves (hook ``features``, the
        statistic :math:`b_i`).  :attr:`positive` is its old name.
    width : int
        Features per direction (output width ``width * m``).
    prefactors : tuple of (str, float)
        The target kernels it estimates without bias under exact couplings, each with
        its :meth:`prefactor_exponent` (:attr:`kernels` lists them).
    argument : {'v', 'z'}
        The pair vector the statistic :math:`b_i` and the MSE depend on: :math:`v = x+y`
        or :math:`z = x-y` (:math:`\mathbb E b = e^{v^2/2}`, respectively
        :math:`e^{-z^2/2}`).
    statistics : tuple of str
        Per-direction statistics the map needs: ``"wx"`` (:math:`w_i^\top x`)
        and, for some kinds, ``"w_sq"`` (:math:`\|w_i\|^2`).
    parameters : tuple of str
        Names of extra keyword parameters of the kind (none for the paper's kinds).
    optional_parameters : tuple of str
        Those of ``parameters`` that may be left out (None), with a default the kind's hooks resolve.
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
    log_space: bool
    width: int
    prefactors: tuple
    argument: str
    statistics: tuple
    closed_forms: tuple
    maps: tuple
    modules: tuple = ()
    parameters: tuple = ()
    optional_parameters: tuple = ()
    reference: str = ""
    style: dict = field(default_factory=dict, compare=False)

    @property
    def kernels(self):
        """The target kernels it estimates (those of ``prefactors``)."""
        return tuple(k for k, _ in self.prefactors)

    @property
    def positive(self):
        """Old name of ``log_space`` (kept for callers outside the library)."""
        return self.log_space

    def prefactor_exponent(self, kernel):
        r"""The exponent a of the kernel prefactor: the features carry :math:`e^{a\|x\|^2}` and
        :math:`\hat K(x, y) = e^{a(\|x\|^2+\|y\|^2)}\frac1m\sum_i b_i` (the MSE carries :math:`P^2 =
        e^{2a(\|x\|^2+\|y\|^2)}`).  -1 (Gaussian) or -1/2 (softmax) for the positive kinds, 0 for RFFs, +1/2
        for trigonometric softmax features.  ValueError (naming the kind, the kernel and the kernels it
        estimates) for a kernel the kind does not estimate."""
        check_kernel(kernel)
        for k, a in self.prefactors:
            if k == kernel:
                return a
        raise ValueError(f"kernel must be one of {_choices(self.kernels)} for kind={self.name!r}, got "
                         f"{describe(kernel)}")

    def has(self, hook_name):
        """Whether the record declares ``hook_name``."""
        return hook_name in self.closed_forms or hook_name in self.maps

    def needs_w_sq(self):
        """Whether the map needs the squared norms of the directions."""
        return "w_sq" in self.statistics


_THEORY = ("variance", "mean_square", "pair_excess", "pair_couplings", "small_v")
#: The positive kinds' prefactor :math:`e^{-c\|x\|^2}`: c = 1 (Gaussian kernel), c = 1/2 (softmax).
_POSITIVE = (("gaussian", -1.0), ("softmax", -0.5))

#: The records, in the order used by every listing, table and legend.
RECORDS = (
    FeatureKind(
        name="prf", label="PRFs",
        description="positive random features exp(w.x - c|x|^2)/sqrt(m) (eq. def_prf)",
        log_space=True, width=1, prefactors=_POSITIVE, argument="v", statistics=("wx",),
        closed_forms=_THEORY, maps=("log_features", "statistic", "linear_log_features"),
        modules=("theory.mse", "montecarlo.features"),
        reference="Sec. 1, eq. def_prf (Choromanski et al. 2021)",
        style={"linestyle": "-"}),
    FeatureKind(
        name="rff", label="RFFs",
        description="random Fourier features (sin w.x, cos w.x)/sqrt(m) (eq. rffdef2)",
        log_space=False, width=2, prefactors=(("gaussian", 0.0),), argument="z", statistics=("wx",),
        closed_forms=_THEORY, maps=("features", "statistic"),
        modules=("theory.mse", "montecarlo.features"),
        reference="Sec. 1, eq. rffdef2 (Rahimi & Recht 2007)",
        style={"linestyle": ":"}),
    FeatureKind(
        name="hyperbolic", label="hyperbolic PRFs",
        description="exp(-c|x|^2)/sqrt(2m) [exp(w.x), exp(-w.x)] (FAVOR+ hyperbolic features)",
        log_space=True, width=2, prefactors=_POSITIVE, argument="v", statistics=("wx",),
        closed_forms=_THEORY, maps=("log_features", "statistic", "linear_log_features"),
        modules=("theory.hyperbolic", "montecarlo.hyperbolic"),
        reference="Choromanski et al., Rethinking Attention with Performers (ICLR 2021), Lemma 1",
        style={"linestyle": "--"}),
    FeatureKind(
        name="oprf", label="OPRFs",
        description="optimised PRFs (1-4A)^{d/4} exp(A|w|^2 + sqrt(1-4A) w.x - c|x|^2)/sqrt(m), A < 1/8 (FAVOR++)",
        log_space=True, width=1, prefactors=_POSITIVE, argument="v", statistics=("wx", "w_sq"),
        closed_forms=_THEORY + ("parameters",),
        maps=("log_features", "statistic", "float_parameters", "linear_log_features", "data_parameters"),
        modules=("theory.oprf", "montecarlo.oprf"), parameters=("A",),
        reference="Likhosherstov, Choromanski, Dubey, Liu, Sarlos, Weller, Chefs' Random Tables (NeurIPS 2022)",
        style={"linestyle": "-."}),
    FeatureKind(
        name="trig_softmax", label="trig softmax RFs",
        description="trigonometric softmax features exp(|x|^2/2) (sin w.x, cos w.x)/sqrt(m) (Performer)",
        log_space=False, width=2, prefactors=(("softmax", 0.5),), argument="z", statistics=("wx",),
        closed_forms=_THEORY, maps=("features", "statistic"),
        modules=("theory.trig_softmax", "montecarlo.trig_softmax"),
        reference="Choromanski et al., Rethinking Attention with Performers (ICLR 2021), Sec. 2.3, trigonometric "
                  "features of the softmax kernel",
        style={"linestyle": (0, (3, 1, 1, 1, 1, 1))}),
    FeatureKind(
        name="sderf", label="SDERFs",
        description="symmetric dense-exponential features D exp(w'Aw + w'Bx - c|x|^2)/sqrt(m), A = Q diag(a) Q' "
                    "(each a_k < 1/8), B = (I - 4A)^{1/2}, D = det(I - 4A)^{1/4} (FAVOR#)",
        log_space=True, width=1, prefactors=_POSITIVE, argument="v", statistics=("wx", "W"),
        closed_forms=(), maps=("prepare", "log_features", "statistic", "float_parameters", "batch_parameters"),
        modules=("montecarlo.sderf",), parameters=("a", "Q"), optional_parameters=("Q",),
        reference="Likhosherstov, Choromanski, Dubey, Liu, Sarlos, Weller, Dense-Exponential Random Features: "
                  "Sharp Positive Estimators of the Gaussian Kernel (NeurIPS 2023; FAVOR#, arXiv:2302.00787)",
        style={"linestyle": (0, (1, 1))}),
)

_BY_NAME = {rec.name: rec for rec in RECORDS}
_HOOKS: dict = {}
_LOCK = threading.RLock()
_IMPORTED: set = set()


def names(*, has=(), log_space=None, kernel=None, positive=None):
    """Names of the kinds (registry order), optionally only those with every hook in ``has``,
    computed in log space or not (``log_space``; ``positive`` is the same filter under its old name: the
    positive kinds are those computed in log space), or estimating ``kernel``.

    >>> names(log_space=True)
    ('prf', 'hyperbolic', 'oprf', 'sderf')
    """
    has = (has,) if isinstance(has, str) else tuple(has)
    for h in has:
        _check_hook_name(h)
    log_space = _log_space_filter(log_space, positive)
    return tuple(rec.name for rec in RECORDS
                 if all(rec.has(h) for h in has) and (log_space is None or rec.log_space == log_space)
                 and (kernel is None or kernel in rec.kernels))


def _log_space_filter(log_space, positive):
    if positive is not None and log_space is not None and bool(positive) != bool(log_space):
        raise ValueError(f"give log_space or its old name positive, not both with different values (got "
                         f"log_space={log_space!r}, positive={positive!r})")
    return log_space if log_space is not None else positive


def get(name, argname="kind"):
    """The :class:`FeatureKind` record of ``name``; :class:`UnknownKindError` if there is none."""
    if not isinstance(name, str):
        raise ArgumentTypeError(f"{argname} must be a feature-kind name ({_choices(names())}), got {describe(name)}")
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UnknownKindError(f"{argname} must be one of {_choices(names())}, got {describe(name)}") from None


def check_kind(kind, name="kind", *, has=(), log_space=None, kernel=None, positive=None):
    """Return ``kind`` if it names a feature kind with every hook in ``has`` (computed in log space or not, and
    estimating ``kernel``, as asked); else raise a ValueError naming the kinds that qualify."""
    rec = get(kind, name)
    has = (has,) if isinstance(has, str) else tuple(has)
    log_space = _log_space_filter(log_space, positive)
    ok = names(has=has, log_space=log_space, kernel=kernel)
    if kind not in ok:
        if log_space is not None and rec.log_space != log_space:
            why = ("a positive kind is needed" if log_space else
                   "a kind not computed in log space is needed")
        elif kernel is not None and kernel not in rec.kernels:
            why = f"a kind estimating the {kernel} kernel is needed; {kind!r} estimates {_choices(rec.kernels)}"
        else:
            why = "a kind with " + ", ".join(repr(h) for h in has if not rec.has(h)) + " is needed"
        raise MissingKindHookError(f"{name} must be one of {_choices(ok)} here ({why}), got {describe(kind)}")
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
    """c in the hooks' :math:`e^{-c\\|x\\|^2}`, minus :meth:`FeatureKind.prefactor_exponent`: 1 (Gaussian
    kernel) or 1/2 (softmax) for the positive kinds, 0 for RFFs, -1/2 for trigonometric softmax features; a kernel
    the kind does not estimate is a ValueError naming the kind, the kernel and the kernels it estimates."""
    a = get(kind).prefactor_exponent(kernel)
    return -a if a else 0.0


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


def load(kind, argname="kind"):
    """Import the modules that register ``kind``'s hooks, in every layer whose package is imported (theory's
    always), so that none is imported later: inside a torch.compile graph, or by several worker threads at
    once.  Returns the kind's record."""
    rec = get(kind, argname)
    for layer in dict.fromkeys(HOOKS.values()):
        _import_layer(rec, layer)
    return rec


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
