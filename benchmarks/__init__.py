"""Speed ratios, each against a baseline measured in the same process (``python -m benchmarks.bench_*``).

The machines are noisy, so every benchmark reports a ratio of interleaved
timings (:func:`benchmarks._timing.ratio`), never an absolute time, and no
test asserts a time.  See ``benchmarks/README.md`` for the measured numbers.
"""
