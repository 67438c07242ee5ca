"""Root conftest: one BLAS/OpenMP thread per test process.

CI runs ``pytest -n 2`` on 2 cores; each xdist worker is one process, so
multi-threaded BLAS would oversubscribe the cores (measured 5-25x slower for
mid-size products on the CI machine).  Set before numpy is imported by any
test module; an explicit user setting wins.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

# Triton (installed by CI for these tests) runs kernels in its interpreter, on numpy, where there is no
# NVIDIA device, so that the fused kernels of montecarlo.nn._fused are tested on the CPU.  Set before Triton
# is imported: its own library functions are decorated, compiled or interpreted, at import.
if not os.path.exists("/dev/nvidiactl"):
    os.environ.setdefault("TRITON_INTERPRET", "1")


import sys  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _forked_sweep_workers_ended():
    """A test that ran a figures sweep in this process ends its forked worker processes (figures._sweep keeps
    its pool for the process's next sweep; a test process's tests must not leave processes running)."""
    yield
    sweep = sys.modules.get("figures._sweep")
    if sweep is not None and getattr(sweep, "_FORKED", None) is not None:
        sweep._stop_workers()
