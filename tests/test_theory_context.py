"""theory from several threads and processes (issue 11 item 5).

Design under test (theory._context): every public call reads the caller's
precision once (the thread's ``theory.precision`` setting, else ``mpmath.mp``),
computes in a private mpmath context under one lock, and returns global mpfs
rounded to that precision; ``mpmath.mp`` is never written.
"""

import multiprocessing
import threading
import time

import mpmath
import pytest
from mpmath import mp

import theory
from theory import _context

DIGITS = (15, 30, 50, 80)
CASES = [("conformity", ("simplex", 64, "0.5")), ("rff_conformity", ("orthogonal", 1024, "20")),
         ("mse_ratio", ("simplex", "iid", 16, "1.5"))]


def _reference(name, args, dps):
    with mp.workdps(dps + 20):
        return getattr(theory, name)(*args)


def _digits_ok(got, ref, dps):
    with mp.workdps(dps + 20):
        return abs(got - ref) <= abs(ref) * mp.mpf(10) ** (1 - dps)


@pytest.fixture(scope="module")
def references():
    return {(name, dps): _reference(name, args, dps) for name, args in CASES for dps in DIGITS}


def test_threads_at_different_precisions_get_their_own_digits(references):
    """Four threads at 15/30/50/80 digits, each 6 rounds of three functions; a watcher samples
    mpmath.mp.prec meanwhile: it never moves, and every result has the thread's digits."""
    start_prec = mp.prec
    errors, results = [], []
    stop = threading.Event()
    seen = set()

    def watcher():
        while not stop.is_set():
            seen.add(mpmath.mp.prec)
            time.sleep(0.0005)

    def worker(dps):
        try:
            with theory.precision(dps=dps):
                for _ in range(6):
                    for name, args in CASES:
                        results.append((name, dps, getattr(theory, name)(*args)))
        except BaseException as exc:  # reported below
            errors.append(exc)

    w = threading.Thread(target=watcher, daemon=True)
    w.start()
    threads = [threading.Thread(target=worker, args=(p,)) for p in DIGITS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    stop.set()
    w.join(timeout=600)
    assert not any(t.is_alive() for t in threads) and not errors, errors
    assert mp.prec == start_prec and seen == {start_prec}, seen
    assert len(results) == 6 * len(CASES) * len(DIGITS)
    for name, dps, got in results:
        assert _digits_ok(got, references[(name, dps)], dps), (name, dps, got)


def test_the_digit_check_has_power(references):
    """Power: a 15-digit result fails the 50- and 80-digit checks."""
    for name, _ in CASES:
        low = references[(name, 15)]
        with mp.workdps(15):
            low = +low
        assert not _digits_ok(low, references[(name, 80)], 80)
        assert not _digits_ok(low, references[(name, 50)], 50)


def test_global_context_users_are_not_disturbed():
    """A thread computing in mpmath.mp (53 bits) while theory runs at 200 digits elsewhere
    always gets the 53-bit result: theory never changes the global precision."""
    expected = mp.mpf(1) / 3
    bad = []
    stop = threading.Event()

    def plain_user():
        while not stop.is_set():
            if mp.mpf(1) / 3 != expected or mp.prec != 53:
                bad.append(mp.prec)

    def theory_user():
        with theory.precision(dps=200):
            for v in ("0.5", "1", "2"):
                theory.conformity("simplex", 32, v)

    u = threading.Thread(target=plain_user, daemon=True)
    u.start()
    t = threading.Thread(target=theory_user)
    t.start()
    t.join(timeout=300)
    stop.set()
    u.join(timeout=600)
    assert not t.is_alive() and not bad


def test_precision_override_is_thread_local():
    with theory.precision(dps=40):
        inner = []
        th = threading.Thread(target=lambda: inner.append(_context.caller_prec()))
        th.start()
        th.join()
        assert _context.caller_prec() == mpmath.libmp.dps_to_prec(40)
    assert inner == [mp.prec]
    with pytest.raises(ValueError, match="dps must be an integer >= 1"):
        with theory.precision(dps=0):
            pass
    with pytest.raises(ValueError, match="exactly one of dps and prec"):
        with theory.precision(dps=10, prec=40):
            pass


def test_a_failure_in_one_thread_leaves_the_others_correct(references):
    errors, got = [], []

    def failing():
        try:
            with theory.budget(work=2_000):
                theory.conformity("simplex", 64, 1000)
        except mpmath.libmp.NoConvergence as exc:
            errors.append(exc)

    def good():
        with theory.precision(dps=50):
            got.append(theory.conformity("simplex", 64, "0.5"))

    threads = [threading.Thread(target=failing), threading.Thread(target=good)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert len(errors) == 1 and isinstance(errors[0], theory.ConvergenceError)
    assert _digits_ok(got[0], references[("conformity", 50)], 50)
    assert not _context.LOCK._is_owned()


def _in_child(task):
    name, args, dps = task
    with theory.precision(dps=dps):
        value = getattr(theory, name)(*args)
    return name, dps, mpmath.nstr(value, dps + 5), mpmath.mp.prec


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_processes_compute_the_same_digits(method, references):
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} start method here")
    ctx = multiprocessing.get_context(method)
    tasks = [(name, args, dps) for name, args in CASES[:2] for dps in (15, 50)]
    with ctx.Pool(2) as pool:
        out = pool.map_async(_in_child, tasks).get(timeout=600)
    for name, dps, text, child_prec in out:
        assert child_prec == 53
        with mp.workdps(dps + 20):
            assert _digits_ok(mp.mpf(text), references[(name, dps)], dps), (name, dps, text)


def test_fork_while_another_thread_holds_the_lock():
    """A child forked while a thread is inside a theory call gets a fresh lock (no deadlock)."""
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork start method here")
    held, release = threading.Event(), threading.Event()

    def holder():
        with _context.LOCK:
            held.set()
            release.wait(timeout=600)

    h = threading.Thread(target=holder)
    h.start()
    assert held.wait(timeout=600)
    try:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(1) as pool:
            name, dps, text, _ = pool.apply_async(_in_child, (("conformity", ("simplex", 8, "1"), 20),)).get(
                timeout=600)
    finally:
        release.set()
        h.join(timeout=600)
    with mp.workdps(40):
        assert _digits_ok(mp.mpf(text), _reference("conformity", ("simplex", 8, "1"), 20), 20)
