"""Checkpoints and copies of montecarlo.nn.PRFAttention complete (issue 41 item 6): a state_dict of a module
seeded with any numpy bit generator loads with weights_only=True, the seed sequence's spawn counter travels
with it (a resumed run's later deep copies fork as the uninterrupted run's), and layers sharing one stream
share one fork after a deep copy of the model."""

import copy
import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from montecarlo.nn import PRFAttention  # noqa: E402

BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")


def _round_trip(state):
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def _seed(name, entropy=21):
    return np.random.Generator(getattr(np.random, name)(np.random.SeedSequence(entropy)))


@pytest.mark.parametrize("name", BIT_GENERATORS)
def test_state_dict_of_every_bit_generator_loads_weights_only(name):
    """MT19937, Philox and SFC64 states hold numpy arrays, which torch.load(weights_only=True) refused with an
    UnpicklingError (PCG64 worked).  Now every one loads, and a module of an int seed that loads it draws from
    that bit generator as the original does."""
    orig = PRFAttention(8, 12, seed=_seed(name), redraw_every=2)
    state = _round_trip(orig.state_dict())
    twin = PRFAttention(8, 12, seed=0, redraw_every=2)
    twin.load_state_dict(state)
    assert type(twin._rng.bit_generator).__name__ == name
    for _ in range(2):
        assert torch.equal(twin.redraw().weights, orig.redraw().weights)


def test_a_caller_generator_of_any_bit_generator_round_trips():
    """A module drawing from the caller's numpy Generator (passed as seed): its state is set in place."""
    for name in BIT_GENERATORS:
        orig = PRFAttention(8, 12, seed=_seed(name))
        state = _round_trip(orig.state_dict())
        rng = _seed(name, entropy=99)
        twin = PRFAttention(8, 12, seed=rng)
        twin.load_state_dict(state)
        assert twin._rng is rng  # (still the caller's object)
        assert torch.equal(twin.redraw().weights, orig.redraw().weights)
    with pytest.raises(ValueError, match="pass a Generator of a MT19937"):
        PRFAttention(8, 12, seed=_seed("PCG64")).load_state_dict(_round_trip(
            PRFAttention(8, 12, seed=_seed("MT19937")).state_dict()))


def test_resumed_run_forks_as_the_uninterrupted_run():
    """A run that deep-copies its module twice (two forks: spawn counter 2) and one resumed from a checkpoint
    taken after the first copy: the resumed run's second copy draws what the uninterrupted run's second copy
    draws.  Before, the counter was not saved, so it drew the first fork's stream again (power: so does a
    module that loads only the weights and stream position of the version-1 record)."""
    full = PRFAttention(8, 12, seed=31)
    first = copy.deepcopy(full)
    w_first = first.redraw().weights.clone()
    state = _round_trip(full.state_dict())
    second = copy.deepcopy(full)
    want = second.redraw().weights.clone()
    assert not torch.equal(want, w_first)

    resumed = PRFAttention(8, 12, seed=31)
    resumed.load_state_dict(state)
    assert torch.equal(copy.deepcopy(resumed).redraw().weights, want)

    old = dict(state)
    old["_extra_state"] = {k: v for k, v in state["_extra_state"].items() if k != "seed_seq"}
    old["_extra_state"]["version"] = 1
    legacy = PRFAttention(8, 12, seed=31)
    legacy.load_state_dict(old)  # (version-1 records still load)
    assert torch.equal(copy.deepcopy(legacy).redraw().weights, w_first)  # the first fork's stream again


def test_layers_sharing_a_generator_share_one_after_deepcopy():
    """Two layers built on one torch.Generator draw in turn from it; after copy.deepcopy of the model the two
    copied layers still share one generator (a fork of the original: independent of it), so their redraws
    interleave as the original's do.  Before, each got a fork of its own.  The same for a numpy Generator
    passed as seed."""
    for shared in (lambda: {"generator": torch.Generator().manual_seed(41)},
                   lambda: {"seed": np.random.default_rng(41)}):
        kwargs = shared()
        model = torch.nn.ModuleList([PRFAttention(8, 12, **kwargs) for _ in range(2)])
        clone = copy.deepcopy(model)
        a, b = clone
        assert (a._generator is b._generator) if "generator" in kwargs else (a._rng is b._rng)
        twin = copy.deepcopy(model)  # a second deep copy: a fork of its own, shared by its two layers
        c, d = twin
        assert (c._generator is not a._generator) if "generator" in kwargs else (c._rng is not a._rng)
        wa, wb = a.redraw().weights.clone(), b.redraw().weights.clone()
        assert not torch.equal(wa, wb)  # drawn in turn from one stream
        wm = model[0].redraw().weights
        assert not torch.equal(wm, wa)  # independent of the original


def test_state_with_a_foreign_bit_generator_name_is_refused():
    state = PRFAttention(8, 12, seed=0).state_dict()
    state["_extra_state"] = dict(state["_extra_state"])
    state["_extra_state"]["numpy_rng"] = {"bit_generator": "os.system", "state": {}}
    with pytest.raises(ValueError, match="one of the bit generators PCG64"):
        PRFAttention(8, 12, seed=0).load_state_dict(state)
