r"""Every figure's cells through one parallel sweep, closed forms shared between curves computed once.

The units of a sweep: :ref:`guide-figures._sweep` (``docs/guide/experiments.rst``).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass

#: Points of one closed form per unit of the sweep (a unit then costs about 0.05-0.5 s).
POINTS_PER_UNIT = 16


@dataclass(frozen=True)
class Failed:
    """The result of a part one of whose units raised: the exception, its one-line reason and traceback."""

    exc: BaseException
    reason: str
    traceback: str = ""

    @classmethod
    def of(cls, exc):
        """From the exception being handled (kept when it survives pickling, the way back from a worker;
        else a RuntimeError with its reason)."""
        import pickle

        reason = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        try:
            pickle.loads(pickle.dumps(exc))
        except Exception:
            exc = RuntimeError(reason)
        return cls(exc, reason, traceback.format_exc())


class Part:
    """A piece of work a figure needs (subclasses say what)."""

    def requests(self):
        """``[(key, unit, cost)]``: ``key`` hashable (equal keys are computed once), ``unit`` a tuple
        ``(kind, payload)`` for :func:`_run_unit`, ``cost`` an estimate in CPU-seconds."""
        return []

    def finish(self, values):
        """The part's result from the values of its requests (in order)."""
        return None


@dataclass(eq=False)
class Value(Part):
    """A result known without computing (data the render step also needs)."""

    value: object

    def finish(self, values):
        return self.value


@dataclass(eq=False)
class Cell(Part):
    """One call ``func(*args)`` (``func`` module-level: it may run in a worker process), at ``dps`` decimal
    digits of mpmath when given; ``key`` (optional, hashable) shares it with equal cells of other figures;
    ``threads``: numpy work that releases the GIL, run on a thread of this process (no process start, no
    copies of its arrays) rather than in a worker process (pure-Python work: the closed forms, drawing)."""

    func: object
    args: tuple = ()
    cost: float = 0.1
    dps: int | None = None
    key: object = None
    threads: bool = False

    def requests(self):
        key = ("cell", id(self)) if self.key is None else ("cell", self.key, self.dps)
        return [(key, ("call", (self.func, self.args, self.dps), self.threads), self.cost)]

    def finish(self, values):
        return values[0]


@dataclass(eq=False)
class Curve(Part):
    """``[float(func(*args, x, **kwargs)) for x in xs]`` at ``dps`` decimal digits (a closed form of
    :mod:`theory`); ``cost``: estimated CPU-seconds per point."""

    func: object
    args: tuple
    xs: tuple
    kwargs: tuple = ()
    dps: int = 20
    cost: float = 0.005

    def __post_init__(self):
        self.xs = tuple(float(x) for x in self.xs)
        if isinstance(self.kwargs, dict):
            self.kwargs = tuple(sorted(self.kwargs.items()))

    def group(self):
        return (f"{self.func.__module__}.{self.func.__qualname__}", self.args, self.kwargs, self.dps)

    def requests(self):
        g = self.group()
        return [(("point", g, x), ("point", (self.func, self.args, self.kwargs, self.dps, x), False), self.cost)
                for x in self.xs]

    def finish(self, values):
        return list(values)


@dataclass(eq=False)
class Planned(Part):
    """The units of a :class:`~montecarlo.experiments._plan.SweepPlan`; ``seconds_per_cost`` converts the
    plan's cost estimates to CPU-seconds (for the schedule only); ``threads`` as :class:`Cell` (the
    experiments' units are numpy work, written for joblib's threads)."""

    plan: object
    seconds_per_cost: float = 1e-9
    threads: bool = True

    def requests(self):
        p = self.plan
        return [(("plan", id(self), i), ("call", (p.func, tuple(u), None), self.threads),
                 float(c) * self.seconds_per_cost) for i, (u, c) in enumerate(zip(p.units, p.costs))]

    def finish(self, values):
        return self.plan.finish(list(values))


def _call(func, args, dps):
    if dps is None:
        return func(*args)
    from mpmath import mp

    with mp.workdps(dps):
        return func(*args)


def _run_unit(unit):
    """One unit of the sweep: ``[(value or Failed, cpu_seconds)]`` for its requests (a batch of points of one
    closed form, or one call).  Runs in a worker process (or in this one with one worker)."""
    kind, payload = unit[:2]
    out = []
    if kind == "call":
        c0 = time.thread_time()
        try:
            value = _call(*payload)
        except Exception as exc:  # recorded, the figure fails, the sweep goes on
            value = Failed.of(exc)
        out.append((value, time.thread_time() - c0))
        return out
    for func, args, kwargs, dps, x in payload:  # "points": one closed form at several x
        c0 = time.thread_time()
        try:
            value = float(_call(lambda: func(*args, x, **dict(kwargs)), (), dps))
        except Exception as exc:
            value = Failed.of(exc)
        out.append((value, time.thread_time() - c0))
    return out


def _units(parts_by_owner):
    """The distinct requests of every part, batched into units: ``(units, costs, where)`` with ``where[k]`` the
    request keys of unit k."""
    seen, points = {}, {}
    for parts in parts_by_owner.values():
        for part in parts.values():
            for key, unit, cost in part.requests():
                if key in seen:
                    continue
                seen[key] = (unit, cost)
                if unit[0] == "point":
                    points.setdefault(key[1], []).append(key)
    units, costs, where = [], [], []
    for key, (unit, cost) in seen.items():
        if unit[0] != "point":
            units.append(unit)
            costs.append(cost)
            where.append([key])
    for keys in points.values():
        for lo in range(0, len(keys), POINTS_PER_UNIT):
            batch = keys[lo:lo + POINTS_PER_UNIT]
            units.append(("points", [seen[k][0][1] for k in batch], False))
            costs.append(sum(seen[k][1] for k in batch))
            where.append(batch)
    return units, costs, where


#: Environment of the worker processes: one thread in every native thread pool (each unit also runs under
#: :func:`~montecarlo.experiments.sweeps.one_blas_thread`).
WORKER_ENV = {var: "1" for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                                   "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")}
#: Seconds an idle worker process waits for more units before it exits (loky's reusable executor; the forked
#: pool's workers end with the process).
WORKER_IDLE_TIMEOUT = 300


def _process_executor(n_proc):
    """``n_proc`` worker processes, started on first use and reused by the next sweep of this process
    (:func:`_stop_workers` kills them).

    On Linux they are forked from this process (:func:`_forked_executor`): a forked worker starts with this
    process's modules imported, where a fresh interpreter (joblib's loky executor, used elsewhere, and when this
    process has loaded torch or cupy, whose thread pools and devices do not survive a fork: ``--backend torch``)
    first spends about :data:`WORKER_START` CPU-seconds on Python, numpy, mpmath, matplotlib and the figures'
    modules."""
    if _FORK and not any(lib in sys.modules for lib in _NOT_FORK_SAFE):
        return _forked_executor(n_proc)
    from joblib.externals.loky import get_reusable_executor

    return get_reusable_executor(max_workers=n_proc, timeout=WORKER_IDLE_TIMEOUT, env=WORKER_ENV)


#: Whether the worker processes are forked (Linux; macOS's system libraries are not safe to fork).
_FORK = sys.platform.startswith("linux")
#: Libraries that, once loaded in this process, rule out forking it (GNU OpenMP's pool, CUDA contexts).
_NOT_FORK_SAFE = ("torch", "cupy")
#: The forked pool: (pid of the process that made it, n_proc, executor), or None.
_FORKED = None


def _forked_executor(n_proc):
    """A :class:`concurrent.futures.ProcessPoolExecutor` of ``n_proc`` processes forked from this one (all at its
    first ``submit``; kept for the next sweep unless it broke or another size is asked for).

    Forking is safe here: :func:`_schedule` submits the first units, which forks the workers, before it starts
    its threads, and torch and cupy are not loaded (:data:`_NOT_FORK_SAFE`); the BLAS pool, the
    montecarlo thread pools and :func:`~montecarlo.experiments.sweeps.one_blas_thread` handle the fork
    (``os.register_at_fork``).  The workers ignore Ctrl-C (the main process handles it and kills them) and
    die of SIGTERM."""
    import concurrent.futures as cf
    import multiprocessing

    global _FORKED
    if _FORKED is not None:
        pid, n, ex = _FORKED
        if pid == os.getpid() and n == n_proc and not getattr(ex, "_broken", False):
            return ex
        if pid == os.getpid():
            ex.shutdown(wait=False, cancel_futures=True)
        _FORKED = None
    ex = cf.ProcessPoolExecutor(n_proc, mp_context=multiprocessing.get_context("fork"), initializer=_worker_start,
                                initargs=(os.getpid(), _PARENT_DEATH_SIGNAL))
    _FORKED = (os.getpid(), n_proc, ex)
    return ex


#: The signal a forked worker gets when the process that forked it dies (Linux's PR_SET_PDEATHSIG; a main
#: process killed with SIGKILL leaves no worker behind, where the pool's own shutdown never runs); None: none.
_PARENT_DEATH_SIGNAL = 15  # SIGTERM


def _worker_start(parent, death_signal):
    """In a forked worker: Ctrl-C is the main process's to handle, SIGTERM ends the worker (not the main
    process's handler that turns it into an exception), one thread in every native pool (:data:`WORKER_ENV`,
    for libraries the units load later), and ``death_signal`` when the process ``parent`` that forked it dies
    (the worker ends at once if it already has)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.environ.update(WORKER_ENV)
    if death_signal is not None:
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(death_signal))  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # (no prctl: the pool's shutdown still ends the workers)
            return
        if os.getppid() != parent:
            os._exit(1)


def _pinned(func, unit):
    """``func(unit)`` with one BLAS thread and underflow silenced (in a worker process or on a thread)."""
    from montecarlo.experiments.sweeps import pinned_call

    return pinned_call(func, (unit,))


class _Threads:
    """A pool of daemon threads with ``submit`` returning :class:`concurrent.futures.Future` (a thread still
    running a unit when the command is interrupted does not hold up its exit, as the standard executor's
    threads, which the interpreter joins at exit, would)."""

    def __init__(self, n, name):
        import queue

        self.jobs = queue.SimpleQueue()
        self.threads = [threading.Thread(target=self._work, name=f"{name}-{k}", daemon=True) for k in range(n)]
        for t in self.threads:
            t.start()

    def _work(self):
        while True:
            job = self.jobs.get()
            if job is None:
                return
            fut, func, args = job
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(func(*args))
            except BaseException as exc:
                fut.set_exception(exc)

    def submit(self, func, *args):
        import concurrent.futures as cf

        fut = cf.Future()
        self.jobs.put((fut, func, args))
        return fut

    def shutdown(self):
        """No new jobs; the threads exit after their current one."""
        for _ in self.threads:
            self.jobs.put(None)


def _schedule(func, units, on_thread, costs, n_jobs, progress, label):
    """``[func(u) for u in units]`` with at most ``n_jobs`` units running at any time: a unit with ``on_thread``
    true (numpy work that releases the GIL) on a thread of this process, the others (pure-Python work) on
    :func:`process_workers` worker processes (or, when that is one, on one thread of this process: no process
    start); whenever one finishes, the largest pending unit (estimated cost) that a free worker of its kind can
    take starts.  So each core runs one unit at a time (before, a pool of threads and a pool of processes of
    ``n_jobs`` each ran at once: twice as many busy workers as cores, 10-15 % more CPU time).  With one worker,
    or only pure-Python units and one worker for them, all in this thread.

    The results do not depend on the schedule (every unit is seeded by its own keys)."""
    import concurrent.futures as cf
    import joblib

    from montecarlo.experiments.sweeps import one_blas_thread, units_ticker

    n = len(units)
    if not n:
        return []
    slots = joblib.effective_n_jobs(-1 if n_jobs is None else n_jobs)
    order = sorted(range(n), key=lambda i: (-costs[i], i))
    pending = {True: [i for i in order if on_thread[i]], False: [i for i in order if not on_thread[i]]}
    n_proc = process_workers(n_jobs, sum(costs[i] for i in pending[False])) if pending[False] and slots > 1 else 0
    out = [None] * n
    tick = units_ticker(progress, n, label)
    with one_blas_thread():
        if slots == 1 or n == 1 or (not pending[True] and n_proc == 1):
            for done, i in enumerate(order, 1):
                out[i] = _pinned(func, units[i])
                tick(done)
            return out
        limit = {True: slots, False: n_proc}
        busy = {True: 0, False: 0}
        running = {}
        executor = {True: None, False: None}
        if n_proc > 1:
            executor[False] = _process_executor(n_proc)
        elif n_proc == 1:  # little pure-Python work: one thread of this process
            executor[False] = _Threads(1, "figures-sweep-python")
        done = 0
        try:
            if n_proc > 1:  # the worker processes start (forked: before this process starts its threads)
                for _ in range(min(n_proc, slots - 1 if pending[True] else slots, len(pending[False]))):
                    i = pending[False].pop(0)
                    running[executor[False].submit(_pinned, func, units[i])] = (False, i)
                    busy[False] += 1
            if pending[True]:
                executor[True] = _Threads(min(slots, len(pending[True])), "figures-sweep")
            if pending[True] and len(pending[True]) + len(pending[False]) + len(running) > 1:
                # lazy imports are not safe to race across threads (run_units' warm-up): the cheapest threaded
                # unit first, here, while the worker processes start on their first units
                i = pending[True].pop()
                out[i] = _pinned(func, units[i])
                done += 1
                tick(done)
            while pending[True] or pending[False] or running:
                while len(running) < slots:
                    free = [pending[k][0] for k in (True, False) if pending[k] and busy[k] < limit[k]]
                    if not free:
                        break
                    i = min(free, key=lambda j: (-costs[j], j))
                    kind = bool(on_thread[i])
                    pending[kind].pop(0)
                    running[executor[kind].submit(_pinned, func, units[i])] = (kind, i)
                    busy[kind] += 1
                finished, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
                for fut in finished:
                    kind, i = running.pop(fut)
                    busy[kind] -= 1
                    out[i] = fut.result()  # a unit's own exception is a Failed result; this raises if a pool broke
                    done += 1
                    tick(done)
        except BaseException:  # Ctrl-C, SIGTERM or a broken pool: stop the worker processes, drop queued units
            if n_proc > 1:
                _stop_workers()
            raise
        finally:
            for ex in executor.values():
                if isinstance(ex, _Threads):
                    ex.shutdown()
    return out


def _run(units, costs, n_jobs, progress, label):
    """Every unit's result, in order (:func:`_schedule`: ``unit[2]`` says whether it runs on a thread)."""
    return _schedule(_run_unit, units, [bool(u[2]) for u in units], costs, n_jobs, progress, label)


#: CPU-seconds a fresh worker process costs before its first unit (Python, numpy, theory, montecarlo and the
#: figures' modules with matplotlib imported: loky's workers), and the least work that pays for one.  (A worker
#: forked on Linux starts with those imported and costs far less; the same threshold is kept.)
WORKER_START = 2.0


def process_workers(n_jobs, work):
    """Worker processes for ``work`` estimated CPU-seconds of pure-Python units: ``n_jobs`` (None: every core),
    but no more than one per ``2 * WORKER_START`` seconds of work (on 64 cores, 64 workers each importing the
    figures' modules would cost more than the closed forms they share out)."""
    import joblib

    workers = joblib.effective_n_jobs(-1 if n_jobs is None else n_jobs)
    return max(1, min(workers, int(work // (2 * WORKER_START)) or 1))


def _stop_workers():
    """Kill the worker processes (the forked pool's, or joblib's reusable loky executor's), if some run (after
    an interruption; never starts any)."""
    global _FORKED
    try:
        if _FORKED is not None and _FORKED[0] == os.getpid():
            ex = _FORKED[2]
            _FORKED = None
            _kill(list((getattr(ex, "_processes", None) or {}).values()))
            ex.shutdown(wait=False, cancel_futures=True)
        from joblib.externals.loky import reusable_executor

        executor = reusable_executor._executor
        if executor is None:
            return
        _kill(list(getattr(executor, "_processes", {}).values()))
        executor.shutdown(wait=False, kill_workers=True)
    except Exception:  # nothing to stop
        pass


def _kill(workers):
    """Kill the worker processes ``workers`` at once (an executor's own shutdown kills them from a thread that
    may not run again) and reap them."""
    for w in workers:
        try:
            w.kill()
        except Exception:
            pass
    for w in workers:
        try:
            w.join(timeout=5)
        except Exception:
            pass


def compute(parts_by_owner, n_jobs=None, progress=None, label="cells"):
    """Run every part of every owner in one sweep.

    Parameters
    ----------
    parts_by_owner : dict
        owner (a figure's name) -> {part name: :class:`Part`}.
    n_jobs : None or nonzero int
        Units running at once, on threads and worker processes together (None: every core; 1: all in this
        process; :func:`_schedule`).
    progress : callable, optional
        Called with a ``montecarlo.experiments.sweeps.UnitsDone`` at most once a second and at the end.

    Returns
    -------
    results : dict
        owner -> {part name: result, or :class:`Failed`}.
    cpu : dict
        owner -> CPU-seconds of its units (a unit shared by several owners counts for each).
    """
    units, costs, where = _units(parts_by_owner)
    values = {}
    for keys, out in zip(where, _run(units, costs, n_jobs, progress, label)):
        values.update(zip(keys, out))
    results, cpu = {}, {}
    for owner, parts in parts_by_owner.items():
        results[owner], cpu[owner] = {}, 0.0
        for name, part in parts.items():
            got = [values[key] for key, _, _ in part.requests()]
            cpu[owner] += sum(c for _, c in got)
            failed = next((v for v, _ in got if isinstance(v, Failed)), None)
            if failed is not None:
                results[owner][name] = failed
                continue
            try:
                results[owner][name] = part.finish([v for v, _ in got])
            except Exception as exc:
                results[owner][name] = Failed.of(exc)
    return results, cpu


def raise_failed(results):
    """Raise the exception of the first :class:`Failed` result (a figure cannot be drawn without it)."""
    for value in results.values():
        if isinstance(value, Failed):
            raise value.exc
    return results


def _render_unit(unit):
    """Draw one figure from its results in this process and keep its files' bytes (a unit of the drawing
    sweep): an outcome dict (``status``, ``reason``, ``files``, ``seconds``, ``cpu_seconds``)."""
    from ._context import Context
    from .downstream import Skip
    from .registry import FIGURES_BY_NAME
    from .style import use_paper_style

    name, settings, results = unit
    t0, c0 = time.perf_counter(), time.process_time()
    ctx = Context(**settings, progress=False, n_jobs=1, capture=True)
    use_paper_style()
    out = {"status": "written", "reason": None, "files": None}
    try:
        FIGURES_BY_NAME[name].render(ctx, results)
        out["files"] = ctx.captured[name]
    except Skip as exc:
        out.update(status="skipped", reason=str(exc))
    except Exception as exc:
        failure = Failed.of(exc)
        out.update(status="failed", reason=failure.reason, traceback=failure.traceback)
    out["seconds"], out["cpu_seconds"] = time.perf_counter() - t0, time.process_time() - c0
    return out


#: Estimated CPU-seconds of drawing and saving each figure (PNG and PDF; the schedule only).
RENDER_COST = {"new_attention_scan": 3.0, "fig8_nonparametric": 2.5, "fig10_sigma_search": 2.5,
               "new_winners_map": 2.0, "new_rff_mse_ratio": 2.0}


def render(ctx, items, progress=None):
    """Draw ``[(figure name, results)]`` on ``ctx.n_jobs`` worker processes (:func:`_schedule`); the outcomes in
    order (:func:`_render_unit`: each figure's files as bytes, for the caller to write)."""
    settings = ctx.settings()
    return _schedule(_render_unit, [(name, settings, res) for name, res in items], [False] * len(items),
                     [RENDER_COST.get(name, 1.0) for name, _ in items], ctx.n_jobs, progress, "drawing")


#: Exit statuses of an interrupted command (Ctrl-C, SIGTERM).
INTERRUPTED = (130, 143)


def exit_now(status):
    """End a command line with ``status``; after an interruption (130, 143) the worker processes are killed
    first, at once (:func:`_stop_workers`): left to the pool's own shutdown they kept running, holding the
    command's output open, and its exit waited for them."""
    if status in INTERRUPTED:
        _stop_workers()
    raise SystemExit(status)
