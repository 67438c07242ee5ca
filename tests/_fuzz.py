"""One call under limits, for the fuzz tables of ``test_montecarlo.py`` and ``test_experiments.py``: CPU seconds
of the process (``ITIMER_PROF``: a loaded machine does not trip it), a wall-clock guard against a hang that burns
no CPU (``ITIMER_REAL``), and the peak of traced allocations (tracemalloc sees numpy's buffers)."""

from __future__ import annotations

import signal
import time
import tracemalloc


class CaseTimeout(BaseException):
    """Raised by SIGPROF/SIGALRM in a case that runs too long (BaseException: library code cannot swallow it)."""


def _alarm(signum, frame):
    raise CaseTimeout


def run_limited(func, args=(), kwargs=None, *, cpu_seconds, wall_seconds):
    """``(kind, value, seconds, peak bytes)`` of ``func(*args, **kwargs)``: kind ``"returned"`` (value: the
    result), ``"raised"`` (value: the exception) or ``"timeout"`` (value None).  The signal handlers and timers
    are restored afterwards."""
    old = signal.signal(signal.SIGALRM, _alarm)
    old_prof = signal.signal(signal.SIGPROF, _alarm)
    tracemalloc.start()
    t0 = time.perf_counter()
    signal.setitimer(signal.ITIMER_PROF, cpu_seconds)
    signal.setitimer(signal.ITIMER_REAL, wall_seconds)
    try:
        result = ("returned", func(*args, **(kwargs or {})))
    except CaseTimeout:
        result = ("timeout", None)
    except Exception as exc:  # noqa: BLE001 (classified by the caller)
        result = ("raised", exc)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        signal.signal(signal.SIGPROF, old_prof)
        seconds = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return result + (seconds, peak)
