"""montecarlo.nn.PRFAttention as a module people train with (issue 20): copies fork the random stream,
checkpoints resume bit-identically, no host synchronisation in forward, every positive feature kind in
float32/bf16/fp16 with masks (causal or not), oprf's shared A, and bad input.

CUDA tests (skipped without a GPU): ``python -m pytest -q -p no:cacheprovider tests/test_nn_module.py -k cuda``."""

import copy
import importlib
import io
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import montecarlo as mc  # noqa: E402
from _nn import KINDS, _dense, _dense_reference, _masked_inputs, _params  # noqa: E402
from montecarlo._checks import AllocationError  # noqa: E402
from montecarlo.experiments import attention as at  # noqa: E402
from montecarlo.nn import DecodingState, PRFAttention, input_range, oprf_a  # noqa: E402
from theory import feature_kinds  # noqa: E402

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
HAS_OPRF = "oprf" in feature_kinds.names()
needs_oprf = pytest.mark.skipif(not HAS_OPRF, reason="the 'oprf' feature kind is not registered in "
                                                     "theory.feature_kinds yet (another change adds it)")


# ---------------------------------------------------------------------------
# copies and checkpoints (item 1)


@pytest.mark.parametrize("use_generator", [False, True])
def test_deepcopy_is_exact_but_forks_the_stream(use_generator):
    """A deep copy holds the same projections; after one redraw each, original and copies all differ; the
    forks are reproducible (the same seed and the same copies give the same draws).  Power: a copy loaded
    with the original's state_dict redraws in lock-step (the same comparison then finds equality)."""
    def build():
        if use_generator:
            return PRFAttention(8, 16, generator=torch.Generator().manual_seed(3))
        return PRFAttention(8, 16, seed=3)

    def draws():
        orig = build()
        copies = [copy.deepcopy(orig) for _ in range(2)]
        for c in copies:
            assert torch.equal(c.weights, orig.weights)
        twin = copy.deepcopy(orig)
        twin.load_state_dict(orig.state_dict())
        out = [m.redraw().weights.clone() for m in (orig, *copies, twin)]
        return out

    first, second = draws(), draws()
    orig, a, b, twin = first
    assert not torch.equal(orig, a) and not torch.equal(orig, b) and not torch.equal(a, b)
    assert torch.equal(orig, twin)  # lock-step through load_state_dict
    for x, y in zip(first, second):
        assert torch.equal(x, y)  # reproducible


def test_deepcopy_of_a_model_unties_its_layers():
    """Building a model by copying one layer (the usual way) no longer ties the layers' features."""
    layer = PRFAttention(8, 16, seed=0, redraw_every=1)
    model = torch.nn.ModuleList([copy.deepcopy(layer) for _ in range(3)])
    x = torch.randn(1, 10, 8)
    model.train()
    for _ in range(2):  # the second call redraws every layer
        outs = [m(x, x, x) for m in model]
    ws = [m.weights for m in model]
    assert not torch.equal(ws[0], ws[1]) and not torch.equal(ws[1], ws[2])
    assert not torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("use_generator", [False, True])
def test_checkpoint_resume_is_bit_identical(use_generator):
    """Train-mode forward passes with redraw_every=3: a run resumed at step 4 from torch.save(state_dict) /
    torch.load(weights_only=True, the default) gives bit-identical outputs and projections at every later
    step.  Power: a module of the same seed that did not load the state (counter and stream restart) does
    not."""
    def build():
        if use_generator:
            return PRFAttention(8, 12, redraw_every=3, generator=torch.Generator().manual_seed(11)).train()
        return PRFAttention(8, 12, redraw_every=3, seed=11).train()

    xs = [torch.randn(2, 9, 8, generator=torch.Generator().manual_seed(i)) for i in range(10)]
    full = build()
    outs = [full(x, x, x) for x in xs]
    run = build()
    for x in xs[:4]:
        run(x, x, x)
    buf = io.BytesIO()
    torch.save(run.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf)  # weights_only=True
    resumed = PRFAttention(8, 12, redraw_every=3, generator=torch.Generator().manual_seed(99) if use_generator
                           else None, seed=None if use_generator else 99).train()
    resumed.load_state_dict(state)
    assert resumed.calls_since_redraw == run.calls_since_redraw == 1
    for i, x in enumerate(xs[4:], start=4):
        assert torch.equal(resumed(x, x, x), outs[i])
    assert torch.equal(resumed.weights, full.weights)
    restarted = build()
    restarted.load_state_dict({"weights": state["weights"]}, strict=False)
    assert not all(torch.equal(restarted(x, x, x), outs[i]) for i, x in enumerate(xs[4:], start=4))


def test_whole_module_pickle_needs_weights_only_false():
    """torch.save(module) loads with weights_only=False (documented); the default weights_only=True refuses the
    class, which is why the module docs say to checkpoint the state_dict."""
    mod = PRFAttention(8, 12, seed=0, redraw_every=2)
    buf = io.BytesIO()
    torch.save(mod, buf)
    buf.seek(0)
    with pytest.raises(Exception, match="weights_only"):
        torch.load(buf)
    buf.seek(0)
    back = torch.load(buf, weights_only=False)
    assert torch.equal(back.weights, mod.weights) and back.redraw_every == 2


def test_meta_device_and_reset_parameters():
    """Deferred initialisation (torch's and FSDP's convention): a module built on the meta device (device="meta",
    or under ``with torch.device("meta")``) holds meta buffers of the right shapes and runs a forward for shapes
    (every kind, causal or not, masked); after to_empty(device="cpu") and reset_parameters() its projections are
    those of the module built on the CPU with the same seed (bit for bit; the outputs equal) and its running
    statistics and redraw counter are zero.  Deep copies made on the meta device draw their own projections
    (their forks: independent, reproducible).  On a live module reset_parameters returns to the construction's
    projections after redraws; with a torch.Generator it takes the generator's next draw.  Power: buffers
    left as to_empty leaves them (here filled with NaN) are not the projections."""
    ref = PRFAttention(16, 8, "simplex", seed=3, kind="oprf", causal=True)
    q, k, v, pad = _masked_inputs(13, 40)
    for build in ("argument", "context"):
        if build == "argument":
            mod = PRFAttention(16, 8, "simplex", seed=3, kind="oprf", causal=True, device="meta")
        else:
            with torch.device("meta"):
                mod = PRFAttention(16, 8, "simplex", seed=3, kind="oprf", causal=True)
        assert mod.weights.is_meta and mod.weights.shape == (8, 16) and mod.running_rho.is_meta
        mod.to_empty(device="cpu")
        mod.weights.fill_(math.nan)
        mod.running_steps.fill_(7)
        assert not torch.equal(mod.weights, ref.weights)
        assert mod.reset_parameters() is mod
        assert torch.equal(mod.weights, ref.weights) and int(mod.running_steps) == 0 and mod.calls_since_redraw == 0
        assert torch.equal(mod.eval()(q, k, v, key_padding_mask=pad), ref.eval()(q, k, v, key_padding_mask=pad))
    for kind in KINDS:
        for causal in (False, True):
            meta = PRFAttention(16, 8, seed=0, kind=kind, causal=causal, device="meta")
            out = meta(*(x.to("meta") for x in (q, k, v[..., :5])), key_padding_mask=pad.to("meta"))
            assert out.is_meta and out.shape == (3, 2, 40, 5)

    def copies():
        with torch.device("meta"):
            base = PRFAttention(16, 8, "simplex", seed=5)
        made = [copy.deepcopy(base) for _ in range(2)]
        return [m.to_empty(device="cpu").reset_parameters().weights for m in made]

    a, b = copies()
    assert not torch.allclose(a, b, atol=1e-3) and all(torch.equal(x, y) for x, y in zip((a, b), copies()))
    live = PRFAttention(16, 8, "simplex", seed=3, redraw_every=1)
    live(q, k, v)
    live(q, k, v)  # (redraws)
    assert not torch.equal(live.weights, ref.weights)
    assert torch.equal(live.reset_parameters().weights, ref.weights) and live.calls_since_redraw == 0
    drawn = PRFAttention(16, 8, "simplex", generator=torch.Generator().manual_seed(1))
    first = drawn.weights.clone()
    assert not torch.allclose(drawn.reset_parameters().weights, first, atol=1e-3)


def test_unseeded_redraws_warn_under_torch_distributed(monkeypatch):
    """Under torch.distributed with more than one process (stood in for here: montecarlo.nn._distributed) an
    unseeded module's redraw warns that the ranks draw different projections (DistributedDataParallel
    broadcasts buffers before the forward, the redraw comes after; measured with two gloo processes, three
    steps, redraw_every=1: unseeded ranks' projections differed from the first redraw on, seeded ones were
    equal); a module with a seed or a generator does not warn, nor does one outside torch.distributed."""
    import warnings

    from montecarlo import nn as mnn

    x = torch.randn(2, 10, 16, generator=torch.Generator().manual_seed(15))
    for distributed in (False, True):
        monkeypatch.setattr(mnn, "_distributed", lambda: distributed)
        for kw, warns in (({}, distributed), ({"seed": 0}, False), ({"generator": torch.Generator()}, False)):
            mod = PRFAttention(16, 8, redraw_every=1, **kw)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for _ in range(3):
                    mod(x, x, x)
            hits = [w for w in caught if issubclass(w.category, RuntimeWarning)
                    and "without a seed under torch.distributed" in str(w.message) and "seed=" in str(w.message)]
            assert len(hits) == (2 if warns else 0), (distributed, kw)


def _export_round_trip(mod, q, k, v, pad, **export):
    """torch.export of ``mod`` (``key_padding_mask`` as a keyword input), saved and loaded again: the loaded
    program's module."""
    ep = torch.export.export(mod, (q, k, v), kwargs={"key_padding_mask": pad}, **export)
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    buf.seek(0)
    return torch.export.load(buf).module()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("causal", [False, True])
def test_torch_export_round_trip_equals_eager(kind, causal):
    """A module in eval mode exports (torch.export, non-strict), saves and loads (torch.export.save / load), and
    the loaded program gives the eager module's outputs on other inputs with another mask (left padding, holes,
    a fully padded sequence), one chunk and several; causal attention exported under CPU autocast (bf16) too,
    with one chunk (where an empty region of autocast once made the saved program fail to load).  Power: the
    loaded program of a module with other projections differs."""
    q, k, v, pad = _masked_inputs(3, 40)
    q2, k2, v2, pad2 = _masked_inputs(4, 40)
    for chunk in (None, 16):  # (one chunk of 64, three of 16)
        mod = PRFAttention(16, 24, "simplex", causal=causal, seed=0, kind=kind, chunk=chunk).eval()
        loaded = _export_round_trip(mod, q, k, v, torch.zeros_like(pad))
        want = mod(q2, k2, v2, key_padding_mask=pad2)
        assert torch.allclose(loaded(q2, k2, v2, key_padding_mask=pad2), want, rtol=1e-6, atol=1e-7), chunk
    other = PRFAttention(16, 24, "simplex", causal=causal, seed=1, kind=kind).eval()
    assert not torch.allclose(_export_round_trip(other, q, k, v, pad)(q2, k2, v2, key_padding_mask=pad2), want,
                              rtol=1e-3, atol=1e-3)
    if causal and kind == "prf":
        mod = PRFAttention(16, 24, "simplex", causal=True, seed=0).eval()  # (one chunk)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loaded = _export_round_trip(mod, q, k, v, pad)
            assert torch.allclose(loaded(q2, k2, v2, key_padding_mask=pad2), mod(q2, k2, v2, key_padding_mask=pad2),
                                  rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("strict", [False, True])
def test_torch_export_refuses_the_redraw_schedule(strict):
    """An exported program is one traced forward, so it would never redraw: a module in training mode with
    redraw_every refuses torch.export with a RuntimeError that says so and how to export (strict mode: inside
    Dynamo's error), and its schedule does not move; in eval mode, frozen, or without the schedule it exports."""
    q, k, v, pad = _masked_inputs(5, 24)
    mod = PRFAttention(16, 24, "simplex", causal=True, seed=0, redraw_every=2)
    with pytest.raises(Exception, match=r"redraw_every in training mode cannot be exported.*eval\(\) mode, after "
                                        r"freeze\(\), or with redraw_every=None") as info:
        torch.export.export(mod, (q, k, v), strict=strict)
    assert strict or info.type is RuntimeError
    assert mod._calls == 0 and mod.training
    for ready in (copy.deepcopy(mod).eval(), copy.deepcopy(mod).freeze()):
        torch.export.export(ready, (q, k, v), strict=strict)


# ---------------------------------------------------------------------------
# no host synchronisation (item 2)


class _OpLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


SYNC_OPS = {"aten._local_scalar_dense", "aten.nonzero", "aten.is_nonzero", "aten.item", "aten.masked_select"}


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_forward_and_backward_read_nothing_back_to_the_host(causal, masked):
    """Every aten op of forward and backward (several chunks, padding) is recorded: none reads a value back
    (item, nonzero, masked_select...).  Power: with check_inputs=True the finiteness check does."""
    mod = PRFAttention(8, 12, seed=0, causal=causal, chunk=8)
    q, k, v = (torch.randn(2, 3, 37, 8, requires_grad=True) for _ in range(3))
    pad = torch.zeros(2, 1, 37, dtype=torch.bool)
    pad[0, :, :5] = True
    with _OpLog() as log:
        out = mod(q, k, v, key_padding_mask=pad if masked else None)
        out.sum().backward()
    assert not log.ops & SYNC_OPS, log.ops & SYNC_OPS
    checking = PRFAttention(8, 12, seed=0, causal=causal, check_inputs=True)
    with _OpLog() as log:
        checking(q, k, v)
    assert log.ops & SYNC_OPS


# ---------------------------------------------------------------------------
# kinds, dtypes and masks (item 3)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_every_kind_dtype_and_mask(kind, causal, dtype):
    """Each positive kind, float32/bf16/fp16 inputs with a padding mask (left padding, holes, one sequence
    fully padded): output in the input dtype, finite, equal to the float64 quadratic form of the same
    kind on the rounded inputs to the dtype's rounding; padded keys get zero gradient.  Power: the same
    form with the mask ignored is outside that tolerance."""
    q, k, v, pad = _masked_inputs(5, 41)
    mod = PRFAttention(16, 24, "simplex", kind=kind, kind_params=_params(kind), causal=causal, seed=1, chunk=16)
    qh, kh, vh = (t.to(dtype).requires_grad_() for t in (q, k, v))
    out = mod(qh, kh, vh, key_padding_mask=pad)
    assert out.dtype == dtype and torch.isfinite(out).all()
    ref = _dense(qh, kh, vh, mod.weights, kind, _params(kind), causal, pad)
    tol = max(torch.finfo(dtype).eps, 2e-6)
    err = (out.double() - ref).abs()
    assert torch.all(err <= tol * ref.abs() + 1e-5 * ref.abs().max())
    unmasked = _dense(qh, kh, vh, mod.weights, kind, _params(kind), causal, None)
    assert not torch.all((out.double() - unmasked).abs() <= tol * ref.abs() + 1e-5 * ref.abs().max())
    out.float().sum().backward()
    assert torch.isfinite(kh.grad.float()).all()
    assert torch.equal(kh.grad[0, :, :6], torch.zeros_like(kh.grad[0, :, :6]))
    assert torch.equal(out[2], torch.zeros_like(out[2]))


def test_hyperbolic_width_and_numpy_agreement():
    """kind='hyperbolic' has 2m features (the record's width) and equals the numpy reference on the same W."""
    Q, K, V = at.synthetic_qkv(50, 16, 3, batch=(2,), logit_std=0.5)
    mod = PRFAttention(16, 20, "orthogonal", kind="hyperbolic", seed=0, dtype=torch.float64)
    for causal in (False, True):
        mod.causal = causal
        ref = at.prf_attention(Q, K, V, mod.weights.numpy(), causal=causal, kind="hyperbolic")
        out = mod(*(torch.as_tensor(a) for a in (Q, K, V))).numpy()
        assert np.max(np.abs(out - ref)) < 1e-12
        plain = at.prf_attention(Q, K, V, mod.weights.numpy(), causal=causal)
        assert np.max(np.abs(plain - ref)) > 1e-4  # power: a different estimator


def test_oprf_a_minimises_the_second_moment():
    """oprf_a(rho) is the argmin over A < 1/8 of d log(1-4A) - d/2 log(1-8A) + rho d/(1-8A) (the averaged log
    second moment of optimised PRFs), found on a fine grid; 0 at rho = 0."""
    d = 16
    for rho in (0.0, 0.1, 1.0, 4.0):
        a = np.linspace(-2.0, 0.12, 200001)
        f = d * np.log(1 - 4 * a) - d / 2 * np.log(1 - 8 * a) + rho * d / (1 - 8 * a)
        assert abs(a[np.argmin(f)] - oprf_a(rho)) < 2e-5
    assert oprf_a(0.0) == 0.0
    assert torch.allclose(oprf_a(torch.tensor([0.1, 1.0])), torch.tensor([oprf_a(0.1), oprf_a(1.0)]))


@needs_oprf
def test_oprf_fixed_a_equals_numpy():
    """oprf with a given A: the same A for queries and keys, equal to the numpy reference."""
    Q, K, V = at.synthetic_qkv(40, 16, 2, batch=(2,), logit_std=0.5)
    for causal in (False, True):
        mod = PRFAttention(16, 24, kind="oprf", kind_params={"A": -0.1}, causal=causal, seed=0,
                           dtype=torch.float64)
        ref = at.prf_attention(Q, K, V, mod.weights.numpy(), causal=causal, kind="oprf", params={"A": -0.1})
        assert np.max(np.abs(mod(*(torch.as_tensor(a) for a in (Q, K, V))).numpy() - ref)) < 1e-12


@needs_oprf
def test_oprf_data_driven_a_ignores_padded_content():
    """Bidirectional oprf without A: A comes from the unpadded queries and keys, so changing the padded keys
    and values (and, with query_padding_mask, the padded queries) leaves the output unchanged; it equals the
    fixed-A module at oprf_a of the sequence's statistic.  Power: without the query mask, changing padded
    queries does change the output (they enter A)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 30, 16, generator=g, dtype=torch.float64) for _ in range(3))
    pad = torch.zeros(1, 30, dtype=torch.bool)
    pad[0, 20:] = True
    mod = PRFAttention(16, 24, kind="oprf", seed=0, dtype=torch.float64)
    out = mod(q, k, v, key_padding_mask=pad, query_padding_mask=pad)
    q2, k2, v2 = q.clone(), k.clone(), v.clone()
    q2[0, 20:] *= 5
    k2[0, 20:] *= 5
    v2[0, 20:] += 3
    out2 = mod(q2, k2, v2, key_padding_mask=pad, query_padding_mask=pad)
    assert torch.allclose(out[0, :20], out2[0, :20], rtol=1e-12, atol=1e-13)
    keep = ~pad[0]
    qs, ks = q[0][keep] * 16 ** -0.25, k[0][keep] * 16 ** -0.25
    rho = float(((qs[:, None, :] + ks[None, :, :]) ** 2).sum(-1).mean() / 16)
    fixed = PRFAttention.from_weights(mod.weights, kind="oprf", kind_params={"A": oprf_a(rho)})
    assert torch.allclose(out[0, :20], fixed(q[0, :20], k[0][keep], v[0][keep]), rtol=1e-10, atol=1e-12)
    out3 = mod(q2, k2, v2, key_padding_mask=pad)
    assert not torch.allclose(out[0, :20], out3[0, :20], rtol=1e-6, atol=1e-8)


@needs_oprf
def test_oprf_data_driven_a_is_a_constant_of_the_backward():
    """Bidirectional oprf without A: the gradient in q, k, v is that of the module with the same A given (A a
    constant of the backward pass, as documented), to 1e-10.  Power: it is not the derivative of the
    data-driven forward, whose A moves with q: a finite difference along a direction that scales q
    differs from it."""
    g = torch.Generator().manual_seed(5)
    q, k, v = (0.7 * torch.randn(1, 12, 8, generator=g, dtype=torch.float64).requires_grad_() for _ in range(3))
    mod = PRFAttention(8, 10, kind="oprf", seed=0, dtype=torch.float64)
    cot = torch.randn(1, 12, 8, generator=g, dtype=torch.float64)
    grads = torch.autograd.grad((mod(q, k, v) * cot).sum(), (q, k, v))
    s = 8 ** -0.25
    with torch.no_grad():
        rho = float(((s * q[0, :, None, :] + s * k[0, None, :, :]) ** 2).sum(-1).mean() / 8)
    fixed = PRFAttention.from_weights(mod.weights, kind="oprf", kind_params={"A": oprf_a(rho)})
    want = torch.autograd.grad((fixed(q, k, v) * cot).sum(), (q, k, v))
    for a, b in zip(grads, want):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)
    h = 1e-5
    with torch.no_grad():
        fd = ((mod(q * (1 + h), k, v) - mod(q * (1 - h), k, v)) * cot).sum() / (2 * h)
    assert abs(float(fd) - float((grads[0] * q.detach()).sum())) > 1e-6 * abs(float(fd))


@needs_oprf
def test_oprf_a_per_sequence_when_the_map_takes_tensors():
    """With a map that takes tensor A, each sequence has its own A (another batch item's content does not
    change a sequence's output) and no synchronisation happens; while the registered map takes only a
    float, the module uses one A per batch (documented) and this test is skipped."""
    from montecarlo import nn as mnn

    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 25, 16, generator=g, dtype=torch.float64) for _ in range(3))
    mod = PRFAttention(16, 24, kind="oprf", seed=0, dtype=torch.float64)
    out = mod(q, k, v)
    if "oprf" in mnn._FLOAT_PARAMETERS_ONLY:
        pytest.skip("the registered oprf log-feature map takes only a float A (montecarlo.oprf.check_a): one A "
                    "per batch until it takes arrays")
    q2 = q.clone()
    q2[1] *= 2
    assert torch.allclose(out[0], mod(q2, k, v)[0], rtol=1e-12, atol=1e-13)


@needs_oprf
def test_oprf_causal_a_is_fixed_within_a_forward_and_tracked_in_training():
    """Causal oprf without A: eval uses the running statistic (A = 0, plain PRFs, before any training
    batch); a training forward uses the statistic of earlier batches and then updates it; outputs of a
    prefix never depend on later positions."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 32, 16, generator=g, dtype=torch.float64) for _ in range(3))
    mod = PRFAttention(16, 24, kind="oprf", causal=True, seed=0, dtype=torch.float64).eval()
    prf = PRFAttention.from_weights(mod.weights, kind="oprf", kind_params={"A": 0.0}, causal=True)
    assert torch.allclose(mod(q, k, v), prf(q, k, v), rtol=1e-12)
    mod.train()
    first = mod(q, k, v)  # uses A = 0, then records this batch
    assert torch.allclose(first, prf(q, k, v), rtol=1e-12)
    assert float(mod.running_rho) > 0 and int(mod.running_steps) == 1
    mod.eval()
    a = mod(q, k, v)
    k2 = k.clone()
    k2[:, 20:] *= 3
    b = mod(q, k2, v)
    assert torch.allclose(a[:, :20], b[:, :20], rtol=1e-12, atol=1e-13)
    assert not torch.allclose(a, prf(q, k, v), rtol=1e-6)


# ---------------------------------------------------------------------------
# bad input (item 6)


def test_bad_input_names_the_argument():
    mod = PRFAttention(8, 10, seed=0)
    x = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=r"q and k must have last dimension d_head = 8"):
        mod(x, torch.randn(2, 5, 6), x)
    with pytest.raises(ValueError, match=r"q must hold at least one position \(L >= 1\)"):
        mod(x[:, :0], x, x)
    with pytest.raises(ValueError, match=r"k must hold at least one position"):
        mod(x, x[:, :0], x[:, :0])
    with pytest.raises(TypeError, match="key_padding_mask must be a bool tensor"):
        mod(x, x, x, key_padding_mask=torch.zeros(2, 5, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \(..., L_k\) with L_k = 5"):
        mod(x, x, x, key_padding_mask=torch.zeros(5, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="leading .* must broadcast"):
        mod(x, x, x, key_padding_mask=torch.zeros(3, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="query_padding_mask only matters"):
        mod(x, x, x, query_padding_mask=torch.zeros(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="chunk must be a power of two"):
        PRFAttention(8, 10, chunk=48)
    with pytest.raises(ValueError, match="kind must be one of"):
        PRFAttention(8, 10, kind="rff")
    with pytest.raises(ValueError, match="kind must be one of"):
        PRFAttention(8, 10, kind="favor")
    with pytest.raises(ValueError, match="kind_params has 'A', which kind='prf' does not take"):
        PRFAttention(8, 10, kind_params={"A": 0.1})
    with pytest.raises(ValueError, match="device must name a torch device"):
        PRFAttention(8, 10, device="gpu0")
    with pytest.raises(TypeError, match="check_inputs must be True or False"):
        PRFAttention(8, 10, check_inputs="yes")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_device_without_cuda():
    with pytest.raises(ValueError, match=r"device='cuda' asks for CUDA, but CUDA is not available"):
        PRFAttention(8, 10, device="cuda")
    with pytest.raises(ValueError, match=r"device='cuda:1' asks for CUDA"):
        PRFAttention(8, 10, device=torch.device("cuda:1"))


@pytest.mark.parametrize("causal", [False, True])
def test_non_finite_inputs(causal):
    """check_inputs=True: a ValueError naming the tensor.  Off (the default, no synchronisation): the
    documented behaviour, NaN exactly where the bad value reaches: a NaN key makes its sequence's outputs
    NaN (bidirectional) or those from its position on (causal); a NaN query only its own row; other
    sequences stay finite."""
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 20, 8, generator=g) for _ in range(3))
    for name, bad in (("q", q), ("k", k), ("v", v)):
        for value in (math.nan, math.inf):
            t = bad.clone()
            t[0, 7, 0] = value
            args = {"q": q, "k": k, "v": v, name: t}
            with pytest.raises(ValueError, match=f"{name} must be finite"):
                PRFAttention(8, 12, seed=0, causal=causal, check_inputs=True)(**args)
    mod = PRFAttention(8, 12, seed=0, causal=causal)
    kb = k.clone()
    kb[0, 7, 0] = math.nan
    out = mod(q, kb, v)
    assert torch.isfinite(out[1]).all()
    if causal:
        assert torch.isfinite(out[0, :7]).all() and torch.isnan(out[0, 7:]).all()
    else:
        assert torch.isnan(out[0]).all()
    qb = q.clone()
    qb[0, 7, 0] = math.nan
    out = mod(qb, k, v)
    assert torch.isnan(out[0, 7]).all()
    rows = torch.ones(20, dtype=torch.bool)
    rows[7] = False
    assert torch.isfinite(out[0, rows]).all() and torch.isfinite(out[1]).all()


# ---------------------------------------------------------------------------
# CUDA


@cuda
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_forward_backward_without_synchronisation(causal):
    """torch.cuda.set_sync_debug_mode('error') raises on any synchronising call: forward and backward of the
    module (bf16, mask, several chunks) run under it."""
    mod = PRFAttention(64, 128, "simplex", causal=causal, seed=0, device="cuda")
    q, k, v = (torch.randn(2, 4, 1000, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    pad = torch.zeros(2, 1, 1000, dtype=torch.bool, device="cuda")
    pad[0, :, :17] = True
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = mod(q, k, v, key_padding_mask=pad)
        out.float().sum().backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(out).all()


@cuda
@pytest.mark.parametrize("kind", KINDS)
def test_cuda_kinds_match_cpu(kind):
    """Each kind on the GPU equals the CPU module on the same weights (float32, causal and not)."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 300, 32, generator=g) for _ in range(3))
    for causal in (False, True):
        cpu = PRFAttention(32, 64, kind=kind, kind_params=_params(kind), causal=causal, seed=0, chunk=64)
        gpu = PRFAttention.from_weights(cpu.weights.cuda(), kind=kind, kind_params=_params(kind), causal=causal)
        a = cpu(q, k, v)
        b = gpu(q.cuda(), k.cuda(), v.cuda()).cpu()
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5)


@cuda
def test_cuda_torch_func_and_export():
    """On a GPU (the fused path where Triton imports): torch.func.grad of a causal bf16 module equals autograd's
    gradient (the kernels step aside under the transform: the torch levels, to bf16's rounding), and the module
    exported and loaded again (the kernels as registered operators; montecarlo.nn._fused imported) gives its
    outputs (within one bf16 rounding: the ratio's torch form)."""
    g = torch.Generator().manual_seed(14)
    q, k, v = (torch.randn(2, 4, 512, 64, generator=g).to("cuda", torch.bfloat16) for _ in range(3))
    mod = PRFAttention(64, 128, "simplex", causal=True, seed=0, device="cuda").eval()
    x = q.clone().requires_grad_()
    mod(x, k, v).float().square().sum().backward()
    got = torch.func.grad(lambda a: mod(a, k, v).float().square().sum())(q)
    assert torch.allclose(got.float(), x.grad.float(), rtol=5e-2, atol=5e-2 * x.grad.float().abs().max())
    importlib.import_module("montecarlo.nn._fused")  # (registers the operators a loaded program calls)
    buf = io.BytesIO()
    torch.export.save(torch.export.export(mod, (q, k, v)), buf)
    buf.seek(0)
    out = torch.export.load(buf).module()(q, k, v).float()
    assert torch.allclose(out, mod(q, k, v).float(), rtol=2 ** -7, atol=1e-3)


# ---------------------------------------------------------------------------
# the two ways of combining the chunks of the causal scan


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("route", ["scan", "product"])
def test_causal_scan_and_loop_agree_and_are_exact(grad, route, monkeypatch):
    """The prefix states off the CPU (accelerators, torch.compile), by the log-depth scan over chunks or by
    one batched product (few chunks), and the loop over chunks (CPU; in place without autograd) give the
    same outputs and gradients, equal to the unstabilised float64 quadratic form, on keys whose log-features
    span far more than float32's exp range (keys of the first chunks x 30) and with a padded tail (L not a
    multiple of the chunk).  Power: a scan whose combine drops the earlier state's decay (P_1 instead of
    P_1 e^{O_1 - O}), or a product without its factors, is off by more than 10% of the output's scale."""
    from montecarlo import nn as mnn

    monkeypatch.setattr(mnn, "PRODUCT_STATES", 0.0 if route == "scan" else 1e9)

    g = torch.Generator().manual_seed(3)
    d, L, b = 8, 75, 8
    q, k, v = (torch.randn(2, L, d, generator=g, dtype=torch.float64) for _ in range(3))
    k[:, :20] *= 30.0
    w = torch.randn(12, d, generator=g, dtype=torch.float64)
    rec = feature_kinds.get("prf")
    scale = d ** -0.5
    outs, grads = [], []
    for scan in (False, True):
        leaves = [x.detach().clone().requires_grad_(grad) for x in (q, k, v)]
        with torch.set_grad_enabled(grad):
            lq, lk = (mnn._log_features(x, w, None, rec, scale, {}) for x in leaves[:2])
            out = mnn._causal(lq, lk, leaves[2], b, scan=scan)
        assert torch.isfinite(out).all()
        outs.append(out.detach())
        if grad:
            grads.append(torch.autograd.grad((out * torch.linspace(-1, 1, d, dtype=out.dtype)).sum(), leaves))
    assert torch.allclose(outs[0], outs[1], rtol=1e-10, atol=1e-12)
    for ga, gb in zip(*grads):
        assert torch.allclose(ga, gb, rtol=1e-8, atol=1e-10)
    with torch.no_grad():  # the exact quadratic form, in log space (float64 overflows on these keys)
        lq, lk = (mnn._log_features(x, w, None, rec, scale, {}) for x in (q, k))
        s = torch.logsumexp(lq.unsqueeze(-2) + lk.unsqueeze(-3), -1)
        s = s.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), -math.inf)
        ref = torch.softmax(s, -1) @ v
    assert torch.allclose(outs[0], ref, rtol=1e-9, atol=1e-11)

    def no_decay(K, *_):  # the earlier states added without their rescaling: overflows
        return torch.cat([torch.zeros_like(K[:, :1]), K.cumsum(1)[:, :-1]], 1)

    monkeypatch.setattr(mnn, "_scan_states" if route == "scan" else "_product_states", no_decay)
    with torch.no_grad():
        lq, lk = (mnn._log_features(x.float(), w.float(), None, rec, scale, {}) for x in (q, k))
        bad = mnn._causal(lq, lk, v.float(), b, scan=True)
    assert (bad.double() - ref).abs().max() > 0.1 * ref.abs().max()


def test_squared_norm_backward_is_the_gradient():
    """The log-features' squared norm with its one-product backward passes gradcheck and gradgradcheck in
    float64 (as x * x summed).  Power: half the gradient fails gradcheck."""
    from montecarlo import nn as mnn

    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(16), dtype=torch.float64, requires_grad=True)
    assert torch.equal(mnn._SquaredNorm.apply(x), (x * x).sum(-1, keepdim=True))
    assert torch.autograd.gradcheck(mnn._SquaredNorm.apply, (x,))
    assert torch.autograd.gradgradcheck(mnn._SquaredNorm.apply, (x,))

    class Half(mnn._SquaredNorm):
        @staticmethod
        def backward(ctx, g):
            return mnn._SquaredNorm.backward(ctx, g) / 2

    assert not torch.autograd.gradcheck(Half.apply, (x,), raise_exception=False)


def test_ratio_backward_is_the_gradient(monkeypatch):
    """The ratio's hand-written backward (one cotangent [g / den, -(g / den) . out]) passes gradcheck and
    gradgradcheck in float64 without a mask, with a per-row mask (rows that see no key: output 0, gradient
    0) and with a per-sequence mask broadcast over the rows.  Power: a backward without the denominator's
    term fails gradcheck."""
    from montecarlo import nn as mnn

    g = torch.Generator().manual_seed(15)
    nd = torch.randn(2, 5, 4, generator=g, dtype=torch.float64)
    nd[..., -1] = nd[..., -1].abs() + 0.5
    rows = torch.ones(2, 5, 1, dtype=torch.bool)
    rows[0, :2] = False
    sequences = torch.tensor([True, False]).reshape(2, 1, 1)
    for seen in (None, rows, sequences):
        x = nd.masked_fill(~seen, 0.0) if seen is not None else nd.clone()  # (what the scan gives unseen rows)
        x.requires_grad_(True)
        out = mnn._ratio(x, seen)
        if seen is not None:
            keep = seen.expand(2, 5, 1)
            assert torch.equal(out[~keep.squeeze(-1)], torch.zeros_like(out[~keep.squeeze(-1)]))
            gx, = torch.autograd.grad(out.sum(), x)
            assert torch.equal(gx[~keep.squeeze(-1)], torch.zeros_like(gx[~keep.squeeze(-1)]))
        assert torch.autograd.gradcheck(lambda y: mnn._ratio(y, seen), (x,))
        assert torch.autograd.gradgradcheck(lambda y: mnn._ratio(y, seen), (x,))

    def numerator_only(ctx, g):
        nd, seen = ctx.saved_tensors
        return torch.cat([g / nd[..., -1:], torch.zeros_like(nd[..., -1:])], -1), None

    monkeypatch.setattr(mnn._Ratio, "backward", staticmethod(numerator_only))
    x = nd.clone().requires_grad_(True)
    assert not torch.autograd.gradcheck(lambda y: mnn._ratio(y, None), (x,), raise_exception=False)


def test_product_states_equal_the_scan(monkeypatch):
    """The batched-product prefix states equal the log-depth scan's (values and gradients, float64) on
    offsets spread far beyond float32's exp range, with fully padded chunks (offset clamped to neg, summary
    0) first and in the middle; the states' adjoint (the fused operator's backward) equals that gradient by
    both routes (the product's transpose, the scan run backwards).  Power: the backward scan without its
    rescaling by e^(O_c' - B_c'+1) differs."""
    from montecarlo import nn as mnn

    g = torch.Generator().manual_seed(11)
    n, N, M, D = 2, 13, 5, 4
    oc = 40.0 * torch.randn(n, N, M, generator=g, dtype=torch.float64)
    K = torch.rand(n, N, M, D, generator=g, dtype=torch.float64)
    neg = mnn._very_negative(torch.float64)
    for c in (0, 6):  # padded chunks: no keys, offset neg
        oc[0, c], K[0, c] = neg, 0.0
    raw = oc.masked_fill(oc == neg, -math.inf)
    before = mnn._exclusive_cummax(raw, 1, -math.inf)
    K.requires_grad_(True)
    a = mnn._product_states(K, oc, before, neg)
    b = mnn._scan_states(K, oc)
    assert torch.isfinite(a).all() and a.abs().max() > 0.1
    assert torch.allclose(a, b, rtol=1e-12, atol=1e-14)
    w = torch.randn(a.shape, generator=g, dtype=a.dtype)
    ga, = torch.autograd.grad((a * w).sum(), K)
    gb, = torch.autograd.grad((b * w).sum(), K)
    assert torch.allclose(ga, gb, rtol=1e-12, atol=1e-14)
    for setting in (100.0, 0.0):  # product, scan
        monkeypatch.setattr(mnn, "PRODUCT_STATES", setting)
        assert torch.allclose(mnn._prefix_states_adjoint(w, oc, before, neg), ga, rtol=1e-12, atol=1e-14)
    B = before.clamp_min(neg)
    unscaled = mnn._scan_states(w.flip(1), (-B).flip(1)).flip(1)
    assert not torch.allclose(torch.cat([unscaled[:, :-1], 0 * unscaled[:, -1:]], 1), ga, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("causal", [False, True])
def test_empty_batch(causal):
    """A batch of no sequences gives an empty output of the right shape and empty gradients (the causal path
    raised a reshape error before)."""
    mod = PRFAttention(8, 16, "simplex", causal=causal, seed=0)
    q = torch.zeros(0, 5, 8, requires_grad=True)
    v = torch.zeros(0, 5, 3, requires_grad=True)
    out = mod(q, q, v)
    assert out.shape == (0, 5, 3)
    gq, gv = torch.autograd.grad(out.sum(), (q, v))
    assert gq.shape == q.shape and gv.shape == v.shape


def test_causal_inference_overwrites_only_its_own_buffers():
    """Without autograd the causal path works in place on the log-features it is handed, never on a
    broadcast (stride-0) view of them, and never on v: keys broadcast over heads give the same output as
    keys repeated per head, and v is unchanged."""
    g = torch.Generator().manual_seed(4)
    mod = PRFAttention(8, 12, seed=0, causal=True, chunk=4)
    q = torch.randn(2, 3, 21, 8, generator=g)
    k = torch.randn(2, 1, 21, 8, generator=g)
    v = torch.randn(2, 3, 21, 8, generator=g)
    v0 = v.clone()
    with torch.no_grad():
        a = mod(q, k, v)
        b = mod(q, k.expand(2, 3, 21, 8).contiguous(), v)
    assert torch.equal(v, v0)
    assert torch.allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("group_chunks", [1, 3])
def test_causal_inference_by_groups_of_chunks(monkeypatch, group_chunks):
    """CPU inference works through the chunks in groups (GROUP_ENTRIES) carrying one state: groups of one
    chunk and of three (the last group shorter) give the outputs of the autograd path, with a padded key
    mask and broadcast keys.  Power: dropping the carried state between groups changes the outputs."""
    from montecarlo import nn as mnn

    g = torch.Generator().manual_seed(5)
    mod = PRFAttention(8, 12, seed=0, causal=True, chunk=4)
    q, v = torch.randn(2, 3, 37, 8, generator=g), torch.randn(2, 3, 37, 8, generator=g)
    k = torch.randn(2, 1, 37, 8, generator=g)
    pad = torch.zeros(2, 1, 37, dtype=torch.bool)
    pad[0, 0, 5:9] = True
    qg = q.clone().requires_grad_(True)
    ref = mod(qg, k, v, pad).detach()  # autograd path (the stack of states)
    monkeypatch.setattr(mnn, "GROUP_ENTRIES", group_chunks * 6 * 4 * 12)  # n b M = 6 * 4 * 12
    with torch.no_grad():
        out = mod(q, k, v, pad)
    assert torch.allclose(out, ref, rtol=1e-5, atol=1e-6)
    real = mnn._loop_in_place
    monkeypatch.setattr(mnn, "_loop_in_place", lambda *a: real(*a[:-1], None))
    with torch.no_grad():
        broken = mod(q, k, v, pad)
    assert not torch.allclose(broken, ref, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("direct_block", [32, 2])
def test_within_chunk_levels_backward_is_the_gradient(monkeypatch, direct_block):
    """The hand-written backward of the within-chunk levels (_Levels: exponentials recomputed per level,
    gradients accumulated in place) is the gradient: torch.autograd.gradcheck (finite differences, float64)
    and equal to autograd through the plain computation, for the direct (s x s) and the state (m x d_v) form
    of the levels (DIRECT_BLOCK 32 and 2).  Power: a backward that drops the levels' key gradients fails."""
    from montecarlo import nn as mnn

    monkeypatch.setattr(mnn, "DIRECT_BLOCK", direct_block)
    g = torch.Generator().manual_seed(6)
    n, N, b, M, D = 2, 3, 8, 5, 4
    lq = torch.randn(n, N, b, M, generator=g, dtype=torch.float64)
    lk = torch.randn(n, N, b, M, generator=g, dtype=torch.float64)
    v = torch.randn(n, N, b, D, generator=g, dtype=torch.float64)
    neg = mnn._very_negative(torch.float64)
    sizes = [1, 2, 4]
    offsets = [mnn._halves(lk, 1, 0)] + [mnn._halves(lk, s, 0).amax(-2, keepdim=True) for s in sizes[1:]]
    leaves = [x.clone().requires_grad_(True) for x in (lq - 3.0, lk, v)]

    def levels(q, k, vv):
        return mnn._Levels.apply(q, k, vv, neg, *offsets)

    assert torch.autograd.gradcheck(levels, leaves, eps=1e-6, atol=1e-8, rtol=1e-6)
    out = levels(*leaves)
    cot = torch.randn(out.shape, generator=g, dtype=torch.float64)
    ga = torch.autograd.grad((out * cot).sum(), leaves)
    plain = [x.detach().clone().requires_grad_(True) for x in leaves]
    gb = torch.autograd.grad((mnn._levels(*plain, offsets, neg) * cot).sum(), plain)
    for a, b_ in zip(ga, gb):
        assert torch.allclose(a, b_, rtol=1e-10, atol=1e-12)
    real = mnn._Levels.backward

    def no_key_grad(ctx, G):
        gq, gk, gv, *rest = real(ctx, G)
        return gq, torch.zeros_like(gk), gv, *rest

    monkeypatch.setattr(mnn._Levels, "backward", staticmethod(no_key_grad))
    out = levels(*leaves)
    gc = torch.autograd.grad((out * cot).sum(), leaves)
    assert not torch.allclose(gc[1], gb[1], rtol=1e-3, atol=1e-6)


# ---------------------------------------------------------------------------
# torch.func transforms


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("causal", [False, True])
def test_torch_func_jacobians_and_hessians_equal_autograds(kind, causal):
    """torch.func's reverse and forward modes (jacrev, jacfwd, hessian = jacfwd of jacrev, and jacrev of jacrev)
    and torch.autograd.forward_ad's dual numbers of a module (float64, 12 positions in chunks of 4: the levels
    and the states over chunks; left padding; oprf with A from the data, a constant of every derivative) equal
    torch.autograd.functional's jacobian and hessian (backward passes, and create_graph for the hessian:
    another route through the hand-written backwards).  Power: the jacobian of a module with other projections
    differs."""
    g = torch.Generator().manual_seed(9)
    x = torch.randn(12, 16, dtype=torch.float64, generator=g)
    pad = torch.zeros(12, dtype=torch.bool)
    pad[:3] = True
    mod = PRFAttention(16, 8, "simplex", causal=causal, seed=0, chunk=4, kind=kind).eval()

    def f(a):
        return mod(a, a, a, key_padding_mask=pad)

    J = torch.autograd.functional.jacobian(f, x)
    assert torch.allclose(torch.func.jacrev(f)(x), J, rtol=1e-10, atol=1e-12)
    assert torch.allclose(torch.func.jacfwd(f)(x), J, rtol=1e-10, atol=1e-12)
    t = torch.randn(x.shape, generator=g, dtype=x.dtype)
    with torch.autograd.forward_ad.dual_level():  # forward mode without torch.func
        tangent = torch.autograd.forward_ad.unpack_dual(f(torch.autograd.forward_ad.make_dual(x, t))).tangent
    assert torch.allclose(tangent, torch.einsum("abcd,cd->ab", J, t), rtol=1e-10, atol=1e-12)
    H = torch.autograd.functional.hessian(lambda a: f(a).sum(), x)
    assert torch.allclose(torch.func.hessian(lambda a: f(a).sum())(x), H, rtol=1e-9, atol=1e-11)
    assert torch.allclose(torch.func.jacrev(torch.func.jacrev(lambda a: f(a).sum()))(x), H, rtol=1e-9, atol=1e-11)
    other = PRFAttention(16, 8, "simplex", causal=causal, seed=1, chunk=4, kind=kind).eval()
    assert not torch.allclose(torch.func.jacrev(lambda a: other(a, a, a, key_padding_mask=pad))(x), J,
                              rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("causal", [False, True])
def test_vmap_and_per_sample_gradients(causal):
    """torch.func.vmap of the module over a leading axis (inputs and masks batched: left padding, holes, a fully
    padded sequence; 200 positions in chunks of 64, so that causal inference would take the in-place path,
    which under vmap gives way) equals the module on the batch; vmap of grad gives each sample's gradient, as
    autograd per sample; torch.func.jvp on the batch equals torch.autograd.functional.jvp (reverse mode twice).
    Power: the gradient of another sample differs."""
    q, k, v, pad = _masked_inputs(10, 200)
    mod = PRFAttention(16, 24, "simplex", causal=causal, seed=0, chunk=64).eval()
    assert torch.allclose(torch.func.vmap(lambda a, b, c, p: mod(a, b, c, key_padding_mask=p))(q, k, v, pad),
                          mod(q, k, v, key_padding_mask=pad), rtol=1e-5, atol=1e-6)
    per = torch.func.vmap(torch.func.grad(lambda a, p: mod(a, a, a, key_padding_mask=p).square().sum()))(q, pad)
    for i in range(q.shape[0]):
        x = q[i].clone().requires_grad_()
        mod(x, x, x, key_padding_mask=pad[i]).square().sum().backward()
        assert torch.allclose(per[i], x.grad, rtol=1e-5, atol=1e-6), i
    assert not torch.allclose(per[0], per[1], rtol=1e-3, atol=1e-3)
    t = torch.randn(q.shape, generator=torch.Generator().manual_seed(12))  # forward mode on 4-d inputs
    want = torch.autograd.functional.jvp(lambda a: mod(a, a, a, key_padding_mask=pad), q, t)[1]  # (reverse twice)
    got = torch.func.jvp(lambda a: mod(a, a, a, key_padding_mask=pad), (q,), (t,))[1]
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-5)


def test_torch_func_refuses_running_statistics_in_training():
    """Causal oprf with A from running statistics updates them in place in training mode, which a torch.func
    transform cannot: a RuntimeError that names the module's kind and the ways out (kind_params, eval())."""
    x = torch.randn(2, 30, 16, generator=torch.Generator().manual_seed(11))
    mod = PRFAttention(16, 8, "simplex", causal=True, seed=0, kind="oprf")
    with pytest.raises(RuntimeError, match=r"kind='oprf', causal=True\) in training mode updates running "
                                           r"statistics.*give kind_params, or use eval\(\)"):
        torch.func.grad(lambda a: mod(a, a, a).sum())(x)
    assert int(mod.running_steps) == 0
    torch.func.grad(lambda a: mod.eval()(a, a, a).sum())(x)


# ---------------------------------------------------------------------------
# second derivatives


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_second_derivatives_are_the_derivatives_of_the_gradient(kind, causal, monkeypatch):
    """backward(create_graph=True) gives a gradient that is differentiable again (Hessian-vector products,
    gradient penalties): torch.autograd.gradgradcheck (finite differences of the gradient, float64) of the
    module, causal (chunks of 4 over 9 positions: the prefix states and the within-chunk levels, whose
    hand-written backward then runs through autograd instead) and not, with a padded key.  Before, the causal
    scan raised "modified by an inplace operation".  Power: a second derivative that drops the levels'
    contribution (the first-order backward's in-place form with its graph cut) fails the same check."""
    from torch.autograd.gradcheck import GradcheckError

    from montecarlo import nn as mnn

    att = PRFAttention(4, 6, "orthogonal", kind=kind, kind_params=_params(kind), causal=causal, seed=0,
                       dtype=torch.float64, chunk=4).eval()
    g = torch.Generator().manual_seed(3)
    q, k, v = (0.5 * torch.randn(2, 9, 4, generator=g, dtype=torch.float64).requires_grad_() for _ in range(3))
    pad = torch.zeros(2, 9, dtype=torch.bool)
    pad[1, 4] = True
    fn = lambda a, b, c: att(a, b, c, key_padding_mask=pad)  # noqa: E731
    assert torch.autograd.gradgradcheck(fn, (q, k, v), eps=1e-6, atol=1e-6, rtol=1e-4)
    if causal and kind == "prf":  # (power, once: the same levels serve every kind)
        real = mnn._differentiable_vjp

        def cut(f, inputs, G, needs):
            return tuple(None if x is None else x.detach() for x in real(f, inputs, G, needs))

        monkeypatch.setattr(mnn, "_differentiable_vjp", cut)
        with pytest.raises(GradcheckError):
            torch.autograd.gradgradcheck(fn, (q, k, v), eps=1e-6, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
def test_activation_checkpointing_gives_the_same_gradients(causal):
    """torch.utils.checkpoint (non-reentrant: the forward recomputed in the backward) around the module gives
    the same output and gradients as without it, causal (the hand-written levels' backward) and not."""
    from torch.utils.checkpoint import checkpoint

    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(2, 40, 16, generator=g) for _ in range(3))
    mod = PRFAttention(16, 24, "simplex", causal=causal, seed=0, chunk=16)
    res = []
    for ck in (False, True):
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        out = checkpoint(mod, *leaves, use_reentrant=False) if ck else mod(*leaves)
        res.append((out.detach(), torch.autograd.grad(out.square().sum(), leaves)))
    (a, ga), (b, gb) = res
    assert torch.equal(a, b)
    for x, y in zip(ga, gb):
        assert torch.allclose(x, y, rtol=1e-6, atol=1e-7)


def test_activation_checkpointing_never_redraws_in_the_backward():
    """With redraw_every, the forward that checkpointing recomputes inside the backward does not redraw (nor
    count): the gradient equals the plain run's and the features stay those of the forward pass.  Before, the
    recomputation redrew, so the backward differentiated another estimator (gradient sum 241 against 382 in
    this setting) and the schedule advanced twice per step.  Causal oprf with A from running statistics
    cannot be recomputed exactly (the statistics moved after the forward): a RuntimeError naming the way out,
    not a silently different A; in eval mode it recomputes."""
    from torch.utils.checkpoint import checkpoint

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 40, 16, generator=g) for _ in range(3))
    res = []
    for ck in (False, True):
        mod = PRFAttention(16, 24, "simplex", seed=0, redraw_every=1)
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        mod(*leaves)
        out = checkpoint(mod, *leaves, use_reentrant=False) if ck else mod(*leaves)
        w = mod.weights.clone()
        res.append(torch.autograd.grad(out.square().sum(), leaves))
        assert torch.equal(w, mod.weights) and mod.calls_since_redraw == 1
    for x, y in zip(*res):
        assert torch.allclose(x, y, rtol=1e-6, atol=1e-7)
    if HAS_OPRF:
        mod = PRFAttention(16, 24, "simplex", kind="oprf", causal=True, seed=0, chunk=16)
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        out = checkpoint(mod, *leaves, use_reentrant=False)
        with pytest.raises(RuntimeError, match="kind_params"):
            torch.autograd.grad(out.square().sum(), leaves)
        mod.eval()
        out = checkpoint(mod, *leaves, use_reentrant=False)
        assert all(torch.isfinite(x).all() for x in torch.autograd.grad(out.square().sum(), leaves))


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch built without torch.distributed")
def test_two_ranks_of_distributed_data_parallel(tmp_path):
    """Two gloo processes (``tests/_ddp_rank.py``) train under DistributedDataParallel with redraw_every=1: with
    one seed on both ranks their projections agree bit for bit after every step and nothing warns; without a
    seed they agree after the first step (DDP broadcasts rank 0's buffers before each forward) and differ after
    each later one, whose forward redraws after that broadcast, and each rank warns at both of those redraws.
    The differing steps are the power: a redraw that DDP kept in step would fail them."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests._procs import run_groups

    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1")
    cmds = [[sys.executable, "-m", "tests._ddp_rank", str(rank), str(tmp_path / "rendezvous")] for rank in (0, 1)]
    try:  # (about 4 s; a stuck rank dumps its threads' stacks after 75 s, which the failure shows)
        results = run_groups(cmds, timeout=600, cwd=root, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the two ranks did not finish in 100 s:\n{(exc.output or '')[-6000:]}")
    for rc, out in results:
        assert rc == 0, out[-3000:]
    first, second = (json.loads(out.strip().splitlines()[-1]) for _, out in results)
    assert first["seeded"]["steps"] == second["seeded"]["steps"]
    assert first["seeded"]["warnings"] == second["seeded"]["warnings"] == 0
    agree = [a == b for a, b in zip(first["unseeded"]["steps"], second["unseeded"]["steps"])]
    assert agree == [True, False, False]
    assert first["unseeded"]["warnings"] == second["unseeded"]["warnings"] == 2


@needs_oprf
@pytest.mark.parametrize("dtype,rtol", [(torch.float64, 1e-14), (torch.float32, 3e-6)])
def test_oprf_a_star_keeps_its_relative_accuracy_at_every_scale(dtype, rtol):
    """montecarlo.oprf.optimal_a on tensors (what PRFAttention's data rule evaluates in the inputs' dtype) against
    A* = (1 - 2s - sqrt((2s+1)^2 + 8s)) / 16 at 90 digits, s from 1e-30 to 1e37.  Before, the form
    -s / ((1 - 2s) + sqrt(...)) cancelled at large s: 2x off at 1e7 and -inf at 1e8 in float32, which turned
    finite inputs of size 5000 into an all-NaN output; that old form fails this check (power)."""
    from mpmath import mp

    from montecarlo.oprf import optimal_a

    grid = [1e-30, 1e-8, 1e-3, 0.25, 0.49, 0.5, 0.51, 3.0, 1e3, 1e6, 1e7, 1e8, 1e15, 1e30, 1e37]
    s = torch.tensor(grid, dtype=dtype)
    with mp.workdps(90):
        ref = [float((1 - 2 * mp.mpf(x) - mp.sqrt((2 * mp.mpf(x) + 1) ** 2 + 8 * mp.mpf(x))) / 16)
               for x in s.double().tolist()]
    np.testing.assert_allclose(optimal_a(s).double().numpy(), ref, rtol=rtol)
    old = (-s / ((1 - 2 * s) + torch.sqrt((2 * s + 1) ** 2 + 8 * s))).double().numpy()
    assert not np.allclose(old, ref, rtol=rtol)
    x = torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(3)) * 5000
    assert torch.isfinite(PRFAttention(8, 16, kind="oprf", seed=0)(x, x, torch.randn(2, 6, 3))).all()


@needs_oprf
def test_oprf_statistic_ignores_padded_and_non_finite_rows():
    """A from the data (FAVOR++) reads the unpadded rows with a finite squared norm only: garbage at padded
    keys (NaN, or 1e25 whose square overflows float32) changes no output (before: every output of the sequence
    NaN), a NaN query row is NaN in its own output only (before: its whole sequence), and causal attention's
    running statistic is not poisoned by a NaN at a padded slot or an inf activation (before: running_rho NaN
    and every later output NaN, in eval() too and in the state_dict).  Power: the clean reference differs from
    a module that sees the garbage unmasked."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 6, 8, generator=gen)
    v = torch.randn(2, 6, 3, generator=gen)
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[:, 4:] = True
    att = PRFAttention(8, 16, kind="oprf", seed=0)
    ref = att(x, x.masked_fill(pad[..., None], 0.0), v, key_padding_mask=pad)
    for garbage in (float("nan"), 1e25):
        k = x.masked_fill(pad[..., None], garbage)
        torch.testing.assert_close(att(x, k, v, key_padding_mask=pad), ref, rtol=0, atol=0)
    assert not torch.allclose(att(x, x.masked_fill(pad[..., None], 3.0), v), ref)
    q = x.clone()
    q[0, 5] = float("nan")
    out = att(q, x, v)
    assert out.isnan().any(-1).tolist() == [[False] * 5 + [True], [False] * 6]
    clean = PRFAttention(8, 16, kind="oprf", seed=0)(x[:1, :5], x[:1], v[:1])
    torch.testing.assert_close(out[0, :5], clean[0], rtol=1e-6, atol=1e-6)

    cpad = torch.zeros(2, 6, dtype=torch.bool)
    cpad[1, 5] = True
    for make in ("padded_nan", "inf_activation"):
        causal = PRFAttention(8, 16, kind="oprf", causal=True, seed=0)
        bad = x.clone()
        if make == "padded_nan":
            bad[1, 5] = float("nan")
            causal(bad, bad, v, key_padding_mask=cpad, query_padding_mask=cpad)
        else:
            bad[0, 2, 0] = float("inf")
            causal(bad, bad, v)
        assert torch.isfinite(causal.running_rho) and causal.running_rho > 0, make
        for _ in range(2):
            assert torch.isfinite(causal(x, x, v)).all(), make
        assert torch.isfinite(causal.eval()(x, x, v)).all() and torch.isfinite(causal.state_dict()["running_rho"])


def test_engineer_round_two_findings():
    """Found by trying the module as an ML engineer (each failed before its fix):
    - under CPU autocast, q and k in float32 (a float32 rotary table times bf16 projections) with v in bf16
      raised a TypeError where SDPA runs: now all three are cast to autocast's dtype as SDPA does (the output
      equals the module's on the cast inputs, in bf16); outside autocast mixed dtypes still raise;
    - load_state_dict from a module of another coupling loaded silently (the module then held simplex rows
      under coupling='orthogonal'): now a ValueError naming both couplings; a state saved without the coupling
      (before it was recorded) still loads;
    - from_weights accepted NaN projections (every output NaN): now a ValueError naming weights;
    - reset_parameters rewound a numpy Generator passed as seed, which the caller may share between layers
      (two layers then drew the same projections): now it draws that stream's next values, as a
      torch.Generator's; a seed still rewinds (power);
    - d_head = 1 with the simplex coupling said 'd must be ...': now names d_head."""
    import warnings

    gen = torch.Generator().manual_seed(4)
    lin = torch.nn.Linear(8, 24)
    x = torch.randn(2, 5, 8, generator=gen)
    cos = torch.randn(5, 8, generator=gen)
    att = PRFAttention(8, 16, seed=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        q, k, v = lin(x).chunk(3, -1)
        q, k = q * cos, k * cos
        assert (q.dtype, v.dtype) == (torch.float32, torch.bfloat16)
        out = att(q, k, v)
        sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        ref = att(q.bfloat16(), k.bfloat16(), v)
    assert out.dtype == sdpa.dtype == torch.bfloat16 and torch.equal(out, ref)
    with pytest.raises(TypeError, match="share one dtype"):
        att(q.detach(), k.detach(), v.detach())

    simplex = PRFAttention(8, 16, "simplex", seed=0)
    orth = PRFAttention(8, 16, "orthogonal", seed=1)
    with pytest.raises(ValueError, match="coupling 'simplex', this module draws 'orthogonal'"):
        orth.load_state_dict(simplex.state_dict())
    old = simplex.state_dict()
    del old["_extra_state"]["coupling"]
    twin = PRFAttention(8, 16, "simplex", seed=5)
    twin.load_state_dict(old)
    assert torch.equal(twin.weights, simplex.weights)

    bad = torch.randn(16, 8)
    bad[3, 2] = float("nan")
    with pytest.raises(ValueError, match="weights must be finite"):
        PRFAttention.from_weights(bad)

    shared = np.random.default_rng(0)
    layers = [PRFAttention(8, 8, seed=shared) for _ in range(2)]
    layers[0].reset_parameters()
    layers[0].redraw()
    assert not torch.allclose(layers[0].weights, layers[1].weights, atol=1e-3)
    seeded = PRFAttention(8, 8, seed=3)
    first = seeded.weights.clone()
    seeded.redraw()
    assert torch.equal(seeded.reset_parameters().weights, first)

    with pytest.raises(ValueError, match="d_head must be an integer >= 2 for the simplex coupling"):
        PRFAttention(1, 4)
    with pytest.raises(ValueError, match="d_head must be an integer >= 2"):
        PRFAttention.from_weights(torch.randn(4, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert PRFAttention(1, 4, "iid", seed=0)(x[..., :1], x[..., :1], x).shape == (2, 5, 8)


# ---------------------------------------------------------------------------
# montecarlo.nn as attention users meet it (issue 41 items 7 and 8, issue 38's PRFAttention fuzz findings): the
# range of the inputs refused loudly (check_inputs=True) and documented, kind parameters and oversized
# projections refused in the constructor naming the argument, (B, L_k) key-padding masks applied per batch
# element, the nn.MultiheadAttention adapter (exact plumbing against nn.MultiheadAttention, the large-m limit,
# TransformerEncoderLayer's fast path kept out, a small training run), fullgraph with redraw_every.


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_finite_inputs_beyond_the_float32_range_are_refused_with_the_check(dtype):
    """Fuzz finding: bidirectional float32/bf16 attention of finite entries ~2.5e19 returned all-NaN outputs
    although the docs said bidirectional attention is unaffected.  Now check_inputs=True refuses them naming
    the input; with the check off the documented NaN (never a finite wrong number)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 6, 8, generator=g)
    big = (x * 2.5e19).to(dtype)
    for name, args in (("q", (big, x.to(dtype), x.to(dtype))), ("k", (x.to(dtype), big, x.to(dtype)))):
        with pytest.raises(ValueError, match=f"{name}'s log-features .*bidirectional attention computed in float32"):
            PRFAttention(8, 16, seed=0, check_inputs=True)(*args)
        assert torch.isnan(PRFAttention(8, 16, seed=0)(*args)).all()
    small = (x * 1e18).to(dtype)  # s|x|^2 / 2 about 1e36 < 8.5e37: inside the range, finite
    assert torch.isfinite(PRFAttention(8, 16, seed=0, check_inputs=True)(small, small, x.to(dtype))).all()


def test_scale_beyond_the_compute_dtype_is_refused_without_a_check():
    """scale = 1e308 is not a float32 number: every output was NaN; now a ValueError naming scale (no
    synchronisation needed).  In float64 the scale is representable and only the check can tell."""
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(1))
    with pytest.raises(ValueError, match="scale = 1e\\+308 is beyond the range of float32"):
        PRFAttention(8, 16, seed=0, scale=1e308)(x, x, x)
    with pytest.raises(ValueError, match="scale = 1e\\+308 is beyond the range of float32"):
        PRFAttention(8, 16, seed=0, scale=1e308)(x.bfloat16(), x.bfloat16(), x.bfloat16())
    xd = x.double()
    mod = PRFAttention(8, 16, seed=0, scale=1e308, dtype=torch.float64, check_inputs=True)
    with pytest.raises(ValueError, match="q's log-features are not finite"):
        mod(xd, xd, xd)
    assert torch.isfinite(mod(xd * 1e-160, xd * 1e-160, xd)).all()  # s|x|^2 about 1e-12: fine


def test_causal_float64_range():
    """Causal float64 attention turned NaN from entries ~1e10 (documented for float32 only); the check now
    refuses it, and inputs just inside input_range give finite outputs (every kind, d = 8 and 64)."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 300, 8, generator=g, dtype=torch.float64)
    mod = PRFAttention(8, 32, seed=0, causal=True, dtype=torch.float64, check_inputs=True)
    with pytest.raises(ValueError, match="causal attention computed in float64"):
        mod(x * 1e10, x * 1e10, x)
    assert torch.isnan(PRFAttention(8, 32, seed=0, causal=True, dtype=torch.float64)(x * 1e10, x * 1e10, x)).any()
    for compute in (torch.float32, torch.float64):
        for kind in KINDS:
            for d in (8, 64):
                y = torch.randn(2, 300, d, generator=g, dtype=torch.float64)
                k = y * (0.3 + torch.rand(2, 300, 1, generator=g, dtype=torch.float64))
                att = PRFAttention(d, 64, seed=1, causal=True, kind=kind, kind_params=_params(kind), dtype=compute,
                                   check_inputs=True)
                top = max(float((y * y).sum(-1).max()), float((k * k).sum(-1).max()))
                f = math.sqrt(0.9 * 2 * input_range(compute, True) / att.scale / top)
                out = att((f * y).to(compute), (f * k).to(compute), y[..., :3].to(compute))
                assert torch.isfinite(out).all(), (compute, kind, d)


def test_documented_causal_thresholds_hold():
    """The module docs' numbers: input_range is log(largest) / (8 eps) causally (9.3e7 in float32, 4.0e17 in
    float64) and a quarter of the largest number bidirectionally."""
    assert input_range(torch.float32, True) == pytest.approx(9.3e7, rel=0.01)
    assert input_range(torch.float64, True) == pytest.approx(4.0e17, rel=0.01)
    assert input_range(torch.float32, False) == pytest.approx(8.5e37, rel=0.01)
    assert input_range(torch.float64, False) == pytest.approx(4.49e307, rel=0.01)


def test_oprf_a_refused_in_the_constructor():
    """Fuzz finding: PRFAttention(kind="oprf", kind_params={"A": 0.125}) was refused only at the first forward."""
    with pytest.raises(ValueError, match=r"kind_params=\{'A': 0.125\} for kind='oprf': A must be a finite real < 1/8"):
        PRFAttention(8, 16, kind="oprf", kind_params={"A": 0.125})
    with pytest.raises(ValueError, match="kind_params"):
        PRFAttention(8, 16, kind="oprf", kind_params={"A": math.inf})
    PRFAttention(8, 16, kind="oprf", kind_params={"A": 0.124})  # inside: accepted


def test_oversized_projections_name_n_features():
    """Fuzz finding: PRFAttention(8, 2**40)'s AllocationError named '(m, d)' and not n_features."""
    with pytest.raises(AllocationError, match=r"PRFAttention\(d_head=8, n_features=1099511627776\).*reduce n_features"):
        PRFAttention(8, 2**40)
    with pytest.raises(ValueError, match="n_features must be"):
        PRFAttention(8, 0)


def _batch_inputs(B, H, L, d=8, seed=3):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, L, d, generator=g, dtype=torch.float64) for _ in range(3))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("B,H", [(3, 3), (2, 4)])
def test_batch_mask_applies_per_batch_element(B, H, causal):
    """A (B, L_k) mask with (B, H, L, d) inputs is nn.MultiheadAttention's convention, one row per batch
    element: equal to mask[:, None].  Before, with B == H its rows were paired with the heads (the output
    changed by about half); power: the per-head reading differs."""
    q, k, v = _batch_inputs(B, H, 12)
    mask = torch.zeros(B, 12, dtype=torch.bool)
    for b in range(B):
        mask[b, : 2 + 3 * b] = True
    mod = PRFAttention(8, 32, seed=0, causal=causal, dtype=torch.float64)
    got = mod(q, k, v, key_padding_mask=mask)
    assert torch.equal(got, mod(q, k, v, key_padding_mask=mask[:, None]))
    for b in range(B):  # each batch element alone, its own row of the mask
        assert torch.allclose(got[b], mod(q[b], k[b], v[b], key_padding_mask=mask[b]), rtol=1e-12, atol=1e-14)
    if B == H:
        per_head = mod(q, k, v, key_padding_mask=mask[None])
        assert (per_head - got).norm() > 0.1 * got.norm()


def test_batch_mask_of_another_batch_size_is_refused():
    q, k, v = _batch_inputs(2, 4, 10)
    mod = PRFAttention(8, 16, seed=0)
    with pytest.raises(ValueError, match=r"read as nn.MultiheadAttention's \(batch, L\) mask.*mask\[:, None\]"):
        mod(q, k, v, key_padding_mask=torch.zeros(4, 10, dtype=torch.bool))
    out = mod(q, k, v, key_padding_mask=torch.zeros(1, 10, dtype=torch.bool))  # one row for every element
    assert torch.equal(out, mod(q, k, v))
    assert mod(q, k, v, key_padding_mask=torch.zeros(1, 4, 10, dtype=torch.bool)).shape == (2, 4, 10, 8)


def test_fullgraph_with_redraw_every_names_redraw_every():
    mod = PRFAttention(8, 16, seed=0, redraw_every=2)
    x = torch.randn(2, 5, 8)
    with pytest.raises(Exception, match="redraw_every=None"):
        torch.compile(mod, fullgraph=True, backend="eager")(x, x, x)
    assert torch.compile(mod.eval(), fullgraph=True, backend="eager")(x, x, x).shape == (2, 5, 8)


# ---------------------------------------------------------------------------
# Checkpoints and copies of montecarlo.nn.PRFAttention complete (issue 41 item 6): a state_dict of a module
# seeded with any numpy bit generator loads with weights_only=True, the seed sequence's spawn counter travels
# with it (a resumed run's later deep copies fork as the uninterrupted run's), and layers sharing one stream
# share one fork after a deep copy of the model.


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


# ---------------------------------------------------------------------------
# Decoding token by token with montecarlo.nn.PRFAttention (issue 41 item 4): ``step`` with an explicit
# recurrent state in the log-space stabilised form of the causal scan, ``prefill`` for a prompt; the outputs of
# L steps equal the causal forward over the sequence (float64 to 1e-12 relative per row; float32 and bf16
# within the forward's own rounding), across redraws (a state of other projections is refused), with padding,
# batch and torch.compile; bad states refused.


CASES = [(kind, {"A": -0.1} if kind == "oprf" else None) for kind in KINDS]


if "oprf" in KINDS:
    CASES.append(("oprf", None))  # A from the running statistics


def _decode_inputs(L, dtype=torch.float64, seed=0, lead=(2, 3), d=8, dv=5):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*lead, L, d, generator=g, dtype=torch.float64).to(dtype),
            torch.randn(*lead, L, d, generator=g, dtype=torch.float64).to(dtype),
            torch.randn(*lead, L, dv, generator=g, dtype=torch.float64).to(dtype))


def _decode(att, q, k, v, pad=None, state=None, step=None):
    step = step or att.step
    outs = []
    for t in range(q.shape[-2]):
        sl = slice(t, t + 1)
        o, state = step(q[..., sl, :], k[..., sl, :], v[..., sl, :], state,
                        key_padding_mask=None if pad is None else pad[..., sl])
        outs.append(o)
    return torch.cat(outs, -2), state


def _row_error(a, b):
    """max over rows of |a - b| / |b| (rows of zeros: absolute)."""
    a, b = a.double(), b.double()
    return float(((a - b).norm(dim=-1) / b.norm(dim=-1).clamp_min(1e-300)).max())


@pytest.mark.parametrize("kind,params", CASES)
def test_steps_equal_the_causal_forward_float64(kind, params):
    """200 steps (several of the forward's chunks of 64) with a (B, L) key-padding mask (holes; the first 7
    keys of one sequence padded, so its first queries see no key: output 0 in both), batch x heads (2, 3):
    every row within 1e-12 of the forward.  The running statistics of a data-driven A were moved by training
    first (A != 0).  Power: the forward without the mask differs by far more."""
    q, k, v = _decode_inputs(200)
    att = PRFAttention(8, 24, seed=1, causal=True, kind=kind, kind_params=params, dtype=torch.float64, chunk=64)
    if params is None and kind == "oprf":
        att.train()(q, k, v)  # moves running_rho off 0
        assert float(att.running_rho) > 0
    att.eval()
    pad = torch.rand(2, 200, generator=torch.Generator().manual_seed(2)) < 0.2
    pad[1, :7] = True
    want = att(q, k, v, key_padding_mask=pad)
    got, state = _decode(att, q, k, v, pad)
    assert _row_error(got, want) < 1e-12
    assert torch.equal(got[1, :, :7], torch.zeros_like(got[1, :, :7]))
    assert _row_error(att(q, k, v), want) > 1e-3
    assert state.sums.shape == (2, 3, att.weights.shape[0] * feature_kinds.get(kind).width, 6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_steps_in_half_and_single_precision_within_the_forwards_rounding(dtype):
    """Against the float64 forward of the same projections: the steps' error is at most 4 times the forward's
    own (float32 / bf16 inputs, features in float32) plus the output dtype's half ulp."""
    q, k, v = _decode_inputs(130, dtype)
    att = PRFAttention(8, 24, seed=3, causal=True).eval()
    ref = PRFAttention.from_weights(att.weights.double(), causal=True).eval()
    exact = ref(q.double(), k.double(), v.double())
    fwd = att(q, k, v)
    got, _ = _decode(att, q, k, v)
    assert got.dtype == dtype
    unit = torch.finfo(dtype).eps / 2
    assert float((got.double() - exact).abs().max()) <= 4 * float((fwd.double() - exact).abs().max()) + unit


def test_prefill_then_steps_and_broadcast_leading_shapes():
    """prefill of a 70-token prompt then 50 steps equal the forward over 120 tokens; keys shared by the heads
    (leading shape (2, 1) against queries' (2, 3)) broadcast as in forward."""
    q, k, v = _decode_inputs(120)
    k, v = k[:, :1], v[:, :1]
    att = PRFAttention(8, 16, seed=4, causal=True, dtype=torch.float64).eval()
    want = att(q, k, v)
    out, state = att.prefill(q[..., :70, :], k[..., :70, :], v[..., :70, :])
    rest, state = _decode(att, q[..., 70:, :], k[..., 70:, :], v[..., 70:, :], state=state)
    assert _row_error(torch.cat([out, rest], -2), want) < 1e-12
    assert state.sums.shape[:2] == (2, 3)


def test_redraws_and_loads_refuse_old_states():
    """The state records the projections it was built with: after redraw() or load_state_dict a step with the
    old state is a ValueError; a new decode equals the forward with the new projections.  A state of another
    module (an exact deep copy included) is refused too."""
    import copy

    q, k, v = _decode_inputs(20)
    att = PRFAttention(8, 16, seed=5, causal=True, dtype=torch.float64).eval()
    _, state = _decode(att, q, k, v)
    att.redraw()
    with pytest.raises(ValueError, match="other projections"):
        att.step(q[..., :1, :], k[..., :1, :], v[..., :1, :], state)
    got, state = _decode(att, q, k, v)
    assert _row_error(got, att(q, k, v)) < 1e-12
    att.load_state_dict(att.state_dict())
    with pytest.raises(ValueError, match="other projections"):
        att.step(q[..., :1, :], k[..., :1, :], v[..., :1, :], state)
    twin = copy.deepcopy(att)
    _, state = att.step(q[..., :1, :], k[..., :1, :], v[..., :1, :])
    with pytest.raises(ValueError, match="another PRFAttention module"):
        twin.step(q[..., :1, :], k[..., :1, :], v[..., :1, :], state)


def test_training_mode_steps_never_redraw():
    q, k, v = _decode_inputs(12)
    att = PRFAttention(8, 16, seed=6, causal=True, redraw_every=1, dtype=torch.float64).train()
    w = att.weights.clone()
    _decode(att, q, k, v)
    assert torch.equal(att.weights, w) and att.calls_since_redraw == 0


def test_steps_under_torch_compile():
    """The compiled step (torch.compile, aot_eager backend: Dynamo's graph and AOTAutograd, as inductor sees
    them) gives the eager steps' outputs; the state is a named tuple (a pytree)."""
    q, k, v = _decode_inputs(24)
    att = PRFAttention(8, 16, seed=7, causal=True, dtype=torch.float64).eval()
    want, _ = _decode(att, q, k, v)
    got, state = _decode(att, q, k, v, step=torch.compile(att.step, backend="aot_eager"))
    assert isinstance(state, DecodingState)
    assert _row_error(got, want) < 1e-14


def test_steps_are_differentiable_as_the_forward():
    """Gradients through the steps equal the forward's (float64): the offsets are constants in both."""
    q, k, v = (t.requires_grad_() for t in _decode_inputs(30, lead=(2,)))
    att = PRFAttention(8, 16, seed=8, causal=True, dtype=torch.float64).eval()
    g = torch.randn(2, 30, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    want = torch.autograd.grad((att(q, k, v) * g).sum(), (q, k, v))
    got = torch.autograd.grad((_decode(att, q, k, v)[0] * g).sum(), (q, k, v))
    for a, b in zip(got, want):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


def test_bad_steps_are_refused():
    q, k, v = _decode_inputs(3)
    att = PRFAttention(8, 16, seed=9, causal=True, dtype=torch.float64)
    with pytest.raises(ValueError, match="step\\(\\) takes one position"):
        att.step(q, k, v)
    with pytest.raises(ValueError, match="build the module with causal=True"):
        PRFAttention(8, 16, seed=0).step(q[..., :1, :], k[..., :1, :], v[..., :1, :])
    _, state = att.step(q[..., :1, :], k[..., :1, :], v[..., :1, :])
    with pytest.raises(ValueError, match="do not fit a state"):
        att.step(q[:1, :, :1, :].expand(4, 3, 1, 8), k[..., :1, :].repeat(2, 1, 1, 1), v[..., :1, :].repeat(2, 1, 1, 1),
                 state)
    with pytest.raises(ValueError, match="d_v = 5"):
        att.step(q[..., 1:2, :], k[..., 1:2, :], v[..., 1:2, :2], state)
    with pytest.raises(ValueError, match="keep one input dtype"):
        att.step(q[..., 1:2, :].float(), k[..., 1:2, :].float(), v[..., 1:2, :].float(),
                 state._replace(sums=state.sums.float()))
    with pytest.raises(TypeError, match="DecodingState"):
        att.step(q[..., 1:2, :], k[..., 1:2, :], v[..., 1:2, :], (state.sums, state.offset))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_steps_equal_the_fused_forward(dtype):
    """On the GPU (the forward's fused kernels and features' kernel where Triton is importable; the steps use
    the features' kernel too): prefill of 300 tokens and 40 steps against the forward over 340, within 4 times
    the forward's own error against float64 plus half an ulp of the output dtype."""
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 4, 340, 64, device="cuda", generator=g).to(dtype) for _ in range(3))
    att = PRFAttention(64, 128, seed=0, causal=True, device="cuda").eval()
    exact = PRFAttention.from_weights(att.weights.double(), causal=True).eval()(q.double(), k.double(), v.double())
    fwd = att(q, k, v)
    out, state = att.prefill(q[..., :300, :], k[..., :300, :], v[..., :300, :])
    rest, _ = _decode(att, q[..., 300:, :], k[..., 300:, :], v[..., 300:, :], state=state)
    got = torch.cat([out, rest], -2)
    unit = torch.finfo(dtype).eps / 2
    assert float((got.double() - exact).abs().max()) <= 4 * float((fwd.double() - exact).abs().max()) + unit


def test_steps_through_the_kernels_interpreted(monkeypatch):
    """The kernels' paths on the CPU through Triton's interpreter (as tests/test_nn_fused.py): the forward by the
    fused causal operator and the features' kernel, the steps and the prefill through the features' kernel;
    float32, within 4 times the forward's own error against float64."""
    import os

    pytest.importorskip("triton")
    if torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton's interpreter is off here (on a GPU: test_cuda_steps_equal_the_fused_forward)")
    from montecarlo import nn as mnn

    q, k, v = _decode_inputs(40, torch.float32, lead=(1, 2))
    att = PRFAttention(8, 16, seed=10, causal=True, chunk=16).eval()
    exact = PRFAttention.from_weights(att.weights.double(), causal=True).eval()(q.double(), k.double(), v.double())
    monkeypatch.setattr(mnn, "_fused_applies", lambda x, b: True)
    monkeypatch.setattr(mnn, "_fused_features_apply", lambda x, w: True)
    from montecarlo.nn import _fused

    calls, real = [], _fused.scaled_log_features
    monkeypatch.setattr(_fused, "scaled_log_features", lambda *a: calls.append(1) or real(*a))
    fwd = att(q, k, v)
    out, state = att.prefill(q[..., :24, :], k[..., :24, :], v[..., :24, :])
    rest, _ = _decode(att, q[..., 24:, :], k[..., 24:, :], v[..., 24:, :], state=state)
    got = torch.cat([out, rest], -2)
    assert len(calls) == 1 + 2 + 16  # the forward, the prefill (its forward and its keys), one per step
    assert float((got.double() - exact).abs().max()) <= 4 * float((fwd.double() - exact).abs().max()) + 6e-8


# ---------------------------------------------------------------------------
# The torch SimRF-Performer attention module (montecarlo.nn, Sec. 5.4) against the numpy implementation,
# gradients against an unstabilised autograd reference, feature redrawing and freezing, and bad input.
#
# The CUDA tests at the end are skipped without a GPU; on one, run them with
# ``python -m pytest -q -p no:cacheprovider tests/test_nn_module.py -k cuda``.


def _t(a, dtype=torch.float64):
    return torch.tensor(np.asarray(a), dtype=dtype)


@pytest.mark.parametrize("causal", [False, True])
def test_module_equals_numpy_on_the_same_weights(causal):
    Q, K, V = at.synthetic_qkv(130, 16, 1, batch=(2, 3), logit_std=0.5)
    W = mc.sample_weights("simplex", 16, 24, rng=2)
    ref = at.prf_attention(Q, K, V, W, causal=causal)
    mod = PRFAttention.from_weights(_t(W), causal=causal, chunk=32)
    out = mod(_t(Q), _t(K), _t(V)).numpy()
    assert np.max(np.abs(out - ref)) < 1e-12
    if causal:  # every chunk length (one position per chunk: the scan alone; 256: the dyadic blocks alone)
        for chunk in (1, 2, 8, 64, 256):
            mod.chunk = chunk
            assert np.max(np.abs(mod(_t(Q), _t(K), _t(V)).numpy() - ref)) < 1e-12
    mod32 = PRFAttention.from_weights(_t(W, torch.float32), causal=causal)
    out32 = mod32(_t(Q, torch.float32), _t(K, torch.float32), _t(V, torch.float32)).numpy()
    assert np.max(np.abs(out32 - ref)) < 1e-4 * np.max(np.abs(ref))


@pytest.mark.parametrize("causal, chunk", [(False, None), (True, 8), (True, 1), (True, 64)])
def test_gradients_equal_unstabilised_autograd_reference(causal, chunk):
    """The detached offsets cancel, so d(out)/d(q, k, v) equals the gradient of the plain quadratic
    form exp(.)-features (float64, moderate inputs where nothing overflows); causal: scan only (chunk 1),
    dyadic blocks only (64 > L = 20, padded), both (8)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 20, 8, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mod = PRFAttention(8, 12, "orthogonal", causal=causal, seed=1, dtype=torch.float64, chunk=chunk)
    w = mod.weights
    s = 8 ** -0.25

    def feats(x):
        x = s * x
        return torch.exp(x @ w.T - 0.5 * (x * x).sum(-1, keepdim=True)) / math.sqrt(12)

    A = feats(q) @ feats(k).transpose(-1, -2)
    if causal:
        A = torch.tril(A)
    ref = (A @ v) / A.sum(-1, keepdim=True)
    out = mod(q, k, v)
    assert torch.allclose(out, ref, rtol=1e-12, atol=1e-13)
    cot = torch.randn(out.shape, generator=g, dtype=torch.float64)
    g1 = torch.autograd.grad(out, (q, k, v), cot)
    g2 = torch.autograd.grad(ref, (q, k, v), cot)
    for a, b in zip(g1, g2):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


def test_coupling_geometry_of_the_drawn_features():
    """The module draws the requested coupling: simplex rows of a block subtend cos = -1/(d-1),
    orthogonal rows cos = 0 (Sec. 3, eq. simplex_vectors)."""
    d = 8
    for coupling, cos in (("simplex", -1 / (d - 1)), ("orthogonal", 0.0)):
        w = PRFAttention(d, d, coupling, seed=3, dtype=torch.float64).weights
        u = w / w.norm(dim=1, keepdim=True)
        c = u @ u.T
        off = c[~torch.eye(d, dtype=torch.bool)]
        assert torch.allclose(off, torch.full_like(off, cos), atol=1e-12)


def test_redraw_freeze_and_determinism():
    x = torch.randn(1, 2, 30, 16)
    mod = PRFAttention(16, 20, seed=4, redraw_every=1)
    mod.train()
    a = mod(x, x, x)
    b = mod(x, x, x)  # second call in training mode redraws first
    assert not torch.equal(a, b)
    mod.freeze()
    c, d = mod(x, x, x), mod(x, x, x)
    assert torch.equal(c, d) and mod.frozen
    w = mod.weights.clone()
    mod.redraw()  # explicit redraw works even when frozen
    assert not torch.equal(w, mod.weights)
    mod.unfreeze().eval()
    e, f = mod(x, x, x), mod(x, x, x)
    assert torch.equal(e, f)  # eval never redraws
    same = PRFAttention(16, 20, seed=4)
    other = PRFAttention(16, 20, seed=5)
    fresh = PRFAttention(16, 20, seed=4, redraw_every=1)
    assert torch.equal(same.weights, fresh.weights) and not torch.equal(same.weights, other.weights)
    fresh.redraw()
    same.redraw()
    assert torch.equal(same.weights, fresh.weights)  # the redraw sequence is seeded
    clone = PRFAttention(16, 20, seed=99)
    clone.load_state_dict(same.state_dict())
    clone.eval(), same.eval()
    assert torch.equal(clone(x, x, x), same(x, x, x))


def test_float32_stabilisation_and_batch_independence():
    """float32 with item 0's keys of huge norm (log-features about -3000, far beyond exp's float32
    range below item 1's): finite, equal to float64 numpy, and item 1 unchanged by rescaling item 0."""
    Q, K, V = at.synthetic_qkv(64, 16, 6, batch=(2,), logit_std=1.0)
    K[0] *= 40.0
    W = mc.sample_weights("simplex", 16, 32, rng=7)
    for causal in (False, True):
        mod = PRFAttention.from_weights(_t(W, torch.float32), causal=causal)
        out = mod(_t(Q, torch.float32), _t(K, torch.float32), _t(V, torch.float32))
        assert torch.isfinite(out).all()
        ref = at.prf_attention(Q, K, V, W, causal=causal)
        assert np.max(np.abs(out.numpy() - ref)) < 1e-3 * np.max(np.abs(ref))
        K2 = K.copy()
        K2[0] *= 2
        out2 = mod(_t(Q, torch.float32), _t(K2, torch.float32), _t(V, torch.float32))
        assert torch.equal(out[1], out2[1])


def _one_offset_per_chunk(lq, lk, v, chunk):
    """Causal attention with one per-feature key offset per chunk (the scan without the dyadic blocks):
    correct in exact arithmetic, the power check of the test below."""
    out = []
    for lo in range(0, lq.shape[0], chunk):
        hi = lo + chunk
        o = lk[:hi].amax(0)
        eq, ek = torch.exp(lq[lo:hi] + o - (lq[lo:hi] + o).amax(-1, keepdim=True)), torch.exp(lk[:hi] - o)
        a = torch.tril(eq @ ek.T, diagonal=lo)
        out.append((a @ v[:hi]) / a.sum(-1, keepdim=True))
    return torch.cat(out)


def test_causal_float32_with_dominating_future_keys():
    """float32, keys 0..47 scaled by 30 (log-features about -1800, far beyond exp's float32 range
    below the later keys'): finite, causal (positions < 48 ignore the later keys) and equal to float64
    numpy; power: with one per-feature offset per chunk the boundary chunk is not finite."""
    Q, K, V = at.synthetic_qkv(96, 16, 8, logit_std=1.0)
    W = mc.sample_weights("simplex", 16, 24, rng=9)
    K[:48] *= 30.0
    K2 = K.copy()
    K2[48:] = np.random.default_rng(10).normal(size=(48, 16))
    mod = PRFAttention.from_weights(_t(W, torch.float32), causal=True, chunk=32)
    a = mod(_t(Q, torch.float32), _t(K, torch.float32), _t(V, torch.float32))
    b = mod(_t(Q, torch.float32), _t(K2, torch.float32), _t(V, torch.float32))
    assert torch.isfinite(a).all() and torch.isfinite(b).all()
    assert torch.allclose(a[:48], b[:48], rtol=1e-5, atol=1e-6)
    ref = at.prf_attention(Q, K, V, W, causal=True)
    assert np.max(np.abs(a.numpy() - ref)) < 1e-3 * np.max(np.abs(ref))
    from montecarlo.nn import _log_features
    from theory import feature_kinds

    rec = feature_kinds.get("prf")
    w = mod.weights
    lq, lk = (_log_features(_t(x, torch.float32), w, None, rec, 16 ** -0.5, {}) for x in (Q, K))
    assert not torch.isfinite(_one_offset_per_chunk(lq, lk, _t(V, torch.float32), 32)).all()


def test_bad_input():
    mod = PRFAttention(8, 10, seed=0)
    x = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match="last dimension d_head = 8"):
        mod(torch.randn(2, 5, 7), torch.randn(2, 5, 7), x)
    with pytest.raises(ValueError, match=r"v must have shape \(..., L_k, d_v\) with L_k = 4 keys"):
        mod(x, x[:, :4], x)
    with pytest.raises(ValueError, match="v must have shape"):
        mod(x, x, x[:, :3])
    with pytest.raises(ValueError, match="causal attention needs as many queries as keys, got 5 and 4"):
        PRFAttention(8, 10, seed=0, causal=True)(x, x[:, :4], x[:, :4])
    with pytest.raises(ValueError, match="leading .* must broadcast"):
        mod(x, torch.randn(3, 5, 8), torch.randn(3, 5, 8))
    with pytest.raises(TypeError, match="q, k and v must share one dtype"):
        mod(x, x.double(), x)
    with pytest.raises(TypeError, match="q must be float32, float64, bfloat16 or float16, got torch.int64"):
        mod(x.long(), x, x)
    with pytest.raises(TypeError, match="key_padding_mask must be a bool tensor"):
        mod(x, x, x, key_padding_mask=torch.zeros(2, 5))
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \(..., L_k\) with L_k = 5"):
        mod(x, x, x, key_padding_mask=torch.zeros(2, 4, dtype=torch.bool))
    bad = x.clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="k must be finite"):
        PRFAttention(8, 10, seed=0, check_inputs=True)(x, bad, x)
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        mod(x.numpy(), x, x)
    with pytest.raises(ValueError, match="coupling must be one of"):
        PRFAttention(8, 10, "favor")
    with pytest.raises(ValueError, match="n_features must be an integer >= 1"):
        PRFAttention(8, 0)
    with pytest.raises(ValueError, match="dtype must be one of torch.float32, torch.float64, torch.bfloat16"):
        PRFAttention(8, 10, dtype=torch.int32)
    for flag in ("yes", "False", 1, None):
        with pytest.raises(TypeError, match="causal must be True or False"):
            PRFAttention(8, 10, causal=flag)
    assert PRFAttention(8, 10, causal=np.bool_(True), seed=0).causal is True
    with pytest.raises(ValueError, match="d must be an integer >= 2 for the simplex coupling"):
        PRFAttention(1, 10)
    with pytest.raises(ValueError, match="give seed or generator, not both"):
        PRFAttention(8, 10, seed=0, generator=torch.Generator())
    with pytest.raises(MemoryError, match="would need"):  # montecarlo's AllocationError (also a ValueError)
        PRFAttention(64, 10**12)
    with pytest.raises(TypeError, match="generator must be None or a torch.Generator"):
        PRFAttention(8, 10, generator=np.random.default_rng(0))
    with pytest.raises(TypeError, match="seed must be None, an int >= 0"):
        PRFAttention(8, 10, seed=np.random.RandomState(0))
    with pytest.raises(ValueError, match="weights must be an"):
        PRFAttention.from_weights(torch.ones(3))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
def test_half_precision_inputs(dtype, causal):
    """bf16/fp16 in, the same dtype out; the features are computed in float32 (the output is exactly the
    float32 module's on the upcast inputs, rounded once) and agree with float64 numpy to the output
    dtype's rounding.  Power: the same quadratic form evaluated in the half dtype misses that tolerance."""
    Q, K, V = at.synthetic_qkv(70, 16, 3, batch=(2,), logit_std=0.5)
    W = mc.sample_weights("simplex", 16, 24, rng=4)
    mod = PRFAttention.from_weights(_t(W, torch.float32), causal=causal, chunk=32)
    q, k, v = (_t(a, dtype) for a in (Q, K, V))
    out = mod(q, k, v)
    assert out.dtype == dtype
    assert torch.equal(out, mod(q.float(), k.float(), v.float()).to(dtype))
    ref = torch.as_tensor(at.prf_attention(*(a.double().numpy() for a in (q, k, v)), W, causal=causal))
    err = (out.double() - ref).abs()
    eps = torch.finfo(dtype).eps
    assert torch.all(err <= eps * ref.abs() + 1e-5 * ref.abs().max())
    naive = _dense_reference(q, k, v, _t(W, dtype), causal).double()  # the same form computed in the half dtype
    assert not torch.all((naive - ref).abs() <= eps * ref.abs() + 1e-5 * ref.abs().max())


def test_autocast_keeps_features_in_float32():
    x = torch.randn(2, 30, 16, generator=torch.Generator().manual_seed(0))
    mod = PRFAttention(16, 20, seed=0)
    plain = mod(x, x, x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert (x @ mod.weights.T).dtype == torch.bfloat16  # autocast is active around the module
        inside = mod(x, x, x)
    assert inside.dtype == torch.float32 and torch.equal(inside, plain)


def test_module_to_half_keeps_float32_projections_and_redraws():
    """model.to(torch.bfloat16) with redraw_every used to crash at the first redraw."""
    mod = PRFAttention(16, 20, "orthogonal", seed=1, redraw_every=1).to(torch.bfloat16)
    assert mod.weights.dtype == torch.float32
    x = torch.randn(1, 2, 30, 16, dtype=torch.bfloat16)
    mod.train()
    a = mod(x, x, x)
    w = mod.weights.clone()
    b = mod(x, x, x)  # redraws first
    assert a.dtype == b.dtype == torch.bfloat16 and not torch.equal(a, b) and not torch.equal(w, mod.weights)
    u = mod.weights / mod.weights.norm(dim=1, keepdim=True)
    assert torch.allclose(u[:16] @ u[:16].T, torch.eye(16), atol=1e-6)  # still an exact orthogonal block
    assert mod.half().weights.dtype == torch.float32
    assert mod.double().weights.dtype == torch.float64
    assert mod.float().weights.dtype == torch.float32
    assert PRFAttention(8, 4, dtype=torch.bfloat16, seed=0).weights.dtype == torch.float32
    assert PRFAttention.from_weights(torch.randn(4, 8).bfloat16()).weights.dtype == torch.float32


def test_cross_attention_and_key_padding_mask():
    """L_q = 7 queries, L_k = 13 keys, a (B, 1, L_k) padding mask over (B, H) heads: equal to the dense
    float64 quadratic form, and for one sequence to attention over its unpadded keys only; a sequence
    whose keys are all padded gets 0 with a zero, finite gradient.  Power: the mask changes the output."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn(3, 2, 7, 8, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(3, 2, 13, 8, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(3, 2, 13, 5, generator=g, dtype=torch.float64, requires_grad=True)
    pad = torch.rand(3, 1, 13, generator=g) < 0.3
    pad[2] = True  # batch item 2: every key padded
    pad[0, 0, 0] = True
    mod = PRFAttention(8, 16, "simplex", seed=2, dtype=torch.float64)
    out = mod(q, k, v, key_padding_mask=pad)
    assert out.shape == (3, 2, 7, 5)
    ref = _dense_reference(q, k, v, mod.weights, pad=pad)
    assert torch.allclose(out[:2], ref[:2], rtol=1e-12, atol=1e-13)
    assert torch.equal(out[2], torch.zeros_like(out[2]))
    keep = ~pad[0, 0]
    sliced = mod(q[0], k[0][:, keep], v[0][:, keep])
    assert torch.allclose(out[0], sliced, rtol=1e-12, atol=1e-13)
    assert (out[0] - mod(q[0], k[0], v[0])).abs().max() > 1e-3
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
        assert torch.equal(t.grad[2], torch.zeros_like(t.grad[2]))
    assert torch.equal(k.grad[0, :, 0], torch.zeros_like(k.grad[0, :, 0]))  # a padded key gets no gradient


@pytest.mark.parametrize("chunk", [8, 1, 64])
def test_causal_key_padding_mask(chunk):
    """Causal, left padding (item 0: first 11 keys padded, longer than a chunk) and random holes (item 1):
    equal to the dense float64 form on the rows that see a key (scan, dyadic blocks and both), rows that
    see none get 0, and the gradients are finite and equal to the dense reference's.  Power: ignoring the
    mask changes the output."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 40, 8, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    pad = torch.zeros(2, 40, dtype=torch.bool)
    pad[0, :11] = True
    pad[1] = torch.rand(40, generator=g) < 0.3
    pad[1, 0] = True
    mod = PRFAttention(8, 12, "orthogonal", causal=True, seed=4, dtype=torch.float64, chunk=chunk)
    out = mod(q, k, v, key_padding_mask=pad)
    seen = (torch.cumsum((~pad).long(), dim=1) > 0)
    ref = _dense_reference(q, k, v, mod.weights, causal=True, pad=pad)
    assert torch.allclose(out[seen], ref[seen], rtol=1e-12, atol=1e-13)
    assert torch.equal(out[~seen], torch.zeros_like(out[~seen]))
    assert (out - mod(q, k, v)).abs().max() > 1e-3
    cot = torch.randn(out.shape, generator=g, dtype=torch.float64) * seen.unsqueeze(-1)
    g1 = torch.autograd.grad(out, (q, k, v), cot)
    g2 = torch.autograd.grad(ref, (q, k, v), cot)
    for a, b in zip(g1, g2):
        assert torch.isfinite(a).all()
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


def test_redraw_under_a_user_generator():
    """Every draw comes from the caller's torch.Generator (reseeding reproduces the sequence); torch's
    global generator is untouched."""
    from montecarlo.nn import draw_projections

    state = torch.get_rng_state()
    gen = torch.Generator().manual_seed(5)
    mod = PRFAttention(8, 12, "simplex", generator=gen, redraw_every=1)
    first = mod.weights.clone()
    mod.redraw()
    second = mod.weights.clone()
    twin = torch.Generator().manual_seed(5)
    assert torch.equal(first, draw_projections("simplex", 8, 12, generator=twin))
    assert torch.equal(second, draw_projections("simplex", 8, 12, generator=twin))
    assert not torch.equal(first, second)
    gen.manual_seed(5)
    assert torch.equal(mod.redraw().weights, first)
    assert torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kind,kind_params", [("prf", None), ("hyperbolic", None), ("oprf", {"A": -0.1}),
                                              ("oprf", None)])
def test_torch_compile(causal, kind, kind_params):
    """torch.compile traces the module as one graph (dynamo + AOTAutograd, backend 'aot_eager', fullgraph: no
    graph break) for every kind, oprf with A given and from the data (eval mode: the tracked A stays put):
    the same output and gradients as eager mode, float32 and bf16.  Graph breaks found by this test: the
    kinds' modules imported lazily inside forward, an array's backend read from its module name, and the
    namespace lookup of the pair statistic.  The default 'inductor' backend also works but takes about a
    minute to compile on two CPU cores (measured 42 s + 8 s), too slow for the suite."""
    if kind not in feature_kinds.names():
        pytest.skip(f"the {kind!r} feature kind is not registered")
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(0)
    mod = PRFAttention(16, 24, "simplex", kind=kind, kind_params=kind_params, seed=0, causal=causal,
                       chunk=16).eval()
    q, k, v = (torch.randn(2, 3, 40, 16, generator=g, requires_grad=True) for _ in range(3))
    compiled = torch.compile(mod, backend="aot_eager", fullgraph=True)
    out, ref = compiled(q, k, v), mod(q, k, v)
    assert torch.allclose(out, ref, rtol=1e-6, atol=1e-7)
    ga = torch.autograd.grad(out.sum(), (q, k, v))
    gb = torch.autograd.grad(ref.sum(), (q, k, v))
    for a, b in zip(ga, gb):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    half = compiled(q.detach().bfloat16(), k.detach().bfloat16(), v.detach().bfloat16())
    assert half.dtype == torch.bfloat16


def test_torch_compile_with_redraws():
    """A compiled module with ``redraw_every`` redraws exactly as the eager one (the same projections, outputs
    and counter at every step) with one graph break, at the redraw schedule (run eagerly:
    torch.compiler.disable), compiled once, and no warning from dynamo (before: it traced into the samplers,
    seven graph breaks and warnings about __import__ and lru_cache, and the projections it drew differed from
    eager's at rounding level: outputs 1.6e-6 apart, which this test's tolerance catches).  Power: the eager
    module did redraw, so a compiled one that skipped or repeated a redraw would differ."""
    import warnings

    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    ref = PRFAttention(16, 24, "simplex", causal=True, seed=0, redraw_every=2, chunk=16)
    mod = PRFAttention(16, 24, "simplex", causal=True, seed=0, redraw_every=2, chunk=16)
    first = ref.weights.clone()
    compiled = torch.compile(mod, backend="aot_eager")
    g = torch.Generator().manual_seed(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(5):
            q = torch.randn(2, 40, 16, generator=g)
            a, b = ref(q, q, q), compiled(q, q, q)
            assert torch.allclose(a, b, rtol=1e-6, atol=1e-7), step
            assert torch.equal(ref.weights, mod.weights) and ref.calls_since_redraw == mod.calls_since_redraw
    assert not torch.equal(ref.weights, first)  # (two redraws in five steps)
    assert not [str(w.message) for w in caught if "Dynamo" in str(w.message)]
    # (one graph after the break; before it, the input checks have no tensor operation since the module's
    # torch.broadcast_shapes, which made scratch tensors, takes a shortcut for equal shapes: a second graph then)
    assert sum(counters["graph_break"].values()) == 1 and counters["stats"]["unique_graphs"] == 1


def test_construction_registers_the_hooks_forward_uses():
    """A fresh process: building a PRFAttention registers its kind's hooks (imports the kind's modules), so that
    forward looks them up without an import, which torch.compile cannot trace (a graph break; fullgraph
    refused it for 'hyperbolic' when the module was compiled before any eager call)."""
    import os
    import sys

    from _procs import run_group

    code = ("import theory.feature_kinds as k; from montecarlo.nn import PRFAttention; "
            "before = ('hyperbolic', 'log_features') in k._HOOKS; PRFAttention(8, 4, kind='hyperbolic'); "
            "print(before, ('hyperbolic', 'log_features') in k._HOOKS)")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rc, out = run_group([sys.executable, "-c", code], 120, cwd=root,
                        env={**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])})
    assert rc == 0, out
    assert out.split()[-2:] == ["False", "True"], out  # (not registered by the import alone: a real check)


def test_simplex_plus_coupling():
    """PRFAttention(coupling='simplex_plus') constructs and runs on torch float32 (issue 12 item 4), equal to
    the numpy reference on its weights."""
    mod = PRFAttention(16, 40, "simplex_plus", seed=0)
    assert mod.weights.dtype == torch.float32 and torch.isfinite(mod.weights).all()
    Q, K, V = at.synthetic_qkv(50, 16, 2, logit_std=0.5)
    out = mod(_t(Q, torch.float32), _t(K, torch.float32), _t(V, torch.float32))
    ref = at.prf_attention(Q, K, V, mod.weights.double().numpy())
    assert np.max(np.abs(out.numpy() - ref)) < 1e-4 * np.max(np.abs(ref))


@cuda
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_cuda_dtypes_mask_and_generators(causal, dtype):
    """On the GPU: a CPU generator drives a CUDA module (the same draws as on the CPU), a CUDA generator
    works too; half inputs come back in their dtype, within their rounding of the float64 CPU reference,
    with a key-padding mask; autocast does not lower the feature precision."""
    gen_cpu = torch.Generator().manual_seed(7)
    mod = PRFAttention(16, 40, "simplex", causal=causal, generator=gen_cpu, device="cuda", chunk=16)
    cpu_twin = PRFAttention(16, 40, "simplex", causal=causal, generator=torch.Generator().manual_seed(7))
    assert mod.weights.device.type == "cuda" and torch.equal(mod.weights.cpu(), cpu_twin.weights)
    gen_gpu = torch.Generator(device="cuda").manual_seed(1)
    assert PRFAttention(16, 40, generator=gen_gpu, device="cuda").weights.device.type == "cuda"
    g = torch.Generator().manual_seed(2)
    q, k, v = (0.7 * torch.randn(2, 3, 48, 16, generator=g, dtype=torch.float64) for _ in range(3))
    pad = torch.zeros(2, 1, 48, dtype=torch.bool)
    pad[0, :, :5] = True
    pad[1, :, 30:] = True
    out = mod(*(t.to("cuda", dtype) for t in (q, k, v)), key_padding_mask=pad.cuda())
    assert out.dtype == dtype and out.device.type == "cuda"
    qr, kr, vr = (t.to(dtype).double() for t in (q, k, v))
    ref = _dense_reference(qr, kr, vr, mod.weights.cpu().double(), causal=causal, pad=pad)
    tol = max(torch.finfo(dtype).eps, 1e-5)
    assert torch.all((out.cpu().double() - ref).abs() <= tol * ref.abs() + 1e-5 * ref.abs().max())
    if dtype == torch.float32:
        x = (q.float().cuda(), k.float().cuda(), v.float().cuda())
        plain = mod(*x)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            inside = mod(*x)
        assert inside.dtype == torch.float32 and torch.allclose(inside, plain, rtol=1e-5, atol=1e-6)


@cuda
def test_cuda_module_to_bfloat16_redraw_and_compile():
    """model.to('cuda', torch.bfloat16) with redraw_every: float32 projections on the GPU, redraws work;
    torch.compile with the default (inductor) backend matches eager mode."""
    mod = PRFAttention(32, 64, "orthogonal", seed=0, redraw_every=1).to("cuda", torch.bfloat16)
    assert mod.weights.dtype == torch.float32 and mod.weights.device.type == "cuda"
    x = torch.randn(2, 4, 128, 32, device="cuda", dtype=torch.bfloat16)
    mod.train()
    a, b = mod(x, x, x), mod(x, x, x)
    assert a.dtype == torch.bfloat16 and not torch.equal(a, b)
    mod.eval()
    torch._dynamo.reset()
    compiled = torch.compile(mod)
    y = torch.randn(2, 4, 128, 32, device="cuda")
    assert torch.allclose(compiled(y, y, y), mod(y, y, y), rtol=1e-4, atol=1e-5)
