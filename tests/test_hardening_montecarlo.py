"""Issue 22 (hardening), montecarlo items: non-finite input to the transforms, the SimRFs+
tolerance's dtype, and the coupling lists of montecarlo.couplings (issue 18)."""

import re
import sys

import numpy as np
import pytest

import montecarlo as mc
import theory.registry

couplings = sys.modules["montecarlo.couplings"]

try:
    import torch
except ImportError:  # pragma: no cover - the torch extra is optional
    torch = None


# ---------------------------------------------------------------------------
# item 4: fwht and simplex_apply refuse NaN / inf instead of returning NaN


@pytest.mark.parametrize("func", [mc.fwht, mc.simplex_apply])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_transforms_refuse_non_finite_input(func, bad):
    x = np.arange(8.0)
    x[3] = bad
    with pytest.raises(ValueError, match=r"x must be finite: found 1 NaN or inf"):
        func(x)
    with pytest.raises(ValueError, match=r"x must be finite: found 4 NaN or inf"):
        func(np.full(4, np.nan))
    if torch is not None:
        with pytest.raises(ValueError, match=r"x must be finite"):
            func(torch.full((2, 4), float("nan"), dtype=torch.float64))


def test_transforms_still_compute_finite_input():
    """The same calls on finite input give the closed forms (Sylvester H_4 / 2, Algorithm 1 = dense S)."""
    x = np.array([0.5, -1.0, 2.0, 3.0])
    h = np.array([[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]]) / 2.0
    assert np.allclose(mc.fwht(x), h @ x, atol=1e-15)
    assert np.allclose(mc.simplex_apply(x), mc.simplex_matrix(4) @ x, atol=1e-15)


def test_finiteness_is_checked_once_per_public_call_and_never_inside_the_samplers(monkeypatch):
    """One isfinite pass per public call; the HD-products and Algorithm 1 inside the samplers
    (arrays they built themselves) are not re-checked: counted, not timed."""
    calls = []
    real = couplings._check_finite

    def counting(arr, xp, name):
        calls.append(name)
        return real(arr, xp, name)

    monkeypatch.setattr(couplings, "_check_finite", counting)
    mc.fwht(np.ones((3, 16)))
    assert calls == ["x"]
    calls.clear()
    mc.simplex_apply(np.ones((3, 16)))
    assert calls == ["x"]
    calls.clear()
    for coupling in ("fast_orthogonal", "fast_simplex"):
        proj = mc.sample_projection(coupling, 12, 40, rng=0)
        proj.project(np.ones((5, 12)))
        mc.sample_weights(coupling, 12, 40, rng=0)
    assert calls == []


# ---------------------------------------------------------------------------
# item 3: simplex_plus_tolerance names its argument


@pytest.mark.parametrize("dtype", [int, bool, complex, None, "abc", np.int32, np.complex128]
                         + ([torch.int64, torch.bool] if torch is not None else []))
def test_simplex_plus_tolerance_refuses_non_float_dtypes(dtype):
    with pytest.raises(TypeError, match=r"dtype must be a real floating dtype \(float16, float32 or float64"):
        mc.simplex_plus_tolerance(dtype)


def test_simplex_plus_tolerance_of_float_dtypes():
    assert mc.simplex_plus_tolerance(np.float64) == couplings.SIMPLEX_PLUS_TOL
    eps32 = float(np.finfo(np.float32).eps)
    for dt in ("float32", np.float32) + ((torch.float32,) if torch is not None else ()):
        assert mc.simplex_plus_tolerance(dt) == couplings.SIMPLEX_PLUS_DEFAULT_TOL_EPS * eps32


# ---------------------------------------------------------------------------
# item 8: the coupling lists cannot go stale


def test_documented_couplings_are_registered_and_the_parameter_list_is_the_registry():
    """The module docstring describes the samplers defined in montecarlo.couplings; every name it
    describes must be a registered coupling, and sample_weights' ``coupling`` parameter points at
    the registry instead of enumerating a set that went stale (it lacked 'pnc_orthogonal')."""
    registered = set(theory.registry.names())
    described = set(re.findall(r'``"([a-z_]+)"``', couplings.__doc__))
    assert {"iid", "orthogonal", "simplex", "simplex_plus", "fast_orthogonal", "fast_simplex"} <= described
    assert described <= registered
    param = couplings.sample_weights.__doc__.split("coupling :", 1)[1].split("\n    d :", 1)[0]
    assert "theory.registry.names()" in param
    assert not re.search(r"\{'iid'", param)  # no hand-written closed set
    # every registered coupling samples through sample_weights (pnc_orthogonal included)
    for name in registered:
        w = mc.sample_weights(name, 4, 4, rng=1)
        assert w.shape == (4, 4) and np.all(np.isfinite(w))


def test_removed_dead_helpers_stay_removed():
    """Issue 18: these private helpers had no caller anywhere in the tree."""
    import figures.style
    import theory._checks

    assert not hasattr(couplings, "_haar_rows")
    assert not hasattr(theory._checks, "round_result")
    assert not hasattr(figures.style, "theory_legend_handle")
