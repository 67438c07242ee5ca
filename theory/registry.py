r"""The coupling registry: one record per coupling, hooks registered by each layer.

The hooks, lookups and how to add a coupling: :ref:`guide-theory.registry` (``docs/guide/theory_design.rst``).
"""

from __future__ import annotations

import functools
import importlib
import threading
from dataclasses import dataclass, field
from fractions import Fraction

from .validation import ArgumentTypeError, check_int, describe

__all__ = [
    "HOOKS",
    "RECORDS",
    "Coupling",
    "MissingHookError",
    "UnknownCouplingError",
    "block_pair_split",
    "check_coupling",
    "check_couplings",
    "check_dimension",
    "get",
    "has_hook",
    "hook",
    "names",
    "load_layer",
    "register",
    "set_layer_loader",
]

#: Every hook name and the layer that provides it.
HOOKS = {
    "prf_conformity": "theory",
    "rff_conformity": "theory",
    "prf_conformity_excess": "theory",
    "rff_conformity_excess": "theory",
    "prf_conformity_v2": "theory",
    "rff_conformity_z4": "theory",
    "block_pair_weights": "theory",
    "pair_pdf": "theory",
    "certified_prf_conformity": "theory",
    "certified_rff_conformity": "theory",
    "blocks": "montecarlo",
    "projections": "montecarlo",
    "structured_projection": "montecarlo",
}


class UnknownCouplingError(ValueError):
    """A coupling name with no record in the registry."""


class MissingHookError(ValueError):
    """A coupling that exists but lacks the requested closed form or sampler."""


@dataclass(frozen=True)
class Coupling:
    r"""One coupling of the random projection rows.

    Attributes
    ----------
    name : str
        The one spelling used everywhere (``"simplex"``).
    label : str
        Short label for plots and tables (``"SimRFs"``).
    description : str
        One line: how a block is built and where it comes from.
    exact : bool
        Every row is exactly :math:`\mathcal N(0, I_d)` (unbiased estimators).
    block : {'d', 'pow2'}
        Rows per block: d, or the power of two :math:`p \ge d` of the HD-product
        couplings (inputs zero-padded to p).
    min_d : int
        Smallest data dimensionality.
    cos_theta : callable or None
        ``cos_theta(d) -> Fraction``: the fixed cosine between the directions of
        every two rows of a block; None when it is not fixed (IIDRFs, SimRFs+,
        the HD-product couplings).  Lemma 4.2 applies when it is fixed and
        ``norm_pairs`` is empty.
    norm_pairs : callable or None
        ``norm_pairs(d) -> tuple of (i, j)``: the rows of a block whose norms are
        coupled to each other (each norm stays marginally :math:`\chi_d`); None
        when all d norms of a block are independent.
    isotropic : bool
        The block law is invariant under rotations (:math:`\mathbf W\mathbf R
        \overset{d}{=}\mathbf W`), so projections of a vector depend on its norm only.
    closed_forms, samplers : tuple of str
        The theory and montecarlo hooks this coupling has.
    modules : tuple of str
        Modules that register this coupling's hooks beyond each layer's core
        modules; imported on the first lookup of a hook of their layer.
    style : dict
        Matplotlib colour, line style and marker.
    reference : str
        Where the construction comes from.
    """

    name: str
    label: str
    description: str
    exact: bool
    block: str
    min_d: int
    cos_theta: object
    isotropic: bool
    closed_forms: tuple
    samplers: tuple
    style: dict = field(default_factory=dict, compare=False)
    modules: tuple = ()
    reference: str = ""
    norm_pairs: object = None

    def coupled_norm_pairs(self, d):
        """Rows (i, j), i < j, of a block whose norms are coupled (empty for independent norms)."""
        return tuple(self.norm_pairs(d)) if self.norm_pairs is not None else ()

    def block_rows(self, d):
        """Rows per block for data dimensionality d."""
        d = check_dimension(d, self.name)
        return d if self.block == "d" else 1 << (d - 1).bit_length()

    def has(self, hook_name):
        """Whether the record declares ``hook_name``."""
        return hook_name in self.closed_forms or hook_name in self.samplers


def _orthogonal_cos(d):
    return Fraction(0)


def _simplex_cos(d):
    return Fraction(-1, d - 1)


_CORE = ("prf_conformity", "rff_conformity", "prf_conformity_v2", "rff_conformity_z4", "pair_pdf",
         "certified_prf_conformity", "certified_rff_conformity")

#: The records, in the order used by every listing, table and legend.
RECORDS = (
    Coupling(name="iid", label="IIDRFs", description="rows i.i.d. N(0, I_d)", exact=True, block="d", min_d=1,
             cos_theta=None, isotropic=True, closed_forms=_CORE, samplers=("blocks", "projections"),
             style={"color": "#E69F00", "linestyle": "-", "marker": "o"}, modules=("theory.certified",),
             reference="Sec. 1 (Rahimi & Recht 2007)"),
    Coupling(name="orthogonal", label="ORFs", description="W = D R: R Haar on O(d), chi_d norms", exact=True,
             block="d", min_d=1, cos_theta=_orthogonal_cos, isotropic=True, closed_forms=_CORE,
             samplers=("blocks", "projections"), style={"color": "#009E73", "linestyle": "--", "marker": "s"},
             modules=("theory.certified",), reference="Sec. 1 (Yu et al. 2016)"),
    Coupling(name="simplex", label="SimRFs",
             description="W = D S R: simplex directions (eq. simplex_vectors), chi_d norms", exact=True, block="d",
             min_d=2, cos_theta=_simplex_cos, isotropic=True, closed_forms=_CORE, samplers=("blocks", "projections"),
             style={"color": "#0072B2", "linestyle": "-.", "marker": "^"}, modules=("theory.certified",),
             reference="Sec. 3, eq. simplex_block_eq"),
    Coupling(name="simplex_plus", label="SimRFs+",
             description="weight-dependent geometry of Sec. 3.2 (eq. simpler_updates_main)", exact=True, block="d",
             min_d=2, cos_theta=None, isotropic=True, closed_forms=(), samplers=("blocks", "projections"),
             style={"color": "#CC79A7", "linestyle": (0, (5, 1, 1, 1, 1, 1)), "marker": "D"},
             reference="Sec. 3.2"),
    Coupling(name="pnc_orthogonal", label="PNC-ORFs",
             description="ORF block D R with the chi_d norms of rows (1, 2), (3, 4), ... antithetic: "
                         "F(w_2) = 1 - F(w_1)",
             exact=True, block="d", min_d=2, cos_theta=_orthogonal_cos, isotropic=True,
             closed_forms=("prf_conformity", "rff_conformity", "prf_conformity_excess", "rff_conformity_excess",
                           "prf_conformity_v2", "rff_conformity_z4", "block_pair_weights"),
             samplers=("blocks", "projections"), style={"color": "#882255", "linestyle": (0, (3, 1, 1, 1)),
                                                        "marker": "P"},
             modules=("theory.pnc", "montecarlo.pnc"),
             reference="Reid, Markou, Choromanski, Turner, Weller (ICLR 2025)",
             norm_pairs=lambda d: tuple((2 * k, 2 * k + 1) for k in range(d // 2))),
    Coupling(name="fixed_orthogonal", label="fixed-norm ORFs",
             description="orthogonal rows all of norm sqrt(d) (performer-pytorch scaling=1): biased",
             exact=False, block="d", min_d=1, cos_theta=_orthogonal_cos, isotropic=True, closed_forms=(),
             samplers=("blocks", "projections"), style={"color": "#999933", "linestyle": (0, (1, 1)), "marker": "x"},
             modules=("theory.fixed_norm", "montecarlo.fixed_norm"),
             reference="performer-pytorch gaussian_orthogonal_random_matrix(scaling=1); Choromanski et al. 2021"),
    Coupling(name="fast_orthogonal", label="fast ORFs",
             description="HD-product in place of R (App. B.2), inputs zero-padded to 2^k", exact=False,
             block="pow2", min_d=1, cos_theta=None, isotropic=False, closed_forms=(),
             samplers=("blocks", "projections", "structured_projection"),
             style={"color": "#56B4E9", "linestyle": ":", "marker": "v"}, reference="App. B.2"),
    Coupling(name="fast_simplex", label="fast SimRFs",
             description="simplex directions with the HD-product (App. B.2)", exact=False, block="pow2", min_d=2,
             cos_theta=None, isotropic=False, closed_forms=(),
             samplers=("blocks", "projections", "structured_projection"),
             style={"color": "#D55E00", "linestyle": ":", "marker": "<"}, reference="App. B.2"),
)

_BY_NAME = {rec.name: rec for rec in RECORDS}
_HOOKS: dict = {}
_LOCK = threading.RLock()
_IMPORTED: set = set()


def names(*, has=(), exact=None, isotropic=None):
    """Names of the couplings (registry order), optionally only those with every hook in ``has``.

    >>> names(has=("prf_conformity",))
    ('iid', 'orthogonal', 'simplex', 'pnc_orthogonal')
    """
    has = (has,) if isinstance(has, str) else tuple(has)
    return _names(has, exact, isotropic)


@functools.lru_cache(maxsize=None)
def _names(has, exact, isotropic):  # RECORDS is a tuple of frozen records: the answer never changes
    for h in has:
        _check_hook_name(h)
    out = []
    for rec in RECORDS:
        if all(rec.has(h) for h in has) and (exact is None or rec.exact == exact) and (
                isotropic is None or rec.isotropic == isotropic):
            out.append(rec.name)
    return tuple(out)


def get(name, argname="coupling"):
    """The :class:`Coupling` record of ``name``; :class:`UnknownCouplingError` if there is none."""
    if not isinstance(name, str):
        raise ArgumentTypeError(f"{argname} must be a coupling name ({_choices(names())}), got {describe(name)}")
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UnknownCouplingError(f"{argname} must be one of {_choices(names())}, got {describe(name)}") from None


def check_coupling(coupling, name="coupling", has=()):
    """Return ``coupling`` if it names a coupling with every hook in ``has``; else raise.

    The error names the argument and lists the couplings that qualify.
    """
    rec = get(coupling, name)
    has = (has,) if isinstance(has, str) else tuple(has)
    missing = [h for h in has if not rec.has(h)]
    if missing:
        ok = names(has=has)
        raise MissingHookError(f"{name} must be one of {_choices(ok)} here ({coupling!r} has no "
                               f"{_hook_words(missing[0])}), got {describe(coupling)}")
    return coupling


def check_couplings(couplings, name="couplings", has=()):
    """A tuple of coupling names from one name or a sequence of them (non-empty, each checked)."""
    if isinstance(couplings, str):
        couplings = (couplings,)
    try:
        out = tuple(couplings)
    except TypeError:
        raise ArgumentTypeError(f"{name} must be a coupling name or a sequence of them, got {describe(couplings)}") \
            from None
    if not out:
        raise ValueError(f"{name} must name at least one coupling")
    return tuple(check_coupling(c, name, has) for c in out)


def check_dimension(d, coupling=None, name="d"):
    """The data dimensionality as an int: >= the coupling's ``min_d`` (>= 1 without a coupling)."""
    if coupling is None:
        return check_int(d, name, 1)
    rec = get(coupling)
    if rec.min_d > 1:
        return check_int(d, name, rec.min_d, f"for the {rec.name} coupling")
    return check_int(d, name, 1)


def register(coupling, hook_name, func=None):
    """Attach ``func`` as hook ``hook_name`` of ``coupling`` (usable as a decorator).

    The record must declare the hook and no other function may hold it.
    """
    if func is None:
        return lambda f: register(coupling, hook_name, f)
    rec = get(coupling)
    _check_hook_name(hook_name)
    if not rec.has(hook_name):
        raise MissingHookError(f"cannot register {hook_name!r} for {coupling!r}: its record does not declare it "
                               "(add it to the record's closed_forms or samplers)")
    with _LOCK:
        old = _HOOKS.get((coupling, hook_name))
        if old is not None and old is not func and _qualname(old) != _qualname(func):
            raise ValueError(f"hook {hook_name!r} of {coupling!r} is already registered ({_qualname(old)})")
        _HOOKS[(coupling, hook_name)] = func
    return func


def has_hook(coupling, hook_name):
    """Whether ``coupling`` declares ``hook_name`` (no import, no lookup)."""
    return get(coupling).has(_check_hook_name(hook_name))


def hook(coupling, hook_name, argname="coupling"):
    """The function registered as ``hook_name`` of ``coupling``.

    Raises :class:`UnknownCouplingError` for an unknown name and
    :class:`MissingHookError` when the coupling has no such hook (the message
    lists the couplings that have it).  A hook that the record declares but
    that no module has registered is imported from the record's ``modules``
    of the hook's layer; if still missing, :class:`MissingHookError` says so.
    """
    rec = get(coupling, argname)
    _check_hook_name(hook_name)
    if not rec.has(hook_name):
        ok = names(has=(hook_name,))
        raise MissingHookError(f"{argname} must be one of {_choices(ok)} here ({coupling!r} has no "
                               f"{_hook_words(hook_name)}), got {describe(coupling)}")
    func = _HOOKS.get((coupling, hook_name))
    if func is None:
        _import_layer(rec, HOOKS[hook_name])
        func = _HOOKS.get((coupling, hook_name))
    if func is None:
        raise MissingHookError(f"{coupling!r} declares {hook_name!r} but no module registered it: import the "
                               f"{HOOKS[hook_name]} package (modules named by the record: {rec.modules or 'none'})")
    return func


def block_pair_split(coupling, d, b):
    """Ordered pairs inside a block of b rows: (n_c, n_o) with n_c pairs at the
    coupling's pair conformity and n_o pairs at the ORF conformity.

    For every coupling whose pairs inside a block are all alike this is
    ``(b (b - 1), 0)``; a coupling with a ``block_pair_weights`` hook (pairs of
    two kinds, e.g. norm-coupled pairs inside an orthogonal block) says
    otherwise.
    """
    rec = get(coupling)
    if rec.has("block_pair_weights"):
        return hook(coupling, "block_pair_weights")(d, b)
    return b * (b - 1), 0


_LOADERS: dict = {}


def set_layer_loader(layer, loader):
    """Let ``layer`` (e.g. ``"montecarlo"``) import its own hook modules: ``loader(module_name)``.

    theory never imports another package: a record names the modules of every
    layer, theory imports its own, and a layer that registers hooks sets its
    loader when it is imported (montecarlo does, in its ``__init__``).  Used by
    this registry and by :mod:`theory.feature_kinds`.
    """
    _LOADERS[layer] = loader


def load_layer(modules, layer, imported):
    """Import the modules of ``layer`` among ``modules`` not yet in the set ``imported``."""
    for mod in modules:
        if mod.split(".")[0] != layer or mod in imported:
            continue
        if layer == "theory":
            importlib.import_module(mod)
        elif layer in _LOADERS:
            _LOADERS[layer](mod)
        else:
            continue
        imported.add(mod)


#: Modules of each layer that register the hooks of several couplings (imported before a record's own).
CORE_MODULES = {"theory": ("theory.conformities", "theory.distributions", "theory.mse")}


def _import_layer(rec, layer):
    load_layer(CORE_MODULES.get(layer, ()) + tuple(rec.modules), layer, _IMPORTED)


def _check_hook_name(hook_name):
    if hook_name not in HOOKS:
        raise ValueError(f"hook must be one of {_choices(tuple(HOOKS))}, got {describe(hook_name)}")
    return hook_name


def _hook_words(hook_name):
    kind = "closed form" if HOOKS[hook_name] == "theory" else "sampler"
    return f"{kind} {hook_name!r}"


def _choices(items):
    return ", ".join(repr(c) for c in items)


def _qualname(func):
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"
