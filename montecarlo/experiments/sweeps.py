r"""Sweeps of the downstream experiments: parallel units on joblib, and common random numbers.

Parallel units and common random numbers: :ref:`guide-montecarlo.experiments.sweeps`
(``docs/guide/experiments.rst``).
"""

from __future__ import annotations

import math
import os
import threading
import time
from contextlib import contextmanager

import numpy as np

import montecarlo as mc

from ._common import check_budget, check_int, check_rng, describe, distinct_couplings, show_int

__all__ = ["DRAW_BLOCK", "MAX_N_JOBS", "check_n_jobs", "coupling_pairs", "draw_blocks", "one_blas_thread",
           "paired_estimates", "paired_weights", "pinned_call", "run_units", "unit_seed", "units_ticker",
           "warm_up"]

#: Draws per unit of a sweep.  Fixed (never derived from n_jobs), so the seeds and the numbers do not
#: depend on how the units are scheduled; a run with more draws extends the blocks of a run with fewer.
DRAW_BLOCK = 25

#: The Haar route whose stream :func:`paired_weights` shares (numpy's QR of a Gaussian block).
PAIRED_HAAR_ROUTE = "qr"

#: Largest absolute value of n_jobs that a sweep accepts.  A sweep never starts more workers than it has units
#: of work (nor than joblib's reading of n_jobs), so more only costs: every worker is a thread with its own
#: stack or a process (measured before the cap: n_jobs = 300 started 303 threads for 8 units, n_jobs = 20000 took
#: 12 s and 400 MB, joblib failed from n_jobs = 1000 under a 4 GiB address-space limit and from 500001
#: on any machine).  A Dask cluster's size comes from the cluster, not from n_jobs.
MAX_N_JOBS = 256


# ---------------------------------------------------------------------------
# Arguments


def check_n_jobs(n_jobs, name="n_jobs"):
    """``n_jobs`` as joblib reads it: None (the machine's cores, or the ``n_jobs`` of an active
    ``joblib.parallel_config``), or a nonzero integer in [-:data:`MAX_N_JOBS`, :data:`MAX_N_JOBS`]
    (-1: every core, -2: all but one, ...)."""
    if n_jobs is None:
        return None
    what = (f"{name} must be None or a nonzero integer in [-{MAX_N_JOBS}, {MAX_N_JOBS}] (-1: every core; a sweep "
            "never starts more workers than its units of work)")
    if isinstance(n_jobs, (bool, np.bool_)) or not isinstance(n_jobs, (int, np.integer)):
        raise TypeError(f"{what}, got {describe(n_jobs)}")
    if n_jobs == 0 or abs(int(n_jobs)) > MAX_N_JOBS:
        raise ValueError(f"{what}, got {describe(n_jobs)}")
    return int(n_jobs)


def _workers(n_jobs):
    """Effective number of workers (joblib's reading of n_jobs under the active backend)."""
    import joblib
    from joblib.parallel import get_active_backend

    if n_jobs is None:
        configured = get_active_backend()[1]
        n_jobs = -1 if configured is None else configured
    return joblib.effective_n_jobs(n_jobs)


def draw_blocks(n_draws):
    """``[(block index, draws), ...]``: n_draws cut into blocks of :data:`DRAW_BLOCK` (the last one shorter)."""
    n_draws = check_int(n_draws, "n_draws", 1)
    check_budget(n_draws, f"the per-draw results of n_draws = {show_int(n_draws)} draws", "lower n_draws")
    return [(k, min(DRAW_BLOCK, n_draws - lo)) for k, lo in enumerate(range(0, n_draws, DRAW_BLOCK))]


def unit_seed(entropy, *keys):
    """The SeedSequence of one unit: the run's entropy (an int >= 0) and the unit's keys (ints >= 0)."""
    return np.random.SeedSequence([int(entropy), *[int(k) for k in keys]])


# ---------------------------------------------------------------------------
# One BLAS thread per worker


_PIN_LOCK = threading.Lock()
_PIN = {"depth": 0, "limits": None}


def _reset_pin_in_child():
    global _PIN_LOCK
    _PIN_LOCK = threading.Lock()
    _PIN["depth"], _PIN["limits"] = 0, None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_pin_in_child)


@contextmanager
def one_blas_thread():
    """Limit BLAS and OpenMP to one thread in this process while any caller is inside (threadpoolctl).

    Reference-counted: the first entrant sets the limit, the last one restores the previous
    limits, so worker threads of one process (the threading backend, a Dask worker's threads)
    never restore the limit while another unit is computing.
    """
    from threadpoolctl import threadpool_limits

    with _PIN_LOCK:
        if _PIN["depth"] == 0:
            _PIN["limits"] = threadpool_limits(limits=1)
        _PIN["depth"] += 1
    try:
        yield
    finally:
        with _PIN_LOCK:
            _PIN["depth"] -= 1
            if _PIN["depth"] == 0:
                _PIN["limits"].restore_original_limits()
                _PIN["limits"] = None


def pinned_call(func, args):
    """``func(*args)`` as one unit of a sweep runs it: with underflow silenced (PRF tails) and one BLAS /
    OpenMP thread (:func:`one_blas_thread`), so that units running side by side do not oversubscribe the cores.
    :func:`run_units` calls each unit through it, and so does the figures' scheduler."""
    with one_blas_thread(), np.errstate(under="ignore"):
        return func(*args)


# ---------------------------------------------------------------------------
# Running units


class UnitsDone(str):
    """A progress message of :func:`run_units` (``'label: k/n units, t s'``) that also carries ``done`` (k)
    and ``total`` (n), so that a progress bar can follow it without parsing the text."""

    def __new__(cls, text, done, total):
        obj = super().__new__(cls, text)
        obj.done, obj.total = done, total
        return obj


def units_ticker(progress, n, label):
    """``tick(done)``: calls ``progress`` (if not None) with a ``UnitsDone`` message ``'label: done/n units,
    t s'`` at most once a second, and always at the last unit (``done == n``)."""
    t0 = time.perf_counter()
    last = [t0]

    def tick(done):
        now = time.perf_counter()
        if progress is not None and (done == n or now - last[0] >= 1.0):
            last[0] = now
            progress(UnitsDone(f"{label}: {done}/{n} units, {now - t0:.1f} s", done, n))

    return tick


def run_units(func, units, *, n_jobs=None, costs=None, progress=None, label="units", warm_up=None):
    """``[func(*u) for u in units]``, computed in parallel through joblib.

    Parameters
    ----------
    func : callable
        A module-level function (picklable, for process and Dask backends).
    units : sequence of tuples
        Arguments of each call.
    n_jobs : None or nonzero int
        :func:`check_n_jobs`.  One effective worker (or one unit) runs in this
        process without joblib; otherwise joblib starts at most as many
        workers as there are units left after the warm-up.
    costs : sequence of float, optional
        Estimated cost of each unit; units are dispatched largest first
        (longest-processing-time scheduling).  The results do not depend on it.
    progress : callable, optional
        Called with one line ``'label: k/n units, t s'`` (a ``UnitsDone``, with ``done`` and ``total``)
        at most once a second and at the end.
    label : str
    warm_up : callable, optional
        Called once in this thread before any worker starts (default: the cheapest unit is
        computed here first).  Lazy imports are not safe to race across threads (a module
        half-imported by one thread, e.g. ``montecarlo.couplings`` importing torch for a
        dtype check, is seen by another's ``sys.modules`` lookup in ``check_rng``), so the
        warm-up should touch every code path of the units (each coupling's sampler, the
        feature kind's hook).

    Returns
    -------
    list
        The results in the order of ``units`` (never in the order of completion).

    Notes
    -----
    Every call runs under :func:`one_blas_thread` (in the worker that runs it, and in this
    process for the whole sweep), so the numbers are the same for any n_jobs and backend.
    The default backend is joblib's threading backend (``prefer="threads"``); an active
    ``joblib.parallel_config(backend=...)`` (loky processes, ``"dask"``) takes precedence.
    """
    n_jobs = check_n_jobs(n_jobs)
    units = list(units)
    n = len(units)
    if costs is None:
        order = list(range(n))
    else:
        costs = [float(c) for c in costs]
        if len(costs) != n:
            raise ValueError(f"costs must have one entry per unit ({n}), got {len(costs)}")
        order = sorted(range(n), key=lambda i: (-costs[i], i))
    out = [None] * n
    tick = units_ticker(progress, n, label)
    workers = _workers(n_jobs)
    with one_blas_thread():
        if workers == 1 or n <= 1:
            for done, i in enumerate(order, 1):
                out[i] = pinned_call(func, units[i])
                tick(done)
            return out
        from joblib import Parallel, delayed

        # lazy imports and hook registrations happen in this thread, before any worker can see
        # a half-imported module (see warm_up)
        start = 1
        if warm_up is not None:
            pinned_call(warm_up, ())
        else:
            first = order.pop()
            out[first] = pinned_call(func, units[first])
            start = 2
        # never more workers than units: joblib starts every worker up front (threads or processes)
        results = Parallel(n_jobs=min(workers, len(order)), prefer="threads", return_as="generator")(
            delayed(pinned_call)(func, units[i]) for i in order)
        for done, (i, r) in enumerate(zip(order, results), start):
            out[i] = r
            tick(done)
    return out


# ---------------------------------------------------------------------------
# Common random numbers


def _as_seed_sequence(rng, name="rng"):
    rng = check_rng(rng, name)
    if isinstance(rng, np.random.SeedSequence):
        return rng
    if isinstance(rng, np.random.Generator):
        return np.random.SeedSequence(int(rng.integers(0, 2**63 - 1)))
    return np.random.SeedSequence(rng)


def _coupling_seed(ss, coupling):
    """An independent stream for one coupling, keyed by the coupling's registry index (not by its
    position in a list, so a coupling's draws do not depend on which others are drawn)."""
    return np.random.SeedSequence(ss.entropy, spawn_key=tuple(ss.spawn_key) + (mc.COUPLINGS.index(coupling) + 1,))


def _iid_on_haar_stream(d, m, n_draws, ss):
    r"""IID rows from the numbers behind the orthogonal blocks of the same seed.

    Replays the draws of ``sample_weights('orthogonal', d, m, n_draws=n, haar_route='qr')``:
    full blocks (n * (full blocks) of them, one call), then the truncated last block (one call
    with r rows): for each call the :math:`\chi_d` norms (n_blocks, d), then the Gaussian
    (n_blocks, d, r) whose QR is the Haar frame.  Row i of a block is
    :math:`\nu_i g_i/\|g_i\|` (:math:`g_i` the i-th column): i.i.d. :math:`\mathcal N(0, I_d)`.
    """
    gen = np.random.default_rng(ss)
    nb = -(-m // d)
    r = m - (nb - 1) * d

    def blocks(n_blocks, rows):
        x = gen.chisquare(d, (n_blocks, d))
        nu = np.sqrt(x, out=x)[:, :rows]
        g = gen.standard_normal((n_blocks, d, rows))
        g /= np.linalg.norm(g, axis=1, keepdims=True)
        return np.swapaxes(g, 1, 2) * nu[:, :, None]  # (n_blocks, rows, d)

    if r == d:
        return blocks(n_draws * nb, d).reshape(n_draws, nb * d, d)
    parts = []
    if nb > 1:
        parts.append(blocks(n_draws * (nb - 1), d).reshape(n_draws, (nb - 1) * d, d))
    parts.append(blocks(n_draws, r))
    return np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]


def paired_weights(couplings, d, m, n_draws, rng=None, *, paired=True):
    """Projections of several couplings for one unit: {coupling: (n_draws, m, d)} (module docs).

    Parameters
    ----------
    couplings : sequence of str
        Couplings of :data:`montecarlo.COUPLINGS`.
    d, m : int >= 1
    n_draws : int >= 1
    rng : None, int >= 0, SeedSequence or numpy Generator
        The unit's seed (a Generator is read once for a seed).
    paired : bool
        True: common random numbers (every coupling from the same seed, IID rows from the
        numbers of the Haar blocks); False: an independent stream per coupling (keyed by the
        coupling's registry index).

    Returns
    -------
    dict
        coupling -> float64 array (n_draws, m, d); each coupling's rows have exactly its law.
    """
    couplings = distinct_couplings(couplings)
    d = check_int(d, "d", 1)
    m = check_int(m, "m", 1)
    n_draws = check_int(n_draws, "n_draws", 1)
    if not isinstance(paired, (bool, np.bool_)):
        raise TypeError(f"paired must be True or False, got {describe(paired)}")
    ss = _as_seed_sequence(rng)
    out = {}
    for c in couplings:
        if not paired:
            out[c] = mc.sample_weights(c, d, m, rng=np.random.default_rng(_coupling_seed(ss, c)), n_draws=n_draws)
        elif c == "iid":
            # The largest array _iid_on_haar_stream allocates: the (n_draws, m, d) result (its Gaussian
            # columns, n_draws m d in all, and its chi_d norms, n_draws ceil(m/d) d <= n_draws m d, are
            # no larger); m < d rows never cost a d x d block.
            check_budget(n_draws * m * d, f"{show_int(n_draws)} draws of the (m, d) = ({show_int(m)}, {show_int(d)}) "
                         "IID weights (paired)",
                         "reduce n_draws, m or d")
            out[c] = _iid_on_haar_stream(d, m, n_draws, ss)
        else:
            out[c] = mc.sample_weights(c, d, m, rng=np.random.default_rng(ss), n_draws=n_draws,
                                       haar_route=PAIRED_HAAR_ROUTE)
    return out


def warm_up(couplings, d, m, kind="prf", paired=True):
    """A callable for :func:`run_units`' ``warm_up``: draws one (m, d) sample of every coupling (both
    the paired and the independent route) and resolves the feature kind's map hook, so that their
    lazy imports happen in the calling thread."""
    from theory import feature_kinds

    def run():
        paired_weights(couplings, d, m, 1, 0, paired=paired)
        mc.FeatureMap(kind, kernel=feature_kinds.get(kind).kernels[0])  # (resolves the kind's map hook)

    return run


def paired_estimates(samples, pairs):
    """Per-draw differences of aligned samples: {(a, b): montecarlo.Estimate of mean(a - b)}."""
    out = {}
    for a, b in pairs:
        diff = np.asarray(samples[a], dtype=float) - np.asarray(samples[b], dtype=float)
        n = diff.size
        se = float(diff.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
        out[a, b] = mc.Estimate(float(diff.mean()), se, n)
    return out


def coupling_pairs(couplings):
    """The ordered pairs (later, earlier) of a coupling list: the differences a sweep reports."""
    couplings = tuple(couplings)
    return tuple((couplings[j], couplings[i]) for j in range(len(couplings)) for i in range(j))
