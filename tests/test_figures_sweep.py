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
