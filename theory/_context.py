r"""Where :mod:`theory` computes: a private mpmath context, one lock, per-thread settings.

Design (thread safety and the caller's precision)
-------------------------------------------------
mpmath's global context ``mpmath.mp`` is process-wide: ``mp.dps = 50`` or
``with mp.workdps(50):`` in one thread changes the precision every other
thread computes with, and two threads entering and leaving ``workdps`` in an
interleaved order can leave the global precision changed for good.  Some
mpmath caches (the memoised constants of ``mpmath.libmp``) are not safe under
concurrent use either.  :mod:`theory` therefore

1. reads the caller's precision **once**, at the entry of each public call:
   the thread's own setting from :func:`precision` if one is active, else
   ``mpmath.mp.prec`` (the global precision, as set by ``mp.dps`` or
   ``mp.workdps``);
2. computes in a **private** context :data:`mp` (an ``mpmath.MPContext`` of
   its own, never the global one), at that precision plus guard bits, under
   one re-entrant lock :data:`LOCK` (theory calls are serialised; mpmath is
   pure Python, so under the GIL this costs no parallelism);
3. returns numbers of the **global** context (``mpmath.mp.mpf``), rounded to
   the caller's precision; the global context is never written.

So a theory call gives the same result from any thread, whatever other threads
do, and never changes ``mpmath.mp.dps``.  To use different precisions in
different threads, use the thread-local :func:`precision` instead of
``mp.workdps`` (which is process-global by mpmath's design)::

    with theory.precision(dps=50):        # this thread only
        rho = theory.conformity("simplex", 64, "0.5")

Every public call also runs under a time budget (:func:`budget`, default
:data:`DEFAULT_SECONDS` seconds per call): series and quadratures check it and
raise :class:`~theory.errors.ConvergenceError` (an ``mpmath.NoConvergence``)
naming what to try, instead of running for minutes.  An explicit budget bounds
a call over a grid of arguments as a whole; the default applies to each point
(:func:`budget`, :func:`grid_call`).

The same lock guards python-flint's process-global ``flint.ctx.prec`` in
:mod:`theory.certified`, and :func:`os.register_at_fork` gives a forked child
a fresh lock (a fork taken while another thread held it cannot deadlock).

Rule for code that registers theory hooks
-----------------------------------------
Write ``from theory._context import mp`` (or ``from ._context import mp``
inside the package) instead of ``from mpmath import mp``.  Code that still
computes with the global ``mpmath.mp`` keeps working: :func:`legacy` runs it
with the global precision set to the private one for the duration of the
call (under the lock, restored afterwards), which is correct for theory calls
from any thread but not isolated from other threads that use ``mpmath.mp``
directly at the same moment.
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

__all__ = ["DEFAULT_SECONDS", "LOCK", "MAX_DPS", "budget", "caller_prec", "check_grid_time", "check_time",
           "grid_call", "legacy", "mp", "precision", "to_caller", "work_count"]

#: The private context every theory module computes in.
mp = MPContext()

#: Serialises theory calls (and python-flint's global precision in theory.certified).
LOCK = threading.RLock()

#: Default time budget of one public call, in seconds.
DEFAULT_SECONDS = 30.0

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
        st.update(depth=0, prec=None, seconds=None, deadline=None, grid_deadline=None, checks=0)
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
def budget(seconds):
    """Thread-local time budget of each top-level theory call inside the block (a context manager).

    A call that has not finished after ``seconds`` raises
    :class:`~theory.errors.ConvergenceError` at its next check (series terms,
    quadrature nodes, root-finding steps, and the start of each point of a
    grid).  A call over a grid of arguments (a sequence or array of v, d, ...)
    is one call: the budget bounds the whole grid, not each point (a 9-point
    grid under ``budget(0.57)`` ran 2.6 s before).  Each top-level call inside
    the block gets its own ``seconds``; an inner ``budget`` block sets the
    budget of the calls inside it.

    Without a ``budget`` block the default, :data:`DEFAULT_SECONDS`, applies to
    each scalar evaluation, so to each point of a grid: it guards against a
    hang, not the length of a curve (a grid of N points may take up to N times
    :data:`DEFAULT_SECONDS`); bound a grid as a whole with an explicit budget.
    """
    seconds = check_real(seconds, "seconds", minimum=0.0, strict_minimum=True)
    st = _state()
    old = st.seconds
    st.seconds = seconds
    try:
        yield seconds
    finally:
        st.seconds = old


def caller_prec():
    """The caller's working precision in bits: this thread's :func:`precision`, else ``mpmath.mp.prec``."""
    st = _state()
    return st.prec if st.prec is not None else mpmath.mp.prec


def check_time(what):
    """Raise ConvergenceError if the current top-level call has used up its time budget.

    Every loop of :mod:`theory` whose trip count an argument sets calls this (every iteration, or
    every few cheap ones); ``what`` names the loop and, where an argument makes it long, that
    argument (``"orf_conformity_kummer at d = 10**8 (a finite sum of d/2 terms)"``), so that the
    error says which input to change.  The calls are counted (:func:`work_count`).
    """
    st = _state()
    st.checks += 1
    deadline = st.deadline
    if deadline is not None and time.monotonic() > deadline:
        seconds = st.seconds or DEFAULT_SECONDS
        raise ConvergenceError(
            f"{what}: time budget of {seconds:g} s exhausted; lower the working precision, use a "
            "smaller argument, or allow more time with theory.budget(seconds=...)")


@contextlib.contextmanager
def grid_call():
    """One deadline for a whole grid call (used by :func:`theory._checks.guarded`'s grid mapping).

    Under an explicit :func:`budget` and outside any theory call, the deadline
    ``now + seconds`` is set here, once for the grid; every point's call
    (:func:`entered`) then keeps the earlier of it and its own deadline, and
    :func:`check_grid_time` refuses to start a point after it.  Under the
    default budget, or inside a theory call (a grid mapped by a nested call
    already runs under the enclosing call's deadline), nothing is set.
    """
    st = _state()
    if st.depth or st.seconds is None:
        yield
        return
    old = st.grid_deadline
    new = time.monotonic() + st.seconds
    st.grid_deadline = new if old is None else min(old, new)
    try:
        yield
    finally:
        st.grid_deadline = old


def check_grid_time(what):
    """Raise ConvergenceError before a grid point if the grid's (or the enclosing call's) deadline has
    passed: a grid of cheap points, which make no :func:`check_time` call of their own, is bounded too.
    Not counted by :func:`work_count`."""
    st = _state()
    deadline = st.deadline if st.depth else st.grid_deadline
    if deadline is not None and time.monotonic() > deadline:
        seconds = st.seconds or DEFAULT_SECONDS
        raise ConvergenceError(
            f"{what}: time budget of {seconds:g} s exhausted before the grid was done; lower the working "
            "precision, use fewer points, or allow more time with theory.budget(seconds=...)")


def work_count():
    """Budget checks (:func:`check_time` calls) made by this thread so far: a clock-free measure of
    the work a computation did (series terms, quadrature nodes, recurrence steps), for tests that
    bound work instead of wall-clock time.  Read it before and after a call and subtract."""
    return _state().checks


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
        st.deadline = time.monotonic() + (st.seconds or DEFAULT_SECONDS)
        if st.grid_deadline is not None:  # a point of a grid under an explicit budget: the earlier deadline
            st.deadline = min(st.deadline, st.grid_deadline)
        old = mp.prec
        try:
            yield bits
        finally:
            mp.prec = old
            st.depth = 0
            st.deadline = None


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
