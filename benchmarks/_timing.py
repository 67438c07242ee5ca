"""Timing helpers shared by the benchmarks: interleaved repeats and ratios of minima/medians."""

from __future__ import annotations

import time

import numpy as np


def interleaved(fns, repeat):
    """Time each callable ``repeat`` times, round-robin; returns name -> list of seconds."""
    times = {k: [] for k in fns}
    for f in fns.values():  # warm-up
        f()
    for _ in range(repeat):
        for k, f in fns.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    return times


def ratio(times, num, den):
    """(ratio of minima, ratio of medians) of two entries of :func:`interleaved`'s result."""
    a, b = times[num], times[den]
    return min(a) / min(b), float(np.median(a) / np.median(b))
