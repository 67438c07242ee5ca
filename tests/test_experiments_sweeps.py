"""The sweeps' engine (issue 21): common random numbers across couplings, parallel units on joblib,
bit-identical numbers for any n_jobs and backend (threads, loky processes, a Dask LocalCluster).

Statistical checks use the thresholds of paper_checks._compare: |z| < Z_CRIT = 4.5 for agreement
(two-sided false alarm 6.8e-6), z > Z_ONE_SIDED = 3.09 for an ordering (0.001), each with a power
check that fails on a wrong alternative.  Tests that start processes (loky, Dask) end them.
"""

import hashlib
import math
import re
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

import montecarlo as mc
from _cli import ROOT, cli_env
from _sweeps import accuracy_table as _table, numbers as _numbers
from montecarlo._checks import AllocationError, MAX_ELEMENTS
from montecarlo.experiments import classification as cl, gram, sweeps, uci
from paper_checks._compare import Z_CRIT, Z_ONE_SIDED

pytestmark = pytest.mark.filterwarnings("ignore:SimRFs\\+ update")


def _toy_split(seed=0, n_train=120, n_test=40, d=5, n_classes=3):
    g = np.random.default_rng(seed)
    centres = g.normal(size=(n_classes, d)) * 1.2
    ytr, yte = g.integers(0, n_classes, n_train), g.integers(0, n_classes, n_test)
    Xtr = centres[ytr] + g.normal(size=(n_train, d))
    Xte = centres[yte] + g.normal(size=(n_test, d))
    return uci.Split("toy", Xtr, ytr, Xte, yte, None, None, n_classes)


# ---------------------------------------------------------------------------
# Common random numbers


@pytest.mark.parametrize("d, m", [(6, 6), (6, 18), (6, 14), (8, 3)])
def test_paired_draws_share_norms_and_rotation_and_use_the_registry_samplers(d, m):
    """Full blocks, several blocks, a truncated last block and m < d: the orthogonal, simplex and
    simplex_plus draws are the registry's own samplers fed one seed (equal to sample_weights with that
    seed), all four couplings share their row norms, and the first IID row of each block is the first
    orthogonal row (the IID rows are built from the Gaussian block behind the Haar rotation).  Power:
    independent draws share nothing."""
    cs = ("iid", "orthogonal", "simplex", "simplex_plus")
    W = sweeps.paired_weights(cs, d, m, 5, np.random.SeedSequence(7))
    for c in cs[1:]:
        ref = mc.sample_weights(c, d, m, rng=np.random.default_rng(np.random.SeedSequence(7)), n_draws=5)
        assert np.array_equal(W[c], ref), c
    norms = {c: np.linalg.norm(W[c], axis=2) for c in cs}
    for c in cs[1:]:
        assert np.allclose(norms[c], norms["iid"], rtol=1e-12, atol=0), c
    assert np.allclose(W["iid"][:, ::d], W["orthogonal"][:, ::d], rtol=1e-12, atol=1e-14)
    indep = sweeps.paired_weights(cs, d, m, 5, np.random.SeedSequence(7), paired=False)
    assert not np.allclose(np.linalg.norm(indep["iid"], axis=2), np.linalg.norm(indep["orthogonal"], axis=2))
    assert W["iid"].shape == (5, m, d) and W["iid"].dtype == np.float64


def test_paired_iid_rows_are_iid_gaussian_with_power():
    """The paired IID rows are N(0, I_d), independent within a block: over 4000 blocks (d = 4) the
    coordinates have mean 0 and variance 1 and the in-block dot products w_i.w_j have mean 0 and
    variance d (|z| < 4.5 each, z from the sample standard error).  Power: the orthogonal rows of the
    same draw (w_i.w_j = 0 exactly) fail the dot-product variance check."""
    d, n = 4, 4000
    W = sweeps.paired_weights(("iid", "orthogonal"), d, d, n, 11)

    def z_checks(w):
        flat = w.reshape(-1)
        z_mean = flat.mean() / (flat.std(ddof=1) / math.sqrt(flat.size))
        sq = flat ** 2
        z_var = (sq.mean() - 1) / (sq.std(ddof=1) / math.sqrt(sq.size))
        dots = np.einsum("bd,bd->b", w[:, 0], w[:, 1])  # one pair per block: independent across blocks
        z_dot = dots.mean() / (dots.std(ddof=1) / math.sqrt(n))
        d2 = dots ** 2
        z_dvar = (d2.mean() - d) / (d2.std(ddof=1) / math.sqrt(n))
        return z_mean, z_var, z_dot, z_dvar

    for z in z_checks(W["iid"]):
        assert abs(z) < Z_CRIT, z
    assert abs(z_checks(W["orthogonal"])[3]) > Z_CRIT  # power


def test_independent_mode_keys_each_coupling_by_its_registry_index():
    """paired=False: a coupling's draws do not depend on which other couplings are drawn with it."""
    a = sweeps.paired_weights(("iid", "simplex"), 5, 10, 3, 4, paired=False)
    b = sweeps.paired_weights(("simplex",), 5, 10, 3, 4, paired=False)
    assert np.array_equal(a["simplex"], b["simplex"])
    c = sweeps.paired_weights(("simplex", "iid"), 5, 10, 3, 4)
    assert np.array_equal(c["simplex"], sweeps.paired_weights(("simplex",), 5, 10, 3, 4)["simplex"])


def test_paired_standard_error_is_right_and_smaller_than_the_unpaired_one():
    """The paired design's error bar is the spread of its estimate: over 150 independent repetitions of
    a 40-draw Gram-error cell (N = 8, d = 16, m = 8 < d, |x| ~ 0.4), the mean squared reported standard
    error of SimRF - ORF matches the variance of the 150 estimates (ratio in [0.7, 1.4]; the ratio's own
    s.d. is about 0.12), and it is below half the unpaired hypot(se_SimRF, se_ORF) (the first rows of
    the two blocks nearly coincide; measured 0.34).  Power: the variance against the unpaired formula
    is off by more than 4 times (measured 9.3)."""
    X = gram.paper_gram_data(rng=1, n_points=8, d=16, scale=0.1)
    est, se, unpaired = [], [], []
    for rep in range(150):
        r = gram.frobenius_curve(X, ("orthogonal", "simplex"), (8,), 40, rng=rep, n_jobs=1)
        est.append(r.diff_mean["simplex", "orthogonal"][0])
        se.append(r.diff_stderr["simplex", "orthogonal"][0])
        unpaired.append(math.hypot(r.stderr["simplex"][0], r.stderr["orthogonal"][0]))
    var = np.var(est, ddof=1)
    assert 0.7 <= np.mean(np.square(se)) / var <= 1.4
    assert np.mean(se) < 0.5 * np.mean(unpaired)
    assert np.mean(np.square(unpaired)) / var > 4


def test_paired_and_independent_designs_estimate_the_same_difference():
    """Pairing changes the noise, not the target: on banknote (the authors' split, m = d) the paired and
    the independent SimRF - IID differences (800 draws each) agree within Z_CRIT combined standard
    errors, and SimRF beats IID in both (one-sided z > 3.09).  Power: a difference shifted by 0.05 is
    rejected.  With independent draws the difference's standard error is that of two independent
    means, hypot(se_SimRF, se_IID) (within 25%)."""
    split = uci.make_split("banknote", "paper")
    kw = dict(couplings=("iid", "simplex"), m_multipliers=(1,), n_draws=800, rng=3, n_jobs=1)
    p = cl.classification_curve(split, paired=True, **kw)
    q = cl.classification_curve(split, paired=False, **kw)
    dp, sp = p.diff_mean["simplex", "iid"][0], p.diff_stderr["simplex", "iid"][0]
    dq, sq = q.diff_mean["simplex", "iid"][0], q.diff_stderr["simplex", "iid"][0]
    assert p.paired and not q.paired
    assert abs(dp - dq) / math.hypot(sp, sq) < Z_CRIT
    assert abs(dp - dq + 0.05) / math.hypot(sp, sq) > Z_CRIT
    assert p.z("simplex", "iid")[0] > Z_ONE_SIDED and q.z("simplex", "iid")[0] > Z_ONE_SIDED
    assert p.z("iid", "simplex")[0] == -p.z("simplex", "iid")[0]
    assert sq == pytest.approx(math.hypot(q.stderr["simplex"][0], q.stderr["iid"][0]), rel=0.25)


# ---------------------------------------------------------------------------
# Parallel units


def _unit(i, scale):
    from threadpoolctl import threadpool_info

    blas = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
    return i * scale, max(blas, default=1)


def test_run_units_keeps_the_order_and_pins_blas_to_one_thread():
    """Results come back in the units' order whatever the dispatch order (costs), every unit runs with
    one BLAS thread, and the caller's BLAS limits are restored afterwards."""
    from threadpoolctl import threadpool_info

    before = [p["num_threads"] for p in threadpool_info()]
    units = [(i, 3) for i in range(9)]
    for n_jobs in (1, 2):
        out = sweeps.run_units(_unit, units, n_jobs=n_jobs, costs=[(i * 7) % 5 for i in range(9)])
        assert [r[0] for r in out] == [3 * i for i in range(9)]
        assert {r[1] for r in out} == {1}
    assert [p["num_threads"] for p in threadpool_info()] == before
    lines = []
    sweeps.run_units(_unit, units[:2], n_jobs=1, progress=lines.append, label="toy")
    assert lines[-1].startswith("toy: 2/2 units, ")
    with pytest.raises(ValueError, match="costs must have one entry per unit"):
        sweeps.run_units(_unit, units, costs=[1.0])


def _threads_seen(i, seen):
    import threading
    import time

    seen.append(threading.active_count())
    time.sleep(0.02)  # (every unit overlaps the pool's start-up: all workers the pool made are alive)
    return i


def test_a_sweep_starts_no_more_workers_than_units(monkeypatch):
    """Issue 38: n_jobs = 300 started 303 threads for 8 units (and loky one process per n_jobs): joblib starts
    every worker up front.  Now at most one worker per unit left after the warm-up: the threads alive during
    the units (joblib's thread pool adds 3 of its own) and the n_jobs that joblib is given, for the threading
    backend and an active parallel_config (loky: recorded, not started); the results are unchanged."""
    import threading

    import joblib

    base = threading.active_count()
    seen = []
    out = sweeps.run_units(_threads_seen, [(i, seen) for i in range(8)], n_jobs=200)
    assert out == list(range(8)) and max(seen) <= base + 7 + 3
    given = []
    real = joblib.Parallel

    def recording(*args, **kwargs):
        given.append(kwargs["n_jobs"])
        return real(*args, **{**kwargs, "backend": "threading"})

    monkeypatch.setattr(joblib, "Parallel", recording)
    with joblib.parallel_config(backend="loky", n_jobs=24):
        assert sweeps.run_units(_unit, [(i, 2) for i in range(4)]) == [(2 * i, 1) for i in range(4)]
    assert sweeps.run_units(_unit, [(i, 2) for i in range(30)], n_jobs=256)[-1] == (58, 1)
    assert given == [3, 29]


@pytest.mark.parametrize("bad", [257, -257, 20000, 500001, 2**14286], ids=["257", "-257", "20000", "500001", "2^14286"])
def test_n_jobs_beyond_its_documented_bound_is_refused_by_name(bad):
    """|n_jobs| <= MAX_N_JOBS = 256 (issue 38: n_jobs >= 500001 failed inside joblib with 'Numeric literal ...
    too large', n_jobs = 20000 ran 12 s starting threads), in the functions and in the command line."""
    assert sweeps.MAX_N_JOBS == 256 and sweeps.check_n_jobs(-256) == -256 and sweeps.check_n_jobs(256) == 256
    with pytest.raises(ValueError, match=r"^n_jobs must be None or a nonzero integer in \[-256, 256\] .*got "):
        gram.frobenius_curve(np.ones((3, 2)), n_draws=2, n_jobs=bad)


@pytest.mark.parametrize("bad, exc", [(0, ValueError), (True, TypeError), (1.5, TypeError), ("2", TypeError)])
def test_n_jobs_is_checked_by_name(bad, exc):
    with pytest.raises(exc, match="n_jobs must be None or a nonzero integer"):
        cl.accuracy_table(n_draws=2, datasets=["banknote"], n_jobs=bad)
    with pytest.raises(exc, match="n_jobs must be None or a nonzero integer"):
        gram.frobenius_curve(np.ones((3, 2)), n_draws=2, n_jobs=bad)


def test_draw_blocks_do_not_depend_on_n_jobs_and_extend_with_more_draws():
    assert sweeps.draw_blocks(60) == [(0, 25), (1, 25), (2, 10)]
    assert sweeps.draw_blocks(25) == [(0, 25)]
    with pytest.raises(ValueError, match="n_draws"):
        sweeps.draw_blocks(10**12)


@pytest.fixture(scope="module")
def reference_table():
    return _table(n_jobs=1)


def test_table_is_bit_identical_for_any_n_jobs_with_threads(reference_table):
    assert _numbers(_table(n_jobs=2)) == _numbers(reference_table)
    assert _numbers(_table(n_jobs=3)) == _numbers(reference_table)
    assert reference_table.settings["paired"] is True


_LOKY_SCRIPT = """
import json, os
import numpy as np
from joblib import parallel_config
from joblib.externals.loky import get_reusable_executor
from tests._sweeps import accuracy_table as _table, numbers as _numbers
np.seterr(under="ignore")
with parallel_config(backend="loky", n_jobs=2):
    table = _table()
get_reusable_executor().shutdown(wait=True, kill_workers=True)
import psutil
print(json.dumps({"numbers": _numbers(table), "children": [p.pid for p in psutil.Process().children(recursive=True)]}))
"""


def test_table_is_bit_identical_on_loky_processes_and_the_processes_end(reference_table):
    """The same table on joblib's process backend (two loky workers), in a child Python that shuts the
    workers down and exits; every process it started (workers, resource trackers) has ended within
    10 s of its exit."""
    import json
    import subprocess
    import sys
    import time
    from pathlib import Path

    psutil = pytest.importorskip("psutil")
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", _LOKY_SCRIPT], cwd=root, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert [tuple(x) if isinstance(x, list) else x for x in out["numbers"]] == _numbers(reference_table)
    deadline = time.monotonic() + 120  # loky's workers end on their own schedule: wait, but not forever
    alive = out["children"]
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
        time.sleep(0.1)
    assert not alive


def test_table_is_bit_identical_on_a_dask_local_cluster(reference_table):
    """A user who outgrows one machine: the same call inside joblib's Dask backend gives the same numbers
    (a LocalCluster of two single-threaded workers in this process, always closed)."""
    distributed = pytest.importorskip("distributed")
    from joblib import parallel_config

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        with parallel_config(backend="dask"), distributed.get_task_stream(client) as stream:
            table = _table()
        ran_on = {t["worker"] for t in stream.data}
    assert len(stream.data) > 0 and 1 <= len(ran_on) <= 2  # the units ran as Dask tasks on the cluster's workers
    assert _numbers(table) == _numbers(reference_table)


def test_frobenius_curve_is_bit_identical_for_any_n_jobs():
    X = gram.paper_gram_data(rng=2, n_points=10, d=6, scale=0.2)
    a = gram.frobenius_curve(X, m_values=(6, 12), n_draws=30, rng=1, n_jobs=1)
    b = gram.frobenius_curve(X, m_values=(6, 12), n_draws=30, rng=1, n_jobs=2)
    c = gram.frobenius_curve(X, m_values=(12,), n_draws=30, rng=1, n_jobs=2)
    for k in a.mean:
        assert np.array_equal(a.mean[k], b.mean[k]) and np.array_equal(a.stderr[k], b.stderr[k])
        assert a.mean[k][1] == c.mean[k][0]  # a cell does not depend on the other m
    for k in a.diff_mean:
        assert np.array_equal(a.diff_mean[k], b.diff_mean[k]) and np.array_equal(a.diff_stderr[k], b.diff_stderr[k])


def test_lazy_imports_do_not_race_across_worker_threads():
    """Regression: in a fresh process (torch not imported), SimRFs+ units imported torch lazily in one
    worker thread (montecarlo.couplings' dtype check) while another thread's check_rng read the
    half-imported module ('partially initialized module torch has no attribute Generator').  The
    sweep's warm-up draws every coupling in the calling thread first."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; from montecarlo.experiments import classification as cl; "
            "assert 'torch' not in sys.modules; "
            "t = cl.accuracy_table(('iid', 'simplex_plus'), n_draws=60, datasets=['banknote', 'wifi', 'cmc'], "
            "split_rng=(0, 1), n_jobs=2); print(len(t.rows))")
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", code], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "3", proc.stderr[-2000:]


# ---------------------------------------------------------------------------
# Issue 42's command-line findings, each reproduced first: help that states each default once, ``winners
# --draws`` that was silently ignored, ``table --protocol paper`` and ``split-spread`` that did not say where the
# gaps come from or how many draws resolve them, the README's Dask recipe that failed as a script, and progress
# inside long work (Fig. 8 by blocks of draws, the attention scan by cells, the performer experiment by steps).


def _readme_block(start):
    text = (ROOT / "README.md").read_text()
    return re.search(r"```python\n(" + re.escape(start) + r".*?)```", text, re.S).group(1)


def test_readme_dask_recipe_runs_as_a_script(tmp_path):
    """The README's Dask recipe pasted into a script failed (``RuntimeError: Nanny failed to start``: LocalCluster
    starts processes that import the script again).  Now it has the ``__main__`` guard and runs (at 4 draws on
    one dataset); power: the same lines without the guard still fail."""
    pytest.importorskip("distributed")
    block = _readme_block("from dask.distributed")
    assert 'if __name__ == "__main__":' in block
    small = block.replace("n_draws=10_000", "n_draws=4, datasets=['banknote']")
    assert small != block
    (tmp_path / "guarded.py").write_text(small)
    proc = subprocess.run([sys.executable, "guarded.py"], cwd=tmp_path, env=cli_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "banknote |" in proc.stdout
    lines = [ln[4:] if ln.startswith("    ") else ln for ln in small.splitlines() if not ln.startswith("if __name__")]
    (tmp_path / "unguarded.py").write_text("\n".join(lines) + "\n")
    proc = subprocess.run([sys.executable, "unguarded.py"], cwd=tmp_path, env=cli_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode != 0 and "failed to start" in proc.stderr


# ---------------------------------------------------------------------------
# Round 2 of the experiments' Python API review: the paired IID budget, Split validation, accuracy_table's
# sigmas keys, TrainConfig validation and distinct arms, NaN-safe Fig. 8 verdicts, attention_errors' record of
# the caller's data.  Every test names the old behaviour it would have caught.


def test_paired_iid_with_m_below_d_is_not_refused_and_costs_o_m_d_memory():
    """d = 20000, m = 8, 25 draws: the old check counted n_draws * ceil(m/d) * d * d = 1e10 entries
    (> MAX_ELEMENTS = 2.7e8: AllocationError) although only (25, 8, 20000) = 4e6 numbers are drawn.  Now it
    runs; the peak traced memory is a few times the result (8 bytes * 4e6 = 32 MB), far below one d x d
    block (3.2 GB), and the IID rows keep the common random numbers: row i of a draw has the norm of
    orthogonal row i (both are nu_i times a unit vector)."""
    d, m, n = 20000, 8, 25
    assert n * 1 * d * d > MAX_ELEMENTS  # the old check's count: refused
    tracemalloc.start()
    try:
        w = sweeps.paired_weights(["iid", "orthogonal"], d, m, n, 0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert w["iid"].shape == (n, m, d)
    assert peak < 8 * 8 * n * m * d < 8 * d * d
    assert np.allclose(np.linalg.norm(w["iid"], axis=-1), np.linalg.norm(w["orthogonal"], axis=-1), rtol=1e-12)
    # the rows are not the orthogonal ones (the IID law, not a copy)
    assert not np.allclose(w["iid"][:, 1:], w["orthogonal"][:, 1:])


def test_paired_iid_budget_still_refuses_an_oversized_result_before_drawing():
    """n_draws * m * d = 2**29 > MAX_ELEMENTS: refused by name (no 4 GiB allocation)."""
    assert 1 * (1 << 14) * (1 << 15) > MAX_ELEMENTS
    with pytest.raises(AllocationError, match="IID weights"):
        sweeps.paired_weights(["iid"], 1 << 15, 1 << 14, 1, 0)


#: SHA-256 of paired_weights(['iid', 'orthogonal'], d, m, n, seed)['iid'].tobytes() computed with the code
#: before this change (loaded from git HEAD): the draws did not change.
_IID_SHA256 = {
    (6, 14, 3, 7): "0e2e67b3612751c5e584874020ebeecff4b77c3cfda38c6ade44202463320d4a",
    (8, 3, 4, 11): "fc1bf2bcf9ab5b7c28e0376b2b9e801b6c429a29740c44f4afa41b8182143620",
    (5, 10, 2, 3): "dce48553b2b060db416620885bdd45dc946a404366edebc81d659d714b407a5d",
}


@pytest.mark.parametrize("key", sorted(_IID_SHA256))
def test_paired_iid_draws_are_bit_identical_to_before(key):
    """A truncated last block, m < d and full blocks: the same bytes as before the budget fix (common random
    numbers intact).  A changed stream (e.g. another seed) gives another hash."""
    d, m, n, seed = key
    w = sweeps.paired_weights(["iid", "orthogonal"], d, m, n, seed)["iid"]
    assert hashlib.sha256(w.tobytes()).hexdigest() == _IID_SHA256[key]
    other = sweeps.paired_weights(["iid"], d, m, n, seed + 1)["iid"]
    assert hashlib.sha256(other.tobytes()).hexdigest() != _IID_SHA256[key]
