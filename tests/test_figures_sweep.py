"""Tests of :mod:`figures._sweep`: the scheduler of the figures' cells."""


class _Overlap:
    """Counts the units running at once (threads of this process standing in for the worker processes)."""

    def __init__(self):
        import threading

        self.lock, self.now, self.most, self.mixed = threading.Lock(), {}, 0, False

    def unit(self, kind, k):
        import time

        with self.lock:
            self.now[kind, k] = True
            kinds = {key[0] for key in self.now}
            self.most, self.mixed = max(self.most, len(self.now)), self.mixed or len(kinds) == 2
        time.sleep(0.05)
        with self.lock:
            del self.now[kind, k]
        return k * k


def test_sweep_runs_at_most_n_jobs_units_at_once(monkeypatch):
    """Issue 42: the figures' sweep runs at most n_jobs units at once, numpy units on threads and pure-Python
    ones on worker processes sharing the n_jobs (before, a thread pool and a process pool of n_jobs each ran at
    once: 4 busy workers on 2 cores).  The worker processes are threads here, so that one counter sees every
    unit; the numbers are those of n_jobs = 1.

    Power: both kinds ran at the same time (the schedule mixes them, so without the cap 4 would have run)."""
    from figures import _sweep

    overlap = _Overlap()
    monkeypatch.setattr(_sweep, "_process_executor", lambda n: _sweep._Threads(n, "test-processes"))
    parts = {"fig": {**{("t", k): _sweep.Cell(overlap.unit, ("numpy", k), cost=1.0, threads=True) for k in range(8)},
                     **{("p", k): _sweep.Cell(overlap.unit, ("python", k), cost=1.0) for k in range(8)}}}
    results, _ = _sweep.compute(parts, n_jobs=2)
    assert results["fig"] == {(kind, k): k * k for kind in ("t", "p") for k in range(8)}
    assert overlap.most == 2 and overlap.mixed
    assert _sweep.compute(parts, n_jobs=1)[0] == results


#: Set by the test below in this (the parent) process just before its sweep: a forked worker sees it, a freshly
#: started interpreter (joblib's loky workers before) imports this module anew and sees None.
_MARK = None


def _probe(k):
    """A pure-Python unit: the worker's process id, the parent's mark as the worker sees it, and k squared."""
    import os

    return os.getpid(), _MARK, k * k


def test_worker_processes_are_forked_from_the_main_process(monkeypatch):
    """Issue 42 (main job within its promise): each of the sweep's worker processes was a fresh interpreter
    (loky) that imported Python, numpy, mpmath, matplotlib and the figures' modules before its first unit, about
    2 CPU-seconds each of the main job's budget; on Linux they are now forked from the main process, so they
    start with its modules (and its state: the mark set here just before the sweep).  The units ran in other
    processes (not threads of this one), and the results are those of one process.  A process that has loaded
    torch or cupy (``--backend torch``; stood in for by numpy here) is not forked: loky's workers.

    Power: under loky the workers do not see the mark (they import this module afresh: ``_MARK`` is None)."""
    import os
    import sys

    import pytest

    from figures import _sweep

    if not sys.platform.startswith("linux"):
        pytest.skip("the workers are forked on Linux only")
    global _MARK
    import concurrent.futures as cf

    _sweep._stop_workers()  # a pool another test left in this process was forked before the mark
    monkeypatch.setattr(_sweep, "_NOT_FORK_SAFE", ("numpy",))
    assert not isinstance(_sweep._process_executor(2), cf.ProcessPoolExecutor) and _sweep._FORKED is None
    _sweep._stop_workers()
    monkeypatch.setattr(_sweep, "_NOT_FORK_SAFE", ())  # (torch may be loaded by other tests in this process)
    _MARK = ("set in the parent", os.getpid())
    try:
        parts = {"fig": {k: _sweep.Cell(_probe, (k,), cost=10.0) for k in range(6)}}
        results, _ = _sweep.compute(parts, n_jobs=2)
        pool = _sweep._FORKED[2]
        workers = set(pool._processes)
        pids = {pid for pid, _, _ in results["fig"].values()}
        assert os.getpid() not in pids and pids <= workers and len(workers) == 2
        assert all(mark == _MARK for _, mark, _ in results["fig"].values())
        assert [sq for _, _, sq in results["fig"].values()] == [k * k for k in range(6)]
        again, _ = _sweep.compute(parts, n_jobs=2)  # the pool is kept for the next sweep (the drawing's)
        assert _sweep._FORKED[2] is pool and {pid for pid, _, _ in again["fig"].values()} <= workers
    finally:
        _MARK = None
        _sweep._stop_workers()
    assert _sweep._FORKED is None


_ORPHAN_SCRIPT = r"""
import sys, time
from figures import _sweep
if sys.argv[1] == "off":
    _sweep._PARENT_DEATH_SIGNAL = None
ex = _sweep._forked_executor(2)
ex.submit(abs, -1).result()
print(" ".join(str(p) for p in ex._processes), flush=True)
time.sleep(600)
"""


def _alive(pid):
    """Whether process ``pid`` runs (a zombie, dead but not yet reaped, counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_forked_workers_end_when_the_main_process_is_killed():
    """The forked pool's workers get SIGTERM when the process that forked them dies (PR_SET_PDEATHSIG): a main
    job killed with SIGKILL, whose pool never shuts down, leaves no worker waiting on its queue forever.
    Power: with the signal switched off the workers outlive it (and are killed here)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import pytest

    if not sys.platform.startswith("linux"):
        pytest.skip("the workers are forked on Linux only")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    survivors = {}
    for mode in ("on", "off"):
        proc = subprocess.Popen([sys.executable, "-c", _ORPHAN_SCRIPT, mode], stdout=subprocess.PIPE, text=True,
                                env=env, start_new_session=True)
        try:
            pids = [int(p) for p in proc.stdout.readline().split()]
            assert len(pids) == 2 and all(_alive(p) for p in pids)
            proc.kill()
            proc.wait(timeout=300)
            deadline = time.monotonic() + 60  # (a hang guard: the signal is immediate)
            while any(_alive(p) for p in pids) and mode == "on" and time.monotonic() < deadline:
                time.sleep(0.05)
            if mode == "off":
                time.sleep(1.0)
            survivors[mode] = [p for p in pids if _alive(p)]
        finally:
            for p in pids if "pids" in dir() else []:
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert survivors["on"] == [] and len(survivors["off"]) == 2, survivors
