r"""Every figure's cells through one parallel sweep, closed forms shared between curves computed once.

The units of a sweep: :ref:`guide-figures._sweep` (``docs/guide/experiments.rst``).
"""

from __future__ import annotations

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


def _pool(n_jobs):
    """The joblib configuration of the sweep: worker processes (loky) unless one worker is asked for."""
    import contextlib

    if n_jobs == 1:
        return contextlib.nullcontext()
    from joblib import parallel_config

    return parallel_config(backend="loky", inner_max_num_threads=1)


class _Progress:
    """One progress callback over two sweeps running at once (their units done added up)."""

    def __init__(self, progress, label):
        self.progress, self.label, self.done, self.total = progress, label, {}, {}
        self.lock = threading.Lock()

    def part(self, name, total):
        self.done[name], self.total[name] = 0, total

        def report(message):
            with self.lock:
                self.done[name] = getattr(message, "done", self.done[name])
                done, total = sum(self.done.values()), sum(self.total.values())
                if self.progress is not None:
                    from montecarlo.experiments.sweeps import UnitsDone

                    self.progress(UnitsDone(f"{self.label}: {done}/{total} units", done, total))

        return report


def _run(units, costs, n_jobs, progress, label):
    """Every unit's result, in order: the GIL-free ones (``unit[2]``) on ``n_jobs`` threads of this process,
    the others on ``n_jobs`` worker processes at the same time (a second thread drives that pool); with one
    worker, all in this process."""
    from montecarlo.experiments.sweeps import run_units

    if not units:
        return []
    if n_jobs == 1:
        return run_units(_run_unit, [(u,) for u in units], n_jobs=1, costs=costs, progress=progress, label=label)
    threaded = [i for i, u in enumerate(units) if u[2]]
    pooled = [i for i, u in enumerate(units) if not u[2]]
    tracker = _Progress(progress, label)
    out, box = [None] * len(units), {}
    on_threads, on_processes = tracker.part("threads", len(threaded)), tracker.part("processes", len(pooled))

    n_proc = process_workers(n_jobs, sum(costs[i] for i in pooled))

    def processes():
        try:
            with _pool(n_proc):
                box["done"] = run_units(_run_unit, [(units[i],) for i in pooled], n_jobs=n_proc,
                                        costs=[costs[i] for i in pooled], progress=on_processes, label=label,
                                        warm_up=lambda: None)
        except BaseException as exc:  # re-raised in the calling thread
            box["error"] = exc

    worker = threading.Thread(target=processes, name="figures-process-sweep", daemon=True)
    if pooled:
        worker.start()
    try:
        if threaded:
            done = run_units(_run_unit, [(units[i],) for i in threaded], n_jobs=n_jobs,
                             costs=[costs[i] for i in threaded], progress=on_threads, label=label)
            for i, r in zip(threaded, done):
                out[i] = r
        if pooled:
            worker.join()
    except BaseException:  # Ctrl-C or SIGTERM in this thread: stop the worker processes too
        _stop_workers()
        raise
    if "error" in box:
        raise box["error"]
    for i, r in zip(pooled, box.get("done", [])):
        out[i] = r
    return out


#: CPU-seconds a worker process costs before its first unit (Python, numpy, theory, montecarlo and the figures'
#: modules with matplotlib imported), and the least work that pays for one.
WORKER_START = 2.0


def process_workers(n_jobs, work):
    """Worker processes for ``work`` estimated CPU-seconds of pure-Python units: ``n_jobs`` (None: every core),
    but no more than one per ``2 * WORKER_START`` seconds of work (on 64 cores, 64 workers each importing the
    figures' modules would cost more than the closed forms they share out)."""
    import joblib

    workers = joblib.effective_n_jobs(-1 if n_jobs is None else n_jobs)
    return max(1, min(workers, int(work // (2 * WORKER_START)) or 1))


def _stop_workers():
    """Kill the worker processes of joblib's reusable loky executor, if one runs (after an interruption; never
    starts one)."""
    try:
        from joblib.externals.loky import reusable_executor

        executor = reusable_executor._executor
        if executor is None:
            return
        workers = list(getattr(executor, "_processes", {}).values())
        for w in workers:  # at once: the executor's own shutdown kills them from a thread that may not run again
            try:
                w.kill()
            except Exception:
                pass
        for w in workers:
            try:
                w.join(timeout=5)
            except Exception:
                pass
        executor.shutdown(wait=False, kill_workers=True)
    except Exception:  # nothing to stop
        pass


def compute(parts_by_owner, n_jobs=None, progress=None, label="cells"):
    """Run every part of every owner in one sweep.

    Parameters
    ----------
    parts_by_owner : dict
        owner (a figure's name) -> {part name: :class:`Part`}.
    n_jobs : None or nonzero int
        Worker processes (None: every core; 1: this process).
    progress : callable, optional
        :func:`~montecarlo.experiments.sweeps.run_units`' progress callback.

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


def _render_unit(name, settings, results):
    """Draw one figure from its results in this process and keep its files' bytes (a unit of the drawing
    sweep): an outcome dict (``status``, ``reason``, ``files``, ``seconds``, ``cpu_seconds``)."""
    from ._context import Context
    from .downstream import Skip
    from .registry import FIGURES_BY_NAME
    from .style import use_paper_style

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
    """Draw ``[(figure name, results)]`` in one sweep on ``ctx.n_jobs`` worker processes; the outcomes in order
    (:func:`_render_unit`: each figure's files as bytes, for the caller to write)."""
    from montecarlo.experiments.sweeps import run_units

    if not items:
        return []
    settings = ctx.settings()
    n_proc = process_workers(ctx.n_jobs, sum(RENDER_COST.get(name, 1.0) for name, _ in items))
    try:
        with _pool(n_proc):
            return run_units(_render_unit, [(name, settings, res) for name, res in items], n_jobs=n_proc,
                             costs=[RENDER_COST.get(name, 1.0) for name, _ in items], progress=progress,
                             label="drawing", warm_up=lambda: None)
    except BaseException:
        _stop_workers()
        raise


#: Exit statuses of an interrupted command (Ctrl-C, SIGTERM).
INTERRUPTED = (130, 143)


def exit_now(status):
    """End a command line with ``status``; after an interruption (130, 143) the worker processes are killed
    first, at once (:func:`_stop_workers`): left to the pool's own shutdown they kept running, holding the
    command's output open, and its exit waited for them."""
    if status in INTERRUPTED:
        _stop_workers()
    raise SystemExit(status)
