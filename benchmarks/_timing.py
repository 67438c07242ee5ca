"""Timing helpers shared by the benchmarks: interleaved repeats and ratios of minima/medians."""

from __future__ import annotations

import time

import numpy as np


def interleaved(fns, repeat, clock=time.perf_counter):
    """Time each callable ``repeat`` times, round-robin, after one warm-up call each; returns name -> list of
    seconds of ``clock`` (wall time by default; ``time.process_time`` for CPU time, which other jobs on a
    shared machine change little)."""
    times = {k: [] for k in fns}
    for f in fns.values():  # warm-up
        f()
    for _ in range(repeat):
        for k, f in fns.items():
            t0 = clock()
            f()
            times[k].append(clock() - t0)
    return times


def ratio(times, num, den):
    """(ratio of minima, ratio of medians) of two entries of :func:`interleaved`'s result."""
    a, b = times[num], times[den]
    return min(a) / min(b), float(np.median(a) / np.median(b))
