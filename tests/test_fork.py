"""Fork safety of prf_features' thread pool (issue 12 item 1).

Before the fix, ``prf_features`` on >= 65536 entries used a module-level
``ThreadPoolExecutor``; a process forked after the parent had used it (the
default ``multiprocessing`` start method on Linux) inherited the executor but
none of its worker threads and hung forever on its next large call.  The pool
is now keyed by process id and dropped in the child by an
``os.register_at_fork`` handler.

Every child runs under a timeout and is killed if it has not finished, so a
regression fails the test instead of hanging the suite.
"""

from __future__ import annotations

import multiprocessing
import os
import sys

import numpy as np
import pytest

import montecarlo as mc
from montecarlo import features

pytestmark = pytest.mark.skipif(sys.platform == "win32" or "fork" not in multiprocessing.get_all_start_methods(),
                                reason="needs the fork start method")

TIMEOUT = 600  # seconds: a deadlock guard for a child that takes well under one (generous: a loaded machine)


def _data():
    W = mc.sample_weights("iid", 64, 512, rng=0)
    X = np.random.default_rng(0).standard_normal((1024, 64)) * 0.1  # 1024 x 512 = 524288 entries: the pool path
    return X, W


def _child(queue):
    X, W = _data()
    inherited = features._POOL
    phi = mc.prf_features(X, W)
    queue.put((inherited is None, features._POOL_PID == os.getpid(), float(phi.sum())))


def _run_forked(target):
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(queue,), daemon=True)
    proc.start()
    try:
        proc.join(TIMEOUT)
        if proc.is_alive():
            pytest.fail(f"the forked child did not finish in {TIMEOUT} s (deadlock in prf_features' thread pool?)")
        assert proc.exitcode == 0
        return queue.get(timeout=60)
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        queue.close()


def test_prf_features_in_a_child_forked_after_the_parent_used_the_pool():
    X, W = _data()
    if features.thread_limit() == 1:  # pragma: no cover (one core: no pool to inherit)
        pytest.skip("one CPU: prf_features does not use its thread pool")
    expected = float(mc.prf_features(X, W).sum())
    assert features._POOL is not None, "the parent must have used the pool for this test to mean anything"
    fresh, own_pool, total = _run_forked(_child)
    assert fresh, "the child inherited the parent's executor (the at-fork handler did not run)"
    assert own_pool, "the child did not build its own pool"
    assert total == pytest.approx(expected, rel=1e-12)  # same features as in the parent


def test_pool_is_rebuilt_when_the_process_id_changes(monkeypatch):
    """Second line of defence (a fork the handler did not see): a pool from another pid is replaced."""
    old = features._pool()
    monkeypatch.setattr(features, "_POOL_PID", -1)
    new = features._pool()
    assert new is not old and features._POOL_PID == os.getpid()
    old.shutdown(wait=True)
