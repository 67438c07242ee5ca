"""theory from several threads and processes (issue 11 item 5).

Design under test (theory._context): every public call reads the caller's
precision once (the thread's ``theory.precision`` setting, else ``mpmath.mp``),
computes in a private mpmath context under one lock, and returns global mpfs
rounded to that precision; ``mpmath.mp`` is never written.
"""

import multiprocessing
import threading
import time
import types

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


# ---------------------------------------------------------------------------
# Grids, budgets and input checks (third exploration run, findings 5 to 8).
#
# 5. Ragged grids were accepted: ``np.asarray([[1, 2], [3]], dtype=object)`` is a 1-D array of lists, each
#    list then mapped as a grid of its own, so ``mse_ratio("simplex", "iid", 4, [[1, 2], [3]])`` returned an
#    array of shape (2,) whose elements were arrays of shapes (2,) and (1,).  Now a ValueError naming v.
# 6. ``pnc.pair_conformity_u(kind=...)``: any kind but "prf" ("PRF", "hyperbolic", None, 1) gave the RFF value
#    (0.7694924781 at d = 3, v = 0.5, where the PRF value is 1.2712657666).  Now refused, naming kind.
# 7. The time budget applied per grid point: a 9-point grid under ``theory.budget(0.57)`` ran 2.6 s (0.38 s per
#    point).  An explicit budget now bounds the whole call; the default stays per point (documented in
#    ``theory.budget``).  Tested with a fake clock (one tick per reading), no wall clock.
# 8. pnc's pair functions refused lists (the package docstring promises grids of v, z and d); symbolic's
#    ``simplex_gram_matrix(2.7)`` used n = 2; ``geometry.simplex_apply({1: 2, 3: 4})`` used the dict's keys.


@pytest.fixture
def ticking_clock(monkeypatch):
    """theory._context's clock, replaced by one that advances one 'second' per reading: time is then the
    number of clock readings (deadlines set, budget checks made), the same on every machine."""
    now = [0.0]

    def monotonic():
        now[0] += 1.0
        return now[0]

    monkeypatch.setattr(_context, "time", types.SimpleNamespace(monotonic=monotonic))
    return now


def _hyperbolic(v):
    return theory.kernel_mse_ratio("simplex", "iid", 7, v, kind="hyperbolic")


def test_an_explicit_budget_bounds_the_whole_grid(ticking_clock):
    """The finding's call: one point of the hyperbolic ratio reads the clock 33 times (its budget checks), a
    9-point grid about 300 times.  Under budget(100) one point finishes, and before the fix so did the grid
    (each point got its own 100); now the grid raises, naming the budget."""
    with theory.budget(100):
        assert _hyperbolic(0.8) > 0  # power: a single point fits the budget
        with pytest.raises(theory.ConvergenceError, match=r"time budget of 100 s exhausted"):
            _hyperbolic([0.8] * 9)
    # the grid's deadline is gone afterwards (also after the exception)
    assert _context._state().grid_deadline is None and _context._state().deadline is None


def test_an_explicit_budget_bounds_a_grid_of_cheap_points(ticking_clock):
    """gaussian_kernel makes no budget check of its own (one clock reading per point, when its call starts):
    before the fix a grid of any length ran to its end under any budget; now each point starts only before
    the grid's deadline."""
    with theory.budget(5):
        assert len(theory.gaussian_kernel([0.5] * 3)) == 3  # power: a grid within the budget
        with pytest.raises(theory.ConvergenceError, match=r"grid of 9 points .*time budget of 5 s exhausted"):
            theory.gaussian_kernel([0.5] * 9)


def test_the_default_budget_reads_no_clock_on_a_grid(ticking_clock):
    """Without a budget block there is no deadline at all (issue 38: the default budget counts work, per point,
    tested below): the same 9-point grid that budget(100) refuses (test above) finishes, and the
    clock is not read once."""
    out = _hyperbolic([0.8] * 9)
    assert out.shape == (9,) and len(set(out)) == 1
    assert ticking_clock[0] == 0.0
    with pytest.raises(theory.ConvergenceError, match=r"time budget of 100 s exhausted"):
        with theory.budget(100):
            _hyperbolic([0.8] * 9)


def test_an_inner_budget_sets_the_grid_deadline(ticking_clock):
    """An inner budget block sets the budget of the calls inside it (as for scalar calls): a long inner budget
    lets the grid finish, a short one inside a long one stops it."""
    with theory.budget(5):
        with theory.budget(10_000):
            assert _hyperbolic([0.8] * 9).shape == (9,)
    with theory.budget(10_000):
        with theory.budget(100):
            with pytest.raises(theory.ConvergenceError):
                _hyperbolic([0.8] * 9)


# ---------------------------------------------------------------------------
# Issue 22, item 1: the budget reaches every loop of theory whose trip count an argument sets.
#
# Each call below provably needs far more work than its budget allows (the trip counts are in the
# comments: 10^7 to 10^18 iterations, against a work budget of 20 000 units, about 0.2 s; issue 38 made
# the budget a count of work instead of seconds), so the expiry is certain, the same on every machine,
# and no clock is read.  Each must raise theory.errors.ConvergenceError (an mpmath.NoConvergence) naming
# the argument that makes the loop long.  Before the fix the first of them ran forever
# (``for j in range(d // 2)`` without a check).


def test_work_count_counts_the_checks_of_the_loops():
    """work_count() is the clock-free measure the regression tests bound: it grows with the trip
    count (the Kummer sum checks every 256 terms) and not with anything else; work_used() sums the
    charges (256 units per check of 256 terms at up to 256 bits)."""
    w0, u0 = _context.work_count(), _context.work_used()
    theory.orf_conformity_kummer(2 * 256 * 10, "0.5")  # d/2 = 2560 terms: 10 checks
    w1, u1 = _context.work_count(), _context.work_used()
    theory.orf_conformity_kummer(2 * 256 * 40, "0.5")  # 10240 terms: 40 checks
    w2, u2 = _context.work_count(), _context.work_used()
    assert (w1 - w0, w2 - w1) == (10, 40)
    assert (u1 - u0, u2 - u1) == (2560, 10240)


# ---------------------------------------------------------------------------
# Issue 38, item 1: theory's budgets count work, not seconds.
#
# On a 2-core machine loaded by other work (load 7-90) the suite failed 8 tests with "time budget of 30 s
# exhausted": the default budget was a wall clock, so whether a user got a number or an exception depended on
# what else the machine was doing.  The default budget is now a count of work (:data:`theory._context.DEFAULT_WORK`
# units, charged by the loops themselves and weighted by the working precision); a wall-clock limit is an opt-in
# (``theory.budget(seconds=...)``).
#
# The determinism check simulates a very slow machine without being one: every clock of the :mod:`time` module
# runs 10 000 times fast while the calls below compute, and each call must return the same value (or raise the
# same error) as with the real clocks.  Under the old wall-clock default each of these calls, a few milliseconds
# to a second of real time, read as 30 s to hours and raised.


class _FastClocks:
    """Every clock of the time module (and its _ns twin) advancing ``factor`` times as fast as the real one."""

    NAMES = ("monotonic", "perf_counter", "time", "process_time", "thread_time")

    def __init__(self, monkeypatch, factor=10_000):
        self.factor = factor
        for name in self.NAMES:
            real = getattr(time, name)
            start = real()
            monkeypatch.setattr(time, name, self._fast(real, start))
            real_ns = getattr(time, name + "_ns")
            start_ns = real_ns()
            monkeypatch.setattr(time, name + "_ns", self._fast(real_ns, start_ns, integer=True))

    def _fast(self, real, start, integer=False):
        factor = self.factor

        def clock():
            elapsed = (real() - start) * factor
            return start + (int(elapsed) if integer else elapsed)

        return clock


def _calls():
    """Calls over the theory package, cheap to moderate, with values and with errors."""
    return {
        "conformity simplex": lambda: theory.conformity("simplex", 64, "0.5"),
        "mse_ratio grid": lambda: theory.mse_ratio("simplex", "iid", 16, [0.25, 0.5, 1.0]),
        "rff_mse_ratio": lambda: theory.rff_mse_ratio("orthogonal", "iid", 8, "1.5"),
        "hyperbolic ratio": lambda: theory.kernel_mse_ratio("simplex", "iid", 7, "0.8", kind="hyperbolic"),
        "oprf": lambda: theory.kernel_mse("orthogonal", 8, "0.5", kind="oprf", x_norm="0.25", y_norm="0.25"),
        "z_crit": lambda: theory.z_crit(6),
        "pdf_wij": lambda: theory.pdf_wij("1.5", 3, "0.2"),
        "tiny v": lambda: theory.mse_ratio("simplex", "iid", 64, "1e-100000"),
        "refused by its budget": lambda: theory.orf_conformity_kummer(2**63, "0.5"),
    }


def _outcome(call):
    try:
        return ("value", repr(call()))
    except mpmath.libmp.NoConvergence as exc:
        return ("error", type(exc).__name__, str(exc))


def test_the_same_answer_with_every_clock_10000x_fast(monkeypatch):
    calls = _calls()
    with mp.workdps(20), theory.budget(work=200_000):
        # the refused call: a finite sum of 2^62 terms, stopped by a small explicit work budget (no clock)
        reference = {name: _outcome(call) for name, call in calls.items()}
    assert reference["refused by its budget"][0] == "error"
    assert "work budget of 200000 units exhausted" in reference["refused by its budget"][2]
    assert all(reference[name][0] == "value" for name in calls if name != "refused by its budget")
    _FastClocks(monkeypatch)
    t0 = time.perf_counter()
    with mp.workdps(20), theory.budget(work=200_000):
        fast = {name: _outcome(call) for name, call in calls.items()}
    assert time.perf_counter() - t0 > 60  # power: the clocks really ran fast (a minute and more "passed")
    assert fast == reference


def test_the_default_budget_reads_no_clock(monkeypatch):
    """Without a budget block no clock is read at all (a clock that raises is never called), and the values
    are those of an idle machine."""
    with mp.workdps(20):
        expected = {name: _outcome(call) for name, call in _calls().items() if name != "refused by its budget"}

    def no_clock():
        raise AssertionError("a theory call read the clock under the default budget")

    for name in _FastClocks.NAMES:
        monkeypatch.setattr(time, name, no_clock)
        monkeypatch.setattr(time, name + "_ns", no_clock)
    with mp.workdps(20):
        got = {name: _outcome(call) for name, call in _calls().items() if name != "refused by its budget"}
    assert got == expected


def test_the_wall_clock_stays_available_as_an_opt_in(monkeypatch):
    """budget(seconds=...) still turns a long call into an error on a slow machine: with the clocks 10 000x
    fast, a call of some milliseconds overruns a 1 s budget; without the opt-in the same call returns."""
    _FastClocks(monkeypatch)
    call = _calls()["pdf_wij"]
    with mp.workdps(20):
        assert call() > 0
        with theory.budget(seconds=1), pytest.raises(theory.ConvergenceError, match=r"time budget of 1 s exhausted"):
            call()


def test_a_work_budget_stops_at_the_same_check_every_time():
    """The error comes at the same check (the same work count and charge) on every run, whatever the machine."""
    seen = set()
    for _ in range(3):
        c0, u0 = _context.work_count(), _context.work_used()
        with theory.budget(work=5_000), pytest.raises(theory.ConvergenceError) as info:
            theory.orf_conformity_kummer(2**63, "0.5")
        seen.add((_context.work_count() - c0, _context.work_used() - u0, str(info.value)))
    assert len(seen) == 1
    checks, used, message = seen.pop()
    assert 5_000 < used <= 5_000 + 256  # the check that crossed the budget (256 units per 256 terms)
    assert "orf_conformity_kummer at d = 9223372036854775808" in message and "theory.budget(work=...)" in message


def test_a_step_at_a_huge_precision_is_charged_before_it_runs():
    """One step at 10^6 bits costs (10^6/256)^2 = 15 million units: refused at once under the default budget,
    instead of an uninterruptible mpmath call of minutes."""
    assert _context.precision_factor(53) == _context.precision_factor(256) == 1
    assert _context.precision_factor(512) == 4 and _context.precision_factor(10**6) == 15_258_789
    with _context.entered():
        with _context.mp.workprec(10**6), pytest.raises(theory.ConvergenceError, match=r"at 1000000 bits"):
            _context.check_time("a step at a million bits")


def test_the_default_budget_is_per_point_and_an_explicit_one_per_grid(monkeypatch):
    """One hyperbolic point charges some thousand units; under a default of two points' work a 9-point grid
    finishes (each point gets its own budget), under an explicit budget of the same size it is refused."""
    u0 = _context.work_used()
    one = theory.kernel_mse_ratio("simplex", "iid", 7, 0.8, kind="hyperbolic")
    per_point = _context.work_used() - u0
    assert per_point > 100
    monkeypatch.setattr(_context, "DEFAULT_WORK", 2 * per_point)
    out = theory.kernel_mse_ratio("simplex", "iid", 7, [0.8] * 9, kind="hyperbolic")
    assert out.shape == (9,) and all(x == one for x in out)
    with theory.budget(work=2 * per_point), pytest.raises(theory.ConvergenceError, match=r"work budget of \d+ units"):
        theory.kernel_mse_ratio("simplex", "iid", 7, [0.8] * 9, kind="hyperbolic")
    # a grid of cheap points (no checks of their own) is stopped before a point once the grid's work is spent
    with theory.budget(work=1):
        assert len(theory.gaussian_kernel([0.5] * 3)) == 3  # no work charged: the grid runs
    assert _context._state().grid_limit is None and _context._state().limit is None


def test_an_inner_budget_sets_the_work_of_the_calls_inside_it():
    with theory.budget(work=10):
        with pytest.raises(theory.ConvergenceError):
            theory.orf_conformity_kummer(2**20, "0.5")
        with theory.budget(work=10**6):
            assert theory.orf_conformity_kummer(2**12, "0.5") > 1
        with theory.budget(seconds=10**6):  # seconds only: the enclosing work budget stays
            with pytest.raises(theory.ConvergenceError, match="work budget of 10 units"):
                theory.orf_conformity_kummer(2**20, "0.5")


@pytest.mark.parametrize("kwargs, match", [
    ({}, r"budget needs seconds=\.\.\. .* or work=\.\.\."),
    ({"work": 0}, r"work must be"),
    ({"work": 1.5}, r"work must be"),
    ({"seconds": 0}, r"seconds must be"),
    ({"seconds": -1, "work": 5}, r"seconds must be"),
])
def test_budget_arguments_are_checked(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        with theory.budget(**kwargs):
            pass
