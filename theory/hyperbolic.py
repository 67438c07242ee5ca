r"""Hyperbolic positive random features under every coupling (beyond the paper).

The features, their MSE and the proof that orthogonal directions are optimal: :ref:`guide-theory.hyperbolic`
(``docs/guide/derivations.rst``).
"""

from __future__ import annotations

import functools

from ._checks import check_coupling, check_dimension, guarded, half_square, square
from ._context import check_time, mp
from .conformities import _prf_at_angle, check_v
from .distributions import coupling_cos, dimension_bits
from .feature_kinds import register
from .mse import _prf_excess, _series_excess, _small_arg_bits
from .registry import MissingHookError, get as get_coupling, hook as coupling_hook, names
from .validation import show, show_int

__all__ = ["hyperbolic_ordering", "hyperbolic_pair_term"]


@functools.lru_cache(maxsize=None)
def _pair_couplings():
    """Couplings with a closed-form hyperbolic pair term: a PRF closed form and either no pair angle with
    independent rows (IID) or a fixed pair angle (with independent norms, or norm-coupled at angle pi/2)."""
    out = []
    for name in names(has="prf_conformity"):
        rec = get_coupling(name)
        if rec.cos_theta is None:
            if name == "iid":  # independent rows: the sign of w_j is a symmetry
                out.append(name)
            continue
        if rec.norm_pairs is None or rec.cos_theta(2 * rec.min_d) == 0:
            out.append(name)
    return tuple(out)


def _sign_symmetric(coupling, d):
    """Whether (w_i, w_j) and (w_i, -w_j) have one law for the coupled pairs of ``coupling``."""
    rec = get_coupling(coupling)
    return rec.cos_theta is None or rec.cos_theta(d) == 0


def _pair_excess(coupling, d, vv):
    r""":math:`\frac12(\rho(\theta)+\rho(\pi-\theta)) - e^{v^2}` for a coupled pair, with the bits the
    difference needs: it is of order :math:`v^4/d` (SimRFs: :math:`\beta \approx -1/(2d)`), so
    :func:`theory.mse._small_arg_bits` for the :math:`v^4` and :func:`theory.distributions.dimension_bits` for the
    1/d, as in :func:`theory.mse._prf_excess` (without the latter the SimRF/IIDRF ratio was 2.2e-5 instead of
    8.3e-14 at d = 1e20, v = 1e-3); at tiny v its leading Taylor term :math:`b v^4` with a bounded remainder
    (:func:`theory.mse._series_excess`: the even part's v^2 term vanishes)."""
    if coupling not in _pair_couplings():
        raise MissingHookError(f"coupling must be one of {', '.join(map(repr, _pair_couplings()))} for hyperbolic "
                               f"PRFs in closed form, got {coupling!r}")
    if _sign_symmetric(coupling, d):
        return _prf_excess(coupling, d, vv)
    small = _series_excess(coupling, d, square(vv), False)  # tiny v: b v^4 (the even part of the PRF series)
    if small is not None:
        return small
    c = coupling_cos(coupling, d)
    x = half_square(vv)
    with mp.workprec(mp.prec + _small_arg_bits(vv) + dimension_bits(d, "the hyperbolic pair excess")):
        return (_prf_at_angle(d, x, c) + _prf_at_angle(d, x, -c)) / 2 - mp.exp(square(vv))


register("hyperbolic", "variance", lambda d, vv: mp.expm1(square(vv)) ** 2 / 2)
register("hyperbolic", "mean_square", lambda d, vv: mp.exp(square(vv)))
register("hyperbolic", "pair_excess", _pair_excess)
register("hyperbolic", "pair_couplings", _pair_couplings)
register("hyperbolic", "small_v", lambda c, d: (mp.mpf(1) / 2, coupling_hook(c, "rff_conformity_z4")(d)))


@guarded(grid=("d", "v"))
def hyperbolic_pair_term(coupling, d, v):
    r"""Pair term :math:`\mathbb E[\cosh(w_i^\top v)\cosh(w_j^\top v)]` of one coupled pair.

    Parameters
    ----------
    coupling : str
        'iid', 'orthogonal', 'simplex' or 'pnc_orthogonal' (:ref:`guide-theory.hyperbolic`).
    d : int
    v : real >= 0
        :math:`\|x + y\|`.

    Returns
    -------
    mpf
        :math:`\frac12(\rho(\theta) + \rho(\pi - \theta))`: 36.08... (simplex) and
        33.15... (orthogonal) at d = 8, v = 2.
    """
    coupling = check_coupling(coupling)
    d = check_dimension(d, coupling)
    vv = check_v(v)
    return mp.exp(square(vv)) + _pair_excess(coupling, d, vv)


def hyperbolic_ordering(ds, vs, coupling="simplex", baseline="orthogonal", prec=128, max_prec=2048):
    r"""Certified sign of the hyperbolic pair-term difference at every (d, v), v > 0 (python-flint).

    For fixed-angle couplings the pair term is
    :math:`\frac12(\rho(c) + \rho(-c))` and each :math:`\rho` is enclosed by
    :func:`theory.certified.conformity_at_angle` (a Taylor ball with a proved
    remainder).  The precision doubles from ``prec`` (int >= 16) up to ``max_prec``
    (int >= prec) while the balls overlap.  ``ds`` and ``vs`` are non-empty
    sequences or 1-D arrays (a string, a masked array or a scalar is refused, not
    iterated), as in :func:`theory.certified.certify_ordering`; the whole grid runs
    under one work budget (:func:`theory.budget`).

    Returns
    -------
    list of :class:`theory.certified.Certificate`
        ``certified`` True when the pair term of ``coupling`` is proved larger
        than that of ``baseline`` (so ``baseline`` has the smaller hyperbolic MSE),
        False when proved smaller, None when undecided; ``margins`` holds the
        ball of the difference.
    """
    from . import certified

    for name, value in (("coupling", coupling), ("baseline", baseline)):
        rec = get_coupling(check_coupling(value, name))
        if rec.cos_theta is None or rec.norm_pairs is not None:
            raise MissingHookError(f"{name} must be a coupling with a fixed pair angle and independent norms "
                                   f"('orthogonal', 'simplex') for a certified hyperbolic ordering, got {value!r}")
    ds, vs = certified._grid(ds, "ds"), certified._grid(vs, "vs")
    prec, max_prec = certified._precisions(prec, max_prec)
    ds = [check_dimension(check_dimension(d, coupling, "ds"), baseline, "ds") for d in ds]  # before any work
    return certified._entry(_ordering)(certified, ds, vs, coupling, baseline, prec, max_prec)


def _ordering(certified, ds, vs, coupling, baseline, prec, max_prec):
    out = []
    for d in ds:
        for v in vs:
            bits = prec
            while True:
                check_time(f"hyperbolic_ordering at d = {show_int(d)}, v = {show(v)} ({bits} bits)")
                a = _certified_pair(certified, coupling, d, v, bits)
                b = _certified_pair(certified, baseline, d, v, bits)
                diff = a - b
                verdict = True if diff > 0 else False if diff < 0 else None
                if verdict is not None or bits >= max_prec:
                    break
                bits = min(2 * bits, max_prec)
            out.append(certified.Certificate(d, str(v), verdict, bits, (diff,)))
    return out


def _certified_pair(certified, coupling, d, v, bits):
    """Ball of the hyperbolic pair term of a fixed-angle coupling (cos theta an exact Fraction)."""
    c = get_coupling(coupling).cos_theta(check_dimension(d, coupling))
    if c == 0:
        return certified.conformity_at_angle(d, v, c, bits, 0)
    return (certified.conformity_at_angle(d, v, c, bits, 0) + certified.conformity_at_angle(d, v, -c, bits, 0)) / 2
