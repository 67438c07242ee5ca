"""Inputs and references shared by the attention tests (``test_nn_*.py``; one home each).  Import it after
``pytest.importorskip("torch")``."""

from __future__ import annotations

import math

import numpy as np
import torch

from montecarlo.experiments import attention as at
from theory import feature_kinds

#: Positive kinds estimating the softmax kernel that the module runs (oprf with a fixed A in these tests).
KINDS = tuple(k for k in feature_kinds.names(positive=True, kernel="softmax", has=("log_features",))
              if not feature_kinds.get(k).has("prepare"))  # (PRFAttention refuses kinds with a prepare hook)


def _masked_inputs(seed, L):
    """q, k, v (3, 2, L, 16), 0.8 N(0, 1), and a key padding mask (3, 1, L): left padding, holes, one
    sequence fully padded."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (0.8 * torch.randn(3, 2, L, 16, generator=g) for _ in range(3))
    pad = torch.zeros(3, 1, L, dtype=torch.bool)
    pad[0, :, :6] = True
    pad[1, :, ::3] = True
    pad[2] = True
    return q, k, v, pad


def _params(kind):
    return {"A": -0.05} if kind == "oprf" else None


def _attend(fq, fk, v, causal=False, pad=None):
    """The quadratic form of features fq, fk (..., L, m): fq fk^T, masked (causal, key padding), row-normalised
    (a row that sees no key is 0), times v."""
    A = fq @ fk.transpose(-1, -2)
    if causal:
        A = torch.tril(A)
    if pad is not None:
        A = A * (~pad).unsqueeze(-2)
    den = A.sum(-1, keepdim=True)
    return (A @ v) / torch.where(den > 0, den, 1.0)


def _dense(q, k, v, w, kind="prf", params=None, causal=False, pad=None):
    """The plain quadratic form phi(q) phi(k)^T in float64 (no stabilisation), masked and row-normalised, with
    the kind's features from the numpy log-feature map."""
    s = q.shape[-1] ** -0.25
    W = w.double().numpy()
    fq, fk = (torch.as_tensor(np.exp(at._logits(s * x.double().detach().numpy(), W, kind, params))) for x in (q, k))
    return _attend(fq, fk, v.double(), causal, pad)


def _dense_reference(q, k, v, w, causal=False, pad=None):
    """The plain quadratic form (no stabilisation) of Gaussian PRFs in the inputs' dtype: phi(q) phi(k)^T,
    masked, row-normalised."""
    s = q.shape[-1] ** -0.25
    m = w.shape[0]

    def feats(x):
        x = s * x
        return torch.exp(x @ w.T - 0.5 * (x * x).sum(-1, keepdim=True)) / math.sqrt(m)

    return _attend(feats(q), feats(k), v, causal, pad)
