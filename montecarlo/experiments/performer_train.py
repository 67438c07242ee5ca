r"""A Fig. 9 analogue one machine can run: a small Performer-ViT on scikit-learn's digits (Sec. 5.4).

The model, the command line and the measured results: :ref:`guide-montecarlo.experiments.performer_train`
(``docs/guide/experiments.rst``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

from theory.cli import atomic_write, check_output_dir, int_arg, main_runner, make_parser, real_arg

from ._common import (check_budget, check_int, check_positive_float, check_rng, describe, refuse_repeats,
                      run_terminable, show_int)

__all__ = [
    "ARMS",
    "MAX_LAYERS",
    "MAX_SEEDS",
    "REDRAW_INTERVALS",
    "TEST_SIZE",
    "TrainConfig",
    "TrainResult",
    "add_parser",
    "arms_available",
    "digits_tokens",
    "main",
    "redraw_study",
    "run",
    "train_arms",
    "train_one",
]

#: Test images of the fixed split (stratified, seed 0); the rest trains.
TEST_SIZE = 497
#: The five arms of the Fig. 9 analogue: (name, kind, coupling); kind None is exact softmax attention.
ARMS = (("exact", None, None), ("prf-orthogonal", "prf", "orthogonal"), ("prf-simplex", "prf", "simplex"),
        ("oprf-orthogonal", "oprf", "orthogonal"), ("oprf-simplex", "oprf", "simplex"))
#: Redraw intervals of the redraw study: None = never, an int = every so many steps, "epoch" = once per epoch.
REDRAW_INTERVALS = (None, 10, 100, "epoch")
#: Largest number of seeds of one run (the measured table uses 5; 1000 seeds of the five arms at the defaults
#: train for about a day on one core).  More is refused at once, not trained seed after seed.
MAX_SEEDS = 1000
#: Largest number of transformer blocks (the paper's ViTs have 12).  More is refused at once: the model was
#: built block after block, its memory growing without bound.  The parameters of the whole model are also held
#: to montecarlo._checks.MAX_ELEMENTS (about 8 d_model^2 per block: a large d_model is refused by name too).
MAX_LAYERS = 64


@dataclass(frozen=True)
class TrainConfig:
    """Settings of one training run (the defaults are the command line's).

    Checked on construction, with the command line's bounds: ``epochs``, ``batch_size``, ``heads``,
    ``n_features``, ``threads`` ints >= 1, ``layers`` an int in [1, :data:`MAX_LAYERS`], ``d_model`` an int
    >= 2 and a multiple of ``heads`` (the model's parameters within ``montecarlo._checks.MAX_ELEMENTS``:
    an AllocationError naming ``layers`` and ``d_model``), ``lr`` a finite real > 0, ``train_size`` None
    or an int >= 10 (at most the training images, checked by :func:`digits_tokens`), ``redraw_every`` None
    (never), ``'epoch'`` or an int >= 1 (steps).  A bad field is a ValueError / TypeError naming it.
    """

    epochs: int = 10
    batch_size: int = 32
    lr: float = 3e-3
    d_model: int = 32
    heads: int = 2
    layers: int = 2
    n_features: int = 32
    train_size: int | None = None
    redraw_every: object = None
    threads: int = 1

    def __post_init__(self):
        fields = {name: check_int(getattr(self, name), f"TrainConfig.{name}", low)
                  for name, low in (("epochs", 1), ("batch_size", 1), ("d_model", 2), ("heads", 1),
                                    ("n_features", 1), ("threads", 1))}
        fields["layers"] = check_int(self.layers, "TrainConfig.layers", 1, maximum=MAX_LAYERS)
        d, layers = fields["d_model"], fields["layers"]
        if d % fields["heads"]:
            raise ValueError(f"TrainConfig.d_model must be a multiple of TrainConfig.heads, got d_model = "
                             f"{show_int(d)} and heads = {show_int(fields['heads'])}")
        # per block: qkv and out projections 4 d^2 + 4 d, the MLP 4 d^2 + 3 d, two LayerNorms 4 d; the rest 33 d + 10
        check_budget(layers * (8 * d * d + 11 * d) + 33 * d + 10, f"the model's parameters (layers = {layers}, "
                     f"d_model = {show_int(d)})", "lower layers or d_model")
        fields["lr"] = check_positive_float(self.lr, "TrainConfig.lr")
        if self.train_size is not None:
            fields["train_size"] = check_int(self.train_size, "TrainConfig.train_size", 10)
        redraw = self.redraw_every
        if isinstance(redraw, str):
            if redraw != "epoch":
                raise ValueError(f"TrainConfig.redraw_every must be None (never), 'epoch' or an int >= 1, got "
                                 f"{describe(redraw)}")
        elif redraw is not None:
            fields["redraw_every"] = check_int(redraw, "TrainConfig.redraw_every (None, 'epoch' or an int)", 1)
        for name, value in fields.items():
            object.__setattr__(self, name, value)


@dataclass
class TrainResult:
    """Test accuracy per arm, seed and epoch.

    Attributes
    ----------
    arms : tuple of str
    seeds : tuple of int
    accuracy : dict
        arm -> ndarray (n_seeds, epochs) of test accuracies.
    config : dict
    seconds : float
    """

    arms: tuple
    seeds: tuple
    accuracy: dict
    config: dict
    seconds: float = 0.0

    def mean(self, arm):
        return self.accuracy[arm].mean(axis=0)

    def stderr(self, arm):
        a = self.accuracy[arm]
        return a.std(axis=0, ddof=1) / math.sqrt(a.shape[0]) if a.shape[0] > 1 else np.full(a.shape[1], np.nan)

    def paired(self, a, b):
        """Mean and s.e. over seeds of the final-epoch accuracy difference a - b (arms share initial weights)."""
        diff = self.accuracy[a][:, -1] - self.accuracy[b][:, -1]
        se = diff.std(ddof=1) / math.sqrt(len(diff)) if len(diff) > 1 else math.nan
        return float(diff.mean()), float(se)

    def format(self):
        cfg = self.config
        lines = [f"digits Performer: {cfg['layers']} layers, d_model {cfg['d_model']}, {cfg['heads']} heads, "
                 f"m = {cfg['n_features']}, batch {cfg['batch_size']}, {cfg['epochs']} epochs "
                 f"({cfg['steps_per_epoch']} steps each), redraw {cfg['redraw_every']}, {len(self.seeds)} seeds; "
                 "test accuracy mean +- s.e.", "epoch | " + " | ".join(self.arms)]
        for e in range(cfg["epochs"]):
            lines.append(f"{e + 1} | " + " | ".join(f"{self.mean(a)[e]:.4f}+-{self.stderr(a)[e]:.4f}"
                                                     for a in self.arms))
        for a, b in (("prf-simplex", "prf-orthogonal"), ("oprf-simplex", "oprf-orthogonal")):
            if a in self.arms and b in self.arms and len(self.seeds) > 1:
                d, se = self.paired(a, b)
                lines.append(f"final {a} - {b}: {d:+.4f} +- {se:.4f} (paired over seeds)")
        return "\n".join(lines)

    def as_dict(self):
        return {"arms": list(self.arms), "seeds": list(self.seeds), "config": self.config,
                "seconds": self.seconds,
                "accuracy": {a: self.accuracy[a].tolist() for a in self.arms},
                "mean": {a: self.mean(a).tolist() for a in self.arms},
                "stderr": {a: [None if not np.isfinite(x) else float(x) for x in self.stderr(a)] for a in self.arms}}


def _check_config(cfg):
    if not isinstance(cfg, TrainConfig):
        raise TypeError(f"cfg must be a TrainConfig, got {describe(cfg)}")
    return cfg


def arms_available(arms=None):
    """The requested arms as (name, kind, coupling) (kind None: exact attention); no arm twice (its results
    would collapse into one entry of :class:`TrainResult`)."""
    by_name = {a[0]: a for a in ARMS}
    if arms is not None and (isinstance(arms, (str, bytes)) or not hasattr(arms, "__iter__")):
        raise TypeError(f"arms must be None or a sequence of arm names among {', '.join(by_name)}, got "
                        f"{describe(arms)}")
    names = [a[0] for a in ARMS] if arms is None else list(arms)
    out = []
    for name in names:
        if not isinstance(name, str) or name not in by_name:
            raise ValueError(f"arms must be among {', '.join(by_name)}, got {describe(name)}")
        out.append(by_name[name])
    refuse_repeats(names, "arms", "an arm")
    if not out:
        raise ValueError(f"arms must not be empty (choose among {', '.join(by_name)}, or None for all)")
    return out


def digits_tokens(train_size=None):
    """(X_train, y_train, X_test, y_test): images as (N, 16, 4) tokens of 2 x 2 patches, values in [0, 1]."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    img = data.images.astype(np.float32) / 16.0  # (N, 8, 8)
    tok = img.reshape(-1, 4, 2, 4, 2).transpose(0, 1, 3, 2, 4).reshape(-1, 16, 4)
    Xtr, Xte, ytr, yte = train_test_split(tok, data.target, test_size=TEST_SIZE, random_state=0,
                                          stratify=data.target)
    if train_size is not None:
        train_size = check_int(train_size, "train_size", 10, maximum=len(Xtr))
        Xtr, ytr = Xtr[:train_size], ytr[:train_size]
    return Xtr, ytr.astype(np.int64), Xte, yte.astype(np.int64)


def _model(cfg, kind, coupling, seed, steps_per_epoch):
    import torch
    from torch import nn

    from montecarlo.nn import PRFAttention

    if cfg.d_model % cfg.heads:
        raise ValueError(f"d_model must be a multiple of heads, got {cfg.d_model} and {cfg.heads}")
    d_head = cfg.d_model // cfg.heads
    redraw = steps_per_epoch if cfg.redraw_every == "epoch" else cfg.redraw_every

    class Attention(nn.Module):
        def __init__(self, layer):
            super().__init__()
            self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
            self.out = nn.Linear(cfg.d_model, cfg.d_model)
            self.prf = None if kind is None else PRFAttention(
                d_head, cfg.n_features, coupling, kind=kind, seed=np.random.SeedSequence([seed, 7, layer]),
                redraw_every=redraw)

        def forward(self, x):
            B, L, _ = x.shape
            q, k, v = self.qkv(x).view(B, L, 3, cfg.heads, d_head).permute(2, 0, 3, 1, 4)
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v) if self.prf is None else self.prf(q, k, v)
            return self.out(o.transpose(1, 2).reshape(B, L, cfg.d_model))

    class Block(nn.Module):
        def __init__(self, layer):
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
            self.att = Attention(layer)
            self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 2 * cfg.d_model), nn.GELU(),
                                     nn.Linear(2 * cfg.d_model, cfg.d_model))

        def forward(self, x):
            x = x + self.att(self.n1(x))
            return x + self.mlp(self.n2(x))

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Linear(4, cfg.d_model)
            self.pos = nn.Parameter(0.02 * torch.randn(16, cfg.d_model))
            self.blocks = nn.ModuleList([Block(i) for i in range(cfg.layers)])
            self.norm = nn.LayerNorm(cfg.d_model)
            self.head = nn.Linear(cfg.d_model, 10)

        def forward(self, x):
            h = self.embed(x) + self.pos
            for b in self.blocks:
                h = b(h)
            return self.head(self.norm(h).mean(1))

    return ViT()


def train_one(kind, coupling, seed, cfg=TrainConfig(), data=None, *, on_step=None):
    """Test accuracy after each epoch of one run (ndarray (epochs,)); ``kind`` None is exact attention.

    The global torch random state is left as it was (``torch.random.fork_rng``).  ``on_step``, if given, is
    called after every optimiser step with ``(epoch, step, steps_per_epoch)`` (0-based epoch, 1-based step).
    """
    import torch

    seed = check_rng(seed, "seed")
    if not isinstance(seed, int):
        raise TypeError(f"seed must be an int >= 0 here, got {describe(seed)}")
    cfg = _check_config(cfg)
    Xtr, ytr, Xte, yte = digits_tokens(cfg.train_size) if data is None else data
    steps_per_epoch = -(-len(Xtr) // cfg.batch_size)
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = _model(cfg, kind, coupling, seed, steps_per_epoch)
            opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
            order = np.random.default_rng([seed, 1])
            xtr, ttr = torch.as_tensor(Xtr), torch.as_tensor(ytr)
            xte, tte = torch.as_tensor(Xte), torch.as_tensor(yte)
            acc = np.empty(cfg.epochs)
            for epoch in range(cfg.epochs):
                model.train()
                perm = torch.as_tensor(order.permutation(len(Xtr)))
                for step, lo in enumerate(range(0, len(Xtr), cfg.batch_size), 1):
                    idx = perm[lo:lo + cfg.batch_size]
                    loss = torch.nn.functional.cross_entropy(model(xtr[idx]), ttr[idx])
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    if on_step is not None:
                        on_step(epoch, step, steps_per_epoch)
                model.eval()
                with torch.no_grad():
                    acc[epoch] = float((model(xte).argmax(1) == tte).double().mean())
                if not np.isfinite(loss.item()):
                    raise FloatingPointError(f"training diverged (loss {loss.item()}) for kind={kind!r}, "
                                             f"coupling={coupling!r}, seed={seed}")
    finally:
        torch.set_num_threads(threads)
    return acc


def _config_dict(cfg, n_train):
    d = asdict(cfg)
    d["steps_per_epoch"] = -(-n_train // cfg.batch_size)
    d["n_train"], d["n_test"] = n_train, TEST_SIZE
    return d


def _step_reporter(progress, name, s, epochs, on_step):
    """The ``on_step`` of one run: ``on_step`` itself, and a progress line at most once a second (arm, seed,
    epoch, step), so that a long run is never silent."""
    last = [time.perf_counter()]

    def report(epoch, step, per_epoch):
        if on_step is not None:
            on_step(epoch, step, per_epoch)
        now = time.perf_counter()
        if progress and now - last[0] >= 1.0:
            last[0] = now
            progress(f"{name} seed {s}: epoch {epoch + 1}/{epochs}, step {step}/{per_epoch}")

    return report


def train_arms(arms=None, seeds=5, cfg=TrainConfig(), *, seed=0, progress=None, on_step=None):
    """Train every arm for ``seeds`` seeds (``seed``, ``seed + 1``, ...; at most :data:`MAX_SEEDS`); returns a
    :class:`TrainResult`.

    ``progress`` gets a line per finished run and, during a run, at most one a second (epoch and step);
    ``on_step`` (:func:`train_one`) is called after every optimiser step of every run."""
    seeds = check_int(seeds, "seeds", 1, maximum=MAX_SEEDS)
    seed = check_int(seed, "seed", 0)
    cfg = _check_config(cfg)
    todo = arms_available(arms)
    check_budget(len(todo) * seeds * cfg.epochs, f"the test accuracies of {len(todo)} arms x {seeds} seeds x "
                 f"{show_int(cfg.epochs)} epochs", "lower seeds or epochs")
    data = digits_tokens(cfg.train_size)
    t0 = time.perf_counter()
    acc = {}
    for name, kind, coupling in todo:
        runs = []
        for s in range(seed, seed + seeds):
            t = time.perf_counter()
            runs.append(train_one(kind, coupling, s, cfg, data,
                                  on_step=_step_reporter(progress, name, s, cfg.epochs, on_step)))
            if progress:
                progress(f"{name} seed {s}: "
                         f"final test accuracy {runs[-1][-1]:.4f} ({time.perf_counter() - t:.1f} s)")
        acc[name] = np.array(runs)
    return TrainResult(tuple(a[0] for a in todo), tuple(range(seed, seed + seeds)), acc,
                       _config_dict(cfg, len(data[0])), time.perf_counter() - t0)


def redraw_study(seeds=5, cfg=TrainConfig(), *, arms=("prf-orthogonal", "prf-simplex"), intervals=REDRAW_INTERVALS,
                 seed=0, progress=None):
    """Final-epoch test accuracy of the prf arms at each redraw interval: {interval: TrainResult}.

    ``arms`` must be feature arms: ``exact`` (no features to redraw) is refused with a ValueError before
    anything is trained; ``cfg.redraw_every`` is replaced by each interval.
    """
    exact = [a[0] for a in arms_available(arms) if a[1] is None]
    if exact:
        raise ValueError(f"arms of the redraw study must be feature arms, got {', '.join(exact)} (exact attention "
                         f"has no features to redraw); choose among "
                         f"{', '.join(a[0] for a in ARMS if a[1] is not None)}")
    out = {}
    for interval in intervals:
        c = TrainConfig(**{**asdict(cfg), "redraw_every": interval})
        out[interval] = train_arms(arms, seeds, c, seed=seed, progress=progress)
    return out


def format_redraw_study(study):
    first = next(iter(study.values()))
    cfg = first.config
    lines = [f"redraw study: {len(first.seeds)} seeds, {cfg['epochs']} epochs of {cfg['steps_per_epoch']} steps "
             f"(batch {cfg['batch_size']}, {cfg['n_train']} training images), m = {cfg['n_features']}; final test "
             "accuracy mean +- s.e.", "redraw every | " + " | ".join(first.arms)]
    for interval, res in study.items():
        label = "never" if interval is None else ("epoch" if interval == "epoch" else f"{interval} steps")
        lines.append(f"{label} | " + " | ".join(f"{res.mean(a)[-1]:.4f}+-{res.stderr(a)[-1]:.4f}"
                                                for a in res.arms))
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# command line


class _DefaultNever:
    """The default of ``--redraw-every`` (never), told apart from an explicit ``--redraw-every never``."""

    def __repr__(self):
        return "never"

    __str__ = __repr__


_REDRAW_DEFAULT = _DefaultNever()


def _redraw_arg(text):
    if text in ("never", "none"):
        return None
    if text == "epoch":
        return "epoch"
    return int_arg(1)(text)


def add_parser(subparsers):
    """Add the ``performer-train`` subcommand to an argparse ``subparsers`` object; returns its parser."""
    p = subparsers.add_parser(
        "performer-train", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        help="Fig. 9 analogue: a small Performer-ViT on scikit-learn's digits (exact, prf/oprf x orthogonal/simplex)",
        description="Fig. 9 analogue: test accuracy per epoch (mean +- s.e. over seeds) of a small Performer-ViT "
                    "on scikit-learn's digits (16 tokens of 2 x 2 pixels) with exact attention and PRFAttention "
                    "of each kind and coupling; --redraw-study compares redraw intervals instead.")
    _add_options(p)
    return p


def _add_options(p):
    p.add_argument("--arms", nargs="+", default=None, metavar="ARM", choices=[a[0] for a in ARMS],
                   help=f"arms to train (default all: {', '.join(a[0] for a in ARMS)})")
    p.add_argument("--seeds", type=int_arg(1, MAX_SEEDS), default=5, help="number of seeds (seed, seed + 1, ...)")
    p.add_argument("--seed", type=int_arg(0), default=0, help="first seed")
    p.add_argument("--epochs", type=int_arg(1), default=TrainConfig.epochs, help="training epochs")
    p.add_argument("--batch-size", type=int_arg(1), default=TrainConfig.batch_size, help="batch size")
    p.add_argument("--lr", type=real_arg(0.0, strict=True), default=TrainConfig.lr, help="AdamW learning rate")
    p.add_argument("--d-model", type=int_arg(2), default=TrainConfig.d_model, help="model width")
    p.add_argument("--heads", type=int_arg(1), default=TrainConfig.heads, help="attention heads")
    p.add_argument("--layers", type=int_arg(1, MAX_LAYERS), default=TrainConfig.layers, help="transformer blocks")
    p.add_argument("--n-features", type=int_arg(1), default=TrainConfig.n_features, help="random features m")
    p.add_argument("--train-size", type=int_arg(10), default=None, help="use only this many training images")
    p.add_argument("--redraw-every", type=_redraw_arg, default=_REDRAW_DEFAULT, metavar="{never,epoch,N}",
                   help="feature redraws in training: never, once per epoch, or every N steps (not with "
                        "--redraw-study, which sets it)")
    p.add_argument("--redraw-study", action="store_true",
                   help="train the prf arms (or the feature arms of --arms; not exact) at every interval of never, "
                        "10, 100 steps, once per epoch")
    p.add_argument("--threads", type=int_arg(1), default=1, help="torch CPU threads")
    p.add_argument("--out", default=None, metavar="PATH",
                   help="write the results as JSON (atomically); checked, and its folder created, before training")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def _config(args):
    return TrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, d_model=args.d_model,
                       heads=args.heads, layers=args.layers, n_features=args.n_features, train_size=args.train_size,
                       redraw_every=_redraw_every(args), threads=args.threads)


def _redraw_every(args):
    value = getattr(args, "redraw_every", _REDRAW_DEFAULT)
    return None if value is _REDRAW_DEFAULT else value


def check_out_file(path, name="--out"):
    """Make sure a JSON result can be written to ``path`` before any work: ValueError naming ``name`` if ``path``
    is empty or a directory, or its folder is not (and cannot be created as) a writable directory; the folder
    is created.  Returns ``path`` as a str."""
    text = os.fspath(path)
    if not str(text).strip():
        raise ValueError(f"{name} must be a file path, got an empty string")
    if os.path.isdir(text):
        raise ValueError(f"{name} {text!r} is a directory; name a file, e.g. {os.path.join(text, 'performer.json')!r}")
    folder = os.path.dirname(os.path.abspath(text))
    try:
        check_output_dir(folder, "its folder")
    except ValueError as exc:
        raise ValueError(f"{name} {text!r}: {exc}") from None
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{name} {text!r}: cannot create its folder {folder!r} ({exc.strerror or exc})") from None
    return str(text)


def run(args):
    """Run the parsed ``performer-train`` arguments; prints the table, writes ``--out``; returns 0."""
    progress = None if args.quiet else _stderr_progress
    cfg = _config(args)
    if args.d_model % args.heads:
        raise ValueError(f"--d-model must be a multiple of --heads, got {args.d_model} and {args.heads}")
    if args.redraw_study:
        if getattr(args, "redraw_every", _REDRAW_DEFAULT) is not _REDRAW_DEFAULT:
            raise ValueError("--redraw-every conflicts with --redraw-study (the study trains at every interval of "
                             "never, 10, 100 steps and once per epoch)")
        if args.arms and "exact" in args.arms:
            raise ValueError("--redraw-study needs feature arms: exact attention has no features to redraw (drop "
                             "exact from --arms)")
    if args.out is not None:
        check_out_file(args.out)
    if args.redraw_study:
        arms = tuple(args.arms) if args.arms else ("prf-orthogonal", "prf-simplex")
        study = redraw_study(args.seeds, cfg, arms=arms, seed=args.seed, progress=progress)
        print(format_redraw_study(study))
        payload = {"redraw_study": {("never" if k is None else str(k)): v.as_dict() for k, v in study.items()}}
    else:
        res = train_arms(args.arms, args.seeds, cfg, seed=args.seed, progress=progress)
        print(res.format())
        payload = res.as_dict()
    if args.out is not None:
        text = json.dumps(payload, indent=1) + "\n"
        atomic_write(args.out, lambda tmp: _write_text(tmp, text))
        if progress:
            progress(f"wrote {args.out}")
    return 0


def _write_text(path, text):
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def _stderr_progress(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


PROG = "python -m montecarlo.experiments.performer_train"


def main(argv=None):
    """Stand-alone command line (the same options as ``python -m montecarlo.experiments performer-train``);
    exit status as ``montecarlo.experiments.__main__.main`` (143 on SIGTERM, no temporary file left)."""
    def body(argv):
        p = make_parser(PROG, __doc__.splitlines()[0])
        _add_options(p)
        return run(p.parse_args(argv))
    return run_terminable(main_runner, PROG, body, argv)


if __name__ == "__main__":
    sys.exit(main())
