"""The torch-environment probes of :mod:`montecarlo.nn`: whether torch.compile, torch.export, a torch.func
transform, autocast, a backward pass, CUDA-graph capture or torch.distributed is active, and whether Triton
imports."""

from __future__ import annotations

import contextlib

import torch


_TRITON = None


def _run_eagerly(reason):
    """A decorator: the function run eagerly under torch.compile (``torch.compiler.disable``, torch >= 2.1;
    unchanged before), with ``reason`` in the error of ``fullgraph=True`` (torch >= 2.6 takes one)."""
    disable = getattr(getattr(torch, "compiler", None), "disable", None)

    def wrap(fn):
        if disable is None:
            return fn
        try:
            return disable(fn, reason=reason)
        except TypeError:  # (no reason= before torch 2.6)
            return disable(fn)

    return wrap


def _compiling():
    """Whether torch.compile is tracing (``torch.compiler.is_compiling``, torch >= 2.3; False before)."""
    fn = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return bool(fn()) if fn is not None else False


def _autocast_on(device_type):
    """Whether autocast is on for ``device_type`` (False for a device type without autocast, such as meta;
    True where an older torch cannot tell, without the device argument)."""
    try:
        return torch.is_autocast_enabled(device_type)
    except RuntimeError:
        return False
    except TypeError:
        return True


def _no_autocast(device_type):
    """A context with autocast off on ``device_type``: ``torch.autocast(enabled=False)`` where autocast is on
    there, else none (no region: torch.export made the forward's regions of grad mode inside an autocast
    region empty higher-order operators, which a saved program then failed to load with)."""
    if _autocast_on(device_type):
        return torch.autocast(device_type=device_type, enabled=False)
    return contextlib.nullcontext()


def _mixed_under_autocast(q, k, v):
    """Whether q, k, v are tensors of differing dtypes under autocast on their device (a float32 rotary table
    times bf16 queries, say), which forward then casts to autocast's dtype as SDPA does."""
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)) or q.dtype == k.dtype == v.dtype:
        return False
    return _autocast_on(q.device.type)


def _transformed():
    """Whether a torch.func transform (vmap, grad, jacrev, ...) is active: the in-place inference path then
    gives way (vmap refuses in-place writes of batched values into tensors allocated unbatched)."""
    fn = getattr(torch._C, "_are_functorch_transforms_active", None)
    return bool(fn()) if fn is not None else False


def _distributed():
    """Whether torch.distributed runs with more than one process."""
    dist = getattr(torch, "distributed", None)
    return bool(dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1)


def _exporting():
    """Whether torch.export is tracing (``torch.compiler.is_exporting``, torch >= 2.6; False before)."""
    fn = getattr(getattr(torch, "compiler", None), "is_exporting", None)
    return bool(fn()) if fn is not None else False


def _in_backward():
    """Whether this runs inside a backward pass: a forward recomputed there by activation checkpointing
    (torch.utils.checkpoint), which must not redraw the features or move running statistics; torch's own test
    (as FSDP's); False where torch lacks it."""
    fn = getattr(torch._C, "_current_graph_task_id", None)
    return fn is not None and fn() != -1


def _capturing(x):
    """Whether a CUDA graph is being captured on the current stream (False off CUDA, where torch's CPU build
    has no such query)."""
    return x.device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _triton_available():
    """Whether Triton imports (checked once; a broken installation counts as none: the torch levels run)."""
    global _TRITON
    if _TRITON is None:
        try:
            import triton  # noqa: F401
        except Exception:
            _TRITON = False
        else:
            _TRITON = True
    return _TRITON
