"""montecarlo.nn is a package of files and still one namespace (issue 39 item 4): a name set on
``montecarlo.nn`` (a documented switch such as ``FUSED``, a test's ``monkeypatch`` or ``mock.patch`` of a private
name) reaches every file that uses it and is restored in all of them; private names are read through."""

from __future__ import annotations

from unittest import mock

import pytest

torch = pytest.importorskip("torch")

import montecarlo.nn as mnn  # noqa: E402
from montecarlo.nn import _dispatch, _module, _probes, _scan  # noqa: E402


def test_a_switch_set_on_the_package_reaches_its_file():
    assert mnn.FUSED is True and _dispatch.FUSED is True
    try:
        mnn.FUSED = False
        assert _dispatch.FUSED is False and mnn.FUSED is False
    finally:
        mnn.FUSED = True
    assert _dispatch.FUSED is True


def test_private_names_read_through_to_their_files():
    assert mnn._levels is _scan._levels and mnn._causal is _dispatch._causal and mnn._compiling is _probes._compiling
    with pytest.raises(AttributeError, match="no attribute '_no_such_name'"):
        mnn._no_such_name  # noqa: B018


def test_a_patched_function_reaches_every_file_that_imported_it():
    """_fused_features_apply lives in _dispatch and is called from _module: a patch of montecarlo.nn reaches
    both, and its undo restores both."""
    real = _dispatch._fused_features_apply
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mnn, "_fused_features_apply", lambda x, w: "patched")
        assert _module._fused_features_apply(None, None) == "patched" == _dispatch._fused_features_apply(None, None)
    assert _module._fused_features_apply is real is _dispatch._fused_features_apply is mnn._fused_features_apply


def test_monkeypatch_then_mock_patch_restore_the_original_every_time():
    """Regression: after a monkeypatch and its undo, a mock.patch.object's undo (which deletes the attribute)
    recorded the patched value as the original, and the next mock.patch's undo left _FUSED_DEVICE at "cpu"
    (the fused kernels then ran on the CPU in every later test)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mnn, "_FUSED_DEVICE", "cpu")
        assert _dispatch._FUSED_DEVICE == "cpu"
    assert _dispatch._FUSED_DEVICE == "cuda"
    for _ in range(3):
        with mock.patch.object(mnn, "_FUSED_DEVICE", "cpu"):
            assert _dispatch._FUSED_DEVICE == "cpu" == mnn._FUSED_DEVICE
        assert _dispatch._FUSED_DEVICE == "cuda" == mnn._FUSED_DEVICE
    applies, triton = _dispatch._fused_applies, _probes._TRITON
    with mock.patch.multiple(mnn, _fused_applies=lambda x, b: "patched", _TRITON="patched"):
        assert _dispatch._fused_applies(None, 0) == "patched" == _probes._TRITON
    assert _dispatch._fused_applies is applies is mnn._fused_applies and _probes._TRITON is triton
