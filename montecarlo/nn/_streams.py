"""The random streams of :mod:`montecarlo.nn`'s modules: torch generators checked and forked for deep
copies, and numpy bit-generator states in the plain form checkpoints hold."""

from __future__ import annotations

import numpy as np
import torch

from theory.validation import describe


def check_generator(generator, name="generator"):
    """``generator`` if it is None or a ``torch.Generator``; TypeError otherwise."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"{name} must be None or a torch.Generator, got {type(generator).__name__}")
    return generator


def fork_generator(generator):
    """A new ``torch.Generator`` on ``generator``'s device seeded by one draw of it (which advances it): the
    stream of a deep copy, independent of the original's later draws and reproducible from its seed."""
    seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device).item())
    return torch.Generator(device=generator.device).manual_seed(seed)


def _forked(stream, memo, fork):
    """``fork(stream)`` once per deep copy: the fork is kept in the copy's ``memo`` under the stream's id (and
    the stream kept alive there, as ``copy`` does), so that modules sharing one stream share its fork."""
    key = ("montecarlo.nn fork", id(stream))
    if key not in memo:
        memo[key] = fork(stream)
        memo.setdefault(id(memo), []).append(stream)
    return memo[key]


#: numpy bit generators whose state a checkpoint may hold (``get_extra_state``).
_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")


def _plain(obj):
    """A numpy bit generator's state (or seed sequence) as plain Python objects that ``torch.load`` reads with
    ``weights_only=True``: arrays become ``{"ndarray": dtype, "values": list}``, numpy integers ints."""
    if isinstance(obj, np.ndarray):
        return {"ndarray": obj.dtype.str, "values": obj.tolist()}
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def _unplain(obj):
    """The inverse of :func:`_plain`."""
    if isinstance(obj, dict):
        if set(obj) == {"ndarray", "values"}:
            return np.asarray(obj["values"], dtype=np.dtype(obj["ndarray"]))
        return {k: _unplain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_unplain(v) for v in obj]
    return obj


def _restored_rng(rng, state, seed_seq, own):
    """The numpy Generator a checkpoint's ``state`` (and seed sequence) describes.  A stream the module owns is
    rebuilt from the saved seed sequence (its spawn counter included) and bit generator; the caller's shared
    Generator (``own`` False) is set in place (its seed sequence is the caller's)."""
    if not isinstance(state, dict) or state.get("bit_generator") not in _BIT_GENERATORS:
        raise ValueError(f"the state's numpy stream must be the state of one of the bit generators "
                         f"{', '.join(_BIT_GENERATORS)}, got {describe(state)}")
    name = state["bit_generator"]
    if own:
        seq = None
        if seed_seq is not None:
            seq = np.random.SeedSequence(seed_seq["entropy"], spawn_key=tuple(seed_seq["spawn_key"]),
                                         pool_size=seed_seq["pool_size"],
                                         n_children_spawned=seed_seq["n_children_spawned"])
        elif type(rng.bit_generator).__name__ == name:  # (a version-1 state: no seed sequence recorded)
            seq = rng.bit_generator.seed_seq
        rng = np.random.Generator(getattr(np.random, name)(seq))
    elif type(rng.bit_generator).__name__ != name:
        raise ValueError(f"the state's numpy stream is a {name}, this module draws from the caller's "
                         f"{type(rng.bit_generator).__name__} Generator (passed as seed): pass a Generator of a {name}")
    rng.bit_generator.state = state
    return rng
