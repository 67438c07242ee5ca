r"""Where :mod:`theory` computes: a private mpmath context, one lock, per-thread settings.

The design (thread safety, the caller's precision, work budgets and their units) and the rule for code that
registers hooks: :ref:`guide-theory._context` (``docs/guide/theory_design.rst``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

import mpmath
from mpmath.ctx_mp import MPContext
from mpmath.ctx_mp_python import _mpc, _mpf
from mpmath.libmp import mpf_pos, round_nearest

from .errors import ConvergenceError
from .validation import check_int, check_real

__all__ = ["DEFAULT_WORK", "LOCK", "MAX_DPS", "UNIT_PREC", "budget", "caller_prec", "check_grid_time", "check_time",
           "check_work", "grid_call", "legacy", "mp", "precision", "precision_factor", "to_caller", "traced", "work_count",
           "work_used"]

#: The private context every theory module computes in.
mp = MPContext()

#: Serialises theory calls (and python-flint's global precision in theory.certified).
LOCK = threading.RLock()

#: Default work budget of one public call (of each point of a grid), in units of work (:ref:`guide-theory._context`):
#: about a minute of the reference machine.  The longest calls of the test suite and the figures use
#: under a tenth of it (benchmarks/README.md, "Work budgets").
DEFAULT_WORK = 4_000_000

#: Precision (bits) up to which a step costs its stated units; beyond, :func:`precision_factor`.
UNIT_PREC = 256

#: Largest working precision a caller may ask for (decimal digits).
MAX_DPS = 100_000

_local = threading.local()


def _reinit_lock():  # pragma: no cover - runs in forked children
    global LOCK
    LOCK = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_lock)


def _state():
    st = _local.__dict__
    if "depth" not in st:
        st.update(depth=0, prec=None, seconds=None, work=None, deadline=None, grid_deadline=None, checks=0,
                  used=0, limit=None, budget_units=None, grid_limit=None, grid_units=None, tracer=None)
    return _local


@contextlib.contextmanager
def precision(dps=None, *, prec=None):
    """Thread-local working precision for theory calls (a context manager).

    Parameters
    ----------
    dps : int, optional
        Decimal digits (1 to :data:`MAX_DPS`).
    prec : int, optional
        Bits instead of digits (give exactly one of ``dps`` and ``prec``).

    Notes
    -----
    Inside the block, theory functions called from this thread compute to
    this precision whatever ``mpmath.mp.dps`` is; other threads are not
    affected, and ``mpmath.mp`` is not touched.  Results are ``mpmath.mp.mpf``
    numbers holding that many bits (arithmetic on them in the global context
    then rounds to the global precision, as for any mpf).
    """
    if (dps is None) == (prec is None):
        raise ValueError("give exactly one of dps and prec")
    if dps is not None:
        bits = mpmath.libmp.dps_to_prec(check_int(dps, "dps", 1, maximum=MAX_DPS))
    else:
        bits = check_int(prec, "prec", 4, maximum=mpmath.libmp.dps_to_prec(MAX_DPS))
    st = _state()
    old = st.prec
    st.prec = bits
    try:
        yield bits
    finally:
        st.prec = old


@contextlib.contextmanager
def budget(seconds=None, *, work=None):
    """Thread-local budget of each top-level theory call inside the block (a context manager).

    Parameters
    ----------
    seconds : positive real, optional
        A wall-clock budget (opt-in; off by default): a call that has not finished after ``seconds``
        raises :class:`~theory.errors.ConvergenceError` at its next check.  Whether it is reached depends
        on the machine and its load, so a value can become an error on a busy machine; the work budget
        does not.
    work : positive int, optional
        The work budget in units of work (:ref:`guide-theory._context`; default :data:`DEFAULT_WORK`): a call that
        has charged more raises :class:`~theory.errors.ConvergenceError` at the check that crossed it, the
        same check on every machine.

    Give at least one.  A call over a grid of arguments (a sequence or array of v, d, ...) is one call:
    the budget bounds the whole grid, not each point (a 9-point grid under ``budget(0.57)`` ran 2.6 s
    before).  Each top-level call inside the block gets its own budget; an inner ``budget`` block sets
    the budget of the calls inside it (its ``seconds`` and ``work``; a value not given there is taken from
    the enclosing block).

    Without a ``budget`` block :data:`DEFAULT_WORK` applies to each scalar evaluation, so to each point of a
    grid, and there is no wall-clock limit: it guards against a hang, not the length of a curve (a grid of
    N points may take up to N times the default); bound a grid as a whole with an explicit budget.
    """
    if seconds is None and work is None:
        raise ValueError("budget needs seconds=... (a wall-clock limit) or work=... (units of work), got neither")
    if seconds is not None:
        seconds = check_real(seconds, "seconds", minimum=0.0, strict_minimum=True)
    if work is not None:
        work = check_int(work, "work", 1)
    st = _state()
    old = st.seconds, st.work
    st.seconds = seconds if seconds is not None else st.seconds
    st.work = work if work is not None else st.work
    try:
        yield seconds if work is None else work
    finally:
        st.seconds, st.work = old


def caller_prec():
    """The caller's working precision in bits: this thread's :func:`precision`, else ``mpmath.mp.prec``."""
    st = _state()
    return st.prec if st.prec is not None else mpmath.mp.prec


def precision_factor(prec):
    """Units one step costs per stated unit at ``prec`` bits: ``max(1, prec / UNIT_PREC) ** 2``, an integer.

    mpmath's elementary functions cost about ``prec**2`` beyond a few hundred bits (:ref:`guide-theory._context`)."""
    prec = int(prec)
    return 1 if prec <= UNIT_PREC else (prec * prec) // (UNIT_PREC * UNIT_PREC)


def check_time(what, units=1):
    """Charge one step of ``units`` units of work; raise ConvergenceError once the call's budget is spent.

    Every loop of :mod:`theory` whose trip count an argument sets calls this (every iteration, or
    every few cheap ones, before the step's work); ``what`` names the loop and, where an argument
    makes it long, that argument (``"orf_conformity_kummer at d = 10**8 (a finite sum of d/2 terms)"``),
    so that the error says which input to change.  ``units``: the step's cost at up to
    :data:`UNIT_PREC` bits in units of one elementary function (a series term or a Newton step: 1; a
    quadrature node that evaluates an incomplete gamma function or a hypergeometric series: more);
    it is multiplied by :func:`precision_factor` at the private working precision.  The calls are
    counted (:func:`work_count`) and their charges summed (:func:`work_used`).  Under an opt-in
    ``budget(seconds=...)`` the call's deadline is checked too.  (The name is historical: the budget
    was a wall-clock one before; :func:`check_work` is the same function.)
    """
    st = _state()
    st.checks += 1
    charge = units * precision_factor(mp.prec)
    st.used += charge
    if st.tracer is not None:
        st.tracer(what, charge)
    limit = st.limit
    if limit is not None and st.used > limit:
        raise ConvergenceError(
            f"{what}: work budget of {st.budget_units} units exhausted (at {mp.prec} bits); lower the working "
            "precision, use a smaller argument, or allow more work with theory.budget(work=...)")
    deadline = st.deadline
    if deadline is not None and time.monotonic() > deadline:
        raise ConvergenceError(
            f"{what}: time budget of {st.seconds:g} s exhausted; lower the working precision, use a "
            "smaller argument, or allow more time with theory.budget(seconds=...)")


check_work = check_time


@contextlib.contextmanager
def grid_call():
    """One budget for a whole grid call (used by ``theory._checks.guarded``'s grid mapping).

    Under an explicit :func:`budget` and outside any theory call, the grid's work limit (and, with
    ``seconds``, its deadline ``now + seconds``) is set here, once for the grid; every point's call
    (``entered``) then keeps the earlier of the grid's limits and its own, and :func:`check_grid_time`
    refuses to start a point once either is spent.  Under the default budget, or inside a theory call (a
    grid mapped by a nested call already runs under the enclosing call's budget), nothing is set.
    """
    st = _state()
    if st.depth or (st.seconds is None and st.work is None):
        yield
        return
    old = st.grid_deadline, st.grid_limit, st.grid_units
    if st.seconds is not None:
        new = time.monotonic() + st.seconds
        st.grid_deadline = new if old[0] is None else min(old[0], new)
    units = st.work or DEFAULT_WORK
    new_limit = st.used + units
    if old[1] is None or new_limit < old[1]:
        st.grid_limit, st.grid_units = new_limit, units
    try:
        yield
    finally:
        st.grid_deadline, st.grid_limit, st.grid_units = old


def check_grid_time(what):
    """Raise ConvergenceError before a grid point if the grid's (or the enclosing call's) budget is spent:
    a grid of cheap points, which make no :func:`check_time` call of their own, is bounded too.  Charges
    nothing and is not counted by :func:`work_count`."""
    st = _state()
    if st.depth:
        limit, units, deadline = st.limit, st.budget_units, st.deadline
    else:
        limit, units, deadline = st.grid_limit, st.grid_units, st.grid_deadline
    if limit is not None and st.used >= limit:
        raise ConvergenceError(
            f"{what}: work budget of {units} units exhausted before the grid was done; lower the working "
            "precision, use fewer points, or allow more work with theory.budget(work=...)")
    if deadline is not None and time.monotonic() > deadline:
        raise ConvergenceError(
            f"{what}: time budget of {st.seconds:g} s exhausted before the grid was done; lower the working "
            "precision, use fewer points, or allow more time with theory.budget(seconds=...)")


@contextlib.contextmanager
def traced(tracer):
    """Call ``tracer(what, charge)`` at every :func:`check_time` of this thread inside the block (before the
    budget is tested), for measurements of the work model (``python -m benchmarks.bench_work``)."""
    st = _state()
    old = st.tracer
    st.tracer = tracer
    try:
        yield
    finally:
        st.tracer = old


def work_count():
    """Budget checks (:func:`check_time` calls) made by this thread so far: a clock-free measure of
    the work a computation did (series terms, quadrature nodes, recurrence steps), for tests that
    bound work instead of wall-clock time.  Read it before and after a call and subtract."""
    return _state().checks


def work_used():
    """Units of work charged by this thread so far (the sum of :func:`check_time`'s charges, precision
    factor included): read it before and after a call and subtract.  A top-level call raises once its
    own charges exceed its budget (:data:`DEFAULT_WORK` by default)."""
    return _state().used


def inside():
    """Whether this thread is inside a theory call (holds the lock and the private context)."""
    return _state().depth > 0


@contextlib.contextmanager
def entered():
    """Enter the private context for one top-level call (or a nested one): lock, depth, deadline.

    Yields the caller's precision in bits (read once, here).
    """
    st = _state()
    if st.depth:
        st.depth += 1
        try:
            yield None
        finally:
            st.depth -= 1
        return
    bits = caller_prec()
    with LOCK:
        st.depth = 1
        units = st.work or DEFAULT_WORK
        st.limit, st.budget_units = st.used + units, units
        if st.grid_limit is not None and st.grid_limit < st.limit:  # a point of a grid under an explicit budget
            st.limit, st.budget_units = st.grid_limit, st.grid_units
        if st.seconds is not None:
            st.deadline = time.monotonic() + st.seconds
            if st.grid_deadline is not None:  # the grid's deadline, if earlier
                st.deadline = min(st.deadline, st.grid_deadline)
        old = mp.prec
        try:
            yield bits
        finally:
            mp.prec = old
            st.depth = 0
            st.deadline = None
            st.limit = st.budget_units = None


@contextlib.contextmanager
def legacy():
    """Mirror the private precision into the global ``mpmath.mp`` (for code that computes with it).

    Only inside a theory call (the lock is held); the global precision is restored on exit.
    """
    g = mpmath.mp
    old = g.prec
    g.prec = mp.prec
    try:
        yield
    finally:
        g.prec = old


def uses_global_mp(func):
    """Whether ``func`` was written against the global ``mpmath.mp`` (see the module's rule)."""
    glb = getattr(func, "__globals__", None)
    return glb is not None and glb.get("mp") is mpmath.mp


def round_here(value):
    """Round numbers (and containers of them) to the private context's current precision."""
    return _convert(value, lambda x: mp.make_mpf(mpf_pos(x._mpf_, mp.prec, round_nearest)),
                    lambda x: mp.make_mpc((mpf_pos(x._mpc_[0], mp.prec, round_nearest),
                                           mpf_pos(x._mpc_[1], mp.prec, round_nearest))),
                    mp)


def to_caller(value, bits):
    """Convert private (or global) mpmath numbers, and containers of them, to ``mpmath.mp`` numbers
    rounded to ``bits``."""
    g = mpmath.mp
    return _convert(value, lambda x: g.make_mpf(mpf_pos(x._mpf_, bits, round_nearest)),
                    lambda x: g.make_mpc((mpf_pos(x._mpc_[0], bits, round_nearest),
                                          mpf_pos(x._mpc_[1], bits, round_nearest))),
                    g)


def _convert(value, real, cplx, ctx):
    if isinstance(value, _mpf):
        return real(value)
    if isinstance(value, _mpc):
        return cplx(value)
    if isinstance(value, tuple):
        items = [_convert(v, real, cplx, ctx) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        return [_convert(v, real, cplx, ctx) for v in value]
    if isinstance(value, dict):
        return {k: _convert(v, real, cplx, ctx) for k, v in value.items()}
    if isinstance(value, mpmath.matrices.matrices._matrix):
        out = ctx.matrix(value.rows, value.cols)
        for i in range(value.rows):
            for j in range(value.cols):
                out[i, j] = _convert(value[i, j], real, cplx, ctx)
        return out
    np = _numpy()
    if np is not None and isinstance(value, np.ndarray) and value.dtype == object:
        out = np.empty(value.shape, dtype=object)
        for idx in np.ndindex(value.shape):
            out[idx] = _convert(value[idx], real, cplx, ctx)
        return out
    return value


def _numpy():
    try:
        import numpy
    except ImportError:  # pragma: no cover
        return None
    return numpy
