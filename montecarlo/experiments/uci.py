r"""Loaders for the eight UCI datasets of Sec. 5.3 (nonparametric classification).

The project does not ship the data.  :func:`resolve_uci_dir` finds the
directory that holds the files (an explicit path, else the environment
variable ``SIMPLEX_RF_UCI_DIR``, else ``../shared/uci`` next to a development
checkout), :func:`load_dataset` parses one file and :func:`load_all` loads
whatever is present and names what is missing.

Preprocessing (the paper's, Sec. 5.3 and App. C.1; see
:meth:`Dataset.split`):

1. categorical (text) columns one-hot encoded (categories in sorted order),
   numeric columns kept as they are;
2. shuffle, 95% train / 5% test (optionally a validation split carved from
   the training part, disjoint from the test split, for the sigma search of
   App. C.1); nursery and chess restricted to 1000 training and 100 test
   points, as in the paper;
3. every column standardised with the *training* mean and standard
   deviation (a column that is constant on the training split is only
   centred);
4. labels: integer class indices (one-hot where the regression needs them).

========  =================  ===========  ========================  =======
name      file               separator    categorical columns       sigma
========  =================  ===========  ========================  =======
abalone   abalone.data       ``,``        0                         0.41331
banknote  banknote.txt       ``,``        none                      1.06446
car       car.data           ``,``        0-5                       0.77657
yeast     yeast.data         whitespace   none (column 0 dropped)   0.90919
cmc       cmc.data           ``,``        none                      0.48390
nursery   nursery.data       ``,``        0-7                       0.18789
wifi      wifi.txt           whitespace   none                      0.21998
chess     chess.data         ``,``        0-5                       0.25754
========  =================  ===========  ========================  =======

The label is the last column of every file.  ``sigma`` is the authors'
length-scale factor (inputs are multiplied by sigma before the Gaussian kernel
:math:`e^{-\|x-y\|^2/2}`), tuned for IIDRF accuracy on validation data
(App. C.1); :data:`PAPER_SIGMAS`.

References
----------
Reid, Choromanski, Likhosherstov, Weller, "Simplex Random Features", ICML 2023,
Sec. 5.3 (``nonparam_class``) and App. C.1 (``sigmachoice``); Dua & Graff,
UCI Machine Learning Repository.
"""

from __future__ import annotations

import numbers
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: Environment variable naming the directory with the UCI files.
ENV_VAR = "SIMPLEX_RF_UCI_DIR"


@dataclass(frozen=True)
class _Spec:
    file: str
    sep: str | None  # None: any run of whitespace
    categorical: tuple
    drop: tuple = ()
    max_train: int | None = None
    max_test: int | None = None


#: The datasets in the paper's order, with file format and preprocessing.
SPECS = {
    "abalone": _Spec("abalone.data", ",", (0,)),
    "banknote": _Spec("banknote.txt", ",", ()),
    "car": _Spec("car.data", ",", tuple(range(6))),
    "yeast": _Spec("yeast.data", None, (), drop=(0,)),
    "cmc": _Spec("cmc.data", ",", ()),
    "nursery": _Spec("nursery.data", ",", tuple(range(8)), max_train=1000, max_test=100),
    "wifi": _Spec("wifi.txt", None, ()),
    "chess": _Spec("chess.data", ",", tuple(range(6)), max_train=1000, max_test=100),
}
#: Dataset names in the paper's order (Fig. 8, Tables 2 and 3).
DATASETS = tuple(SPECS)
#: The authors' sigma values (App. C.1, tuned for IIDRF accuracy at m = 10 d).
PAPER_SIGMAS = {
    "abalone": 0.41331138,
    "banknote": 1.06445901,
    "car": 0.77656608,
    "yeast": 0.90918797,
    "cmc": 0.48389667,
    "nursery": 0.18788887,
    "wifi": 0.21997651,
    "chess": 0.25754408,
}


def _default_dirs():
    """``../shared/uci`` next to the project root of a development checkout."""
    root = Path(__file__).resolve().parents[2]
    return [root.parent / "shared" / "uci"]


def resolve_uci_dir(path=None):
    """The directory holding the UCI files.

    Parameters
    ----------
    path : str or os.PathLike, optional
        Explicit directory (e.g. a ``--uci-dir`` command-line option).

    Returns
    -------
    pathlib.Path
        ``path`` if given; else ``$SIMPLEX_RF_UCI_DIR`` if set; else
        ``../shared/uci`` beside the project root if that exists.

    Raises
    ------
    FileNotFoundError
        If the chosen directory does not exist, or none was given and no
        default exists (the message says how to name one).
    TypeError
        If ``path`` is not a string or path.
    """
    if path is not None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"uci_dir must be a str or os.PathLike, got {type(path).__name__}")
        source = "uci_dir"
    elif os.environ.get(ENV_VAR):
        path, source = os.environ[ENV_VAR], f"${ENV_VAR}"
    else:
        for cand in _default_dirs():
            if cand.is_dir():
                return cand
        raise FileNotFoundError(
            f"no UCI data directory: pass uci_dir=... (or --uci-dir) or set ${ENV_VAR}; "
            f"looked for the default {', '.join(str(c) for c in _default_dirs())}")
    p = Path(path).expanduser()
    if not p.is_dir():
        raise FileNotFoundError(f"UCI data directory {str(p)!r} (from {source}) does not exist or is not a directory")
    return p


def _check_name(name):
    if not isinstance(name, str) or name not in SPECS:
        raise ValueError(f"dataset must be one of {', '.join(repr(n) for n in DATASETS)}, got {name!r}")
    return name


@dataclass(frozen=True)
class Dataset:
    """One parsed UCI dataset (before splitting and standardisation).

    Attributes
    ----------
    name : str
    X : ndarray (N, d), float64
        Numeric columns as read, categorical columns one-hot encoded.
    labels : ndarray (N,), int64
        Class index into ``classes``.
    classes : tuple of str
        Label values (sorted).
    path : pathlib.Path
        The file read.
    """

    name: str
    X: np.ndarray
    labels: np.ndarray
    classes: tuple
    path: Path

    @property
    def n_classes(self):
        return len(self.classes)

    @property
    def d(self):
        return self.X.shape[1]

    def split(self, rng=0, test_fraction=0.05, validation_fraction=0.0, max_train="paper", max_test="paper"):
        """Shuffle, split and standardise (the paper's preprocessing).

        Parameters
        ----------
        rng : int, numpy.random.Generator or None
            Seed of the shuffle.
        test_fraction : float in (0, 1)
            Fraction of the records held out for testing (paper: 0.05).
        validation_fraction : float in [0, 1)
            Fraction of the records held out for validation, disjoint from
            the test split (App. C.1); 0 for none.
        max_train, max_test : int, None or 'paper'
            Caps on the split sizes; ``'paper'`` uses 1000 / 100 for nursery
            and chess and no cap otherwise (Sec. 5.3, App. C.1).

        Returns
        -------
        Split
        """
        test_fraction = _check_fraction(test_fraction, "test_fraction", 0.0, 1.0, open_low=True)
        validation_fraction = _check_fraction(validation_fraction, "validation_fraction", 0.0, 1.0)
        if test_fraction + validation_fraction >= 1.0:
            raise ValueError(f"test_fraction + validation_fraction must be < 1, got "
                             f"{test_fraction} + {validation_fraction}")
        spec = SPECS.get(self.name)
        max_train = _cap(max_train, "max_train", spec.max_train if spec else None)
        max_test = _cap(max_test, "max_test", spec.max_test if spec else None)
        n = self.X.shape[0]
        perm = np.random.default_rng(rng).permutation(n)
        n_test = max(1, int(round(test_fraction * n)))
        n_val = int(round(validation_fraction * n))
        if validation_fraction > 0:
            n_val = max(1, n_val)
        if n - n_test - n_val < 1:
            raise ValueError(f"{self.name}: {n} records leave no training points after the test and validation splits")
        test, val, train = perm[:n_test], perm[n_test:n_test + n_val], perm[n_test + n_val:]
        if max_test is not None:
            test = test[:max_test]
            val = val[:max_test]
        if max_train is not None:
            train = train[:max_train]
        mu = self.X[train].mean(axis=0)
        sd = self.X[train].std(axis=0)
        sd = np.where(sd > 0, sd, 1.0)

        def std(idx):
            return (self.X[idx] - mu) / sd

        return Split(self.name, std(train), self.labels[train], std(test), self.labels[test],
                     std(val) if n_val else None, self.labels[val] if n_val else None, self.n_classes)


@dataclass(frozen=True)
class Split:
    """Standardised train / test (/ validation) arrays of one dataset.

    Attributes
    ----------
    name : str
    X_train, y_train, X_test, y_test : ndarrays
        Inputs (N, d) standardised with the training statistics; labels (N,)
        integer class indices.
    X_val, y_val : ndarrays or None
        Validation split (disjoint from the test split), if requested.
    n_classes : int
    """

    name: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    X_val: np.ndarray | None
    y_val: np.ndarray | None
    n_classes: int

    @property
    def d(self):
        return self.X_train.shape[1]

    def padded(self, width=None):
        """The same split with inputs zero-padded to ``width`` columns
        (default: the next power of two, as the fast couplings of App. B.2 need)."""
        d = self.d
        width = 1 << (d - 1).bit_length() if width is None else width
        if not isinstance(width, numbers.Integral) or isinstance(width, bool) or width < d:
            raise ValueError(f"width must be an integer >= d = {d}, got {width!r}")

        def pad(a):
            return None if a is None else np.pad(a, ((0, 0), (0, int(width) - d)))

        return Split(self.name, pad(self.X_train), self.y_train, pad(self.X_test), self.y_test,
                     pad(self.X_val), self.y_val, self.n_classes)


def _check_fraction(value, name, lo, hi, open_low=False):
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and np.isfinite(value)
    if ok:
        ok = (lo < value if open_low else lo <= value) and value < hi
    if not ok:
        left = "(" if open_low else "["
        raise ValueError(f"{name} must be a real number in {left}{lo}, {hi}), got {value!r}")
    return float(value)


def _cap(value, name, paper):
    if isinstance(value, str):
        if value != "paper":
            raise ValueError(f"{name} must be a positive integer, None or 'paper', got {value!r}")
        return paper
    if value is None:
        return None
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, None or 'paper', got {value!r}")
    return int(value)


def _tokenise(path, sep):
    """Non-empty records of a file as a 2-D string array and the records' line numbers (0-based).

    numpy's C parser reads the file; only when it fails (ragged rows, undecodable text) is the file
    re-read line by line, to name the offending line.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # numpy notes skipped blank lines
            tokens = np.loadtxt(path, dtype=str, delimiter=sep, comments=None, encoding="utf-8", ndmin=2)
        if tokens.size == 0:
            raise ValueError(f"{path}: the file has no records")
        return np.char.strip(tokens), None
    except (ValueError, UnicodeDecodeError):
        return _tokenise_lines(path, sep)


def _tokenise_lines(path, sep):
    """Line-by-line tokeniser with precise error messages (the slow path of :func:`_tokenise`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not a UTF-8 text file ({exc})") from exc
    lines = text.splitlines()
    keep = [i for i, line in enumerate(lines) if line.strip()]
    if not keep:
        raise ValueError(f"{path}: the file has no records")
    if sep is None:
        rows = [lines[i].split() for i in keep]
    else:
        rows = [[t.strip() for t in lines[i].split(sep)] for i in keep]
    widths = np.array([len(r) for r in rows])
    counts = np.bincount(widths)
    expected = int(widths[0]) if counts[widths[0]] == counts.max() else int(counts.argmax())
    bad = np.flatnonzero(widths != expected)
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{path}, line {keep[i] + 1}: expected {expected} fields, got {widths[i]} "
                         f"({bad.size} malformed line(s) in all)")
    return np.array(rows, dtype=str), keep


def _numeric(path, tokens, col, keep, sep):
    column = tokens[:, col]
    try:
        return column.astype(np.float64)
    except ValueError:
        pass
    ok = np.array([bool(re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", t)) for t in column])
    i = int(np.flatnonzero(~ok)[0])
    if keep is None:  # line numbers for the message
        keep = _tokenise_lines(path, sep)[1]
    raise ValueError(f"{path}, line {keep[i] + 1}, column {col}: expected a number, got {str(column[i])!r}") from None


def load_dataset(name, uci_dir=None):
    """Parse one of the eight datasets.

    Parameters
    ----------
    name : {'abalone', 'banknote', 'car', 'yeast', 'cmc', 'nursery', 'wifi', 'chess'}
    uci_dir : str or os.PathLike, optional
        Directory of the files (see :func:`resolve_uci_dir`).

    Returns
    -------
    Dataset

    Raises
    ------
    ValueError
        Unknown name; a malformed file (ragged rows, a non-number in a
        numeric column, NaN or inf, fewer than two classes), naming the file
        and line.
    FileNotFoundError
        The file is absent (naming the path).
    """
    name = _check_name(name)
    spec = SPECS[name]
    path = resolve_uci_dir(uci_dir) / spec.file
    if not path.is_file():
        raise FileNotFoundError(f"{name}: data file {str(path)!r} not found")
    tokens, keep = _tokenise(path, spec.sep)
    n_cols = tokens.shape[1]
    needed = max(spec.categorical + spec.drop + (0,)) + 2
    if n_cols < needed:
        raise ValueError(f"{path}: expected at least {needed} fields per line, got {n_cols}")
    label_col = n_cols - 1
    blocks = []
    for col in range(label_col):  # a loop over columns, not records
        if col in spec.drop:
            continue
        if col in spec.categorical:
            _, inv = np.unique(tokens[:, col], return_inverse=True)
            blocks.append(np.eye(int(inv.max()) + 1)[inv])
        else:
            values = _numeric(path, tokens, col, keep, spec.sep)
            if not np.all(np.isfinite(values)):
                i = int(np.flatnonzero(~np.isfinite(values))[0])
                keep = keep if keep is not None else _tokenise_lines(path, spec.sep)[1]
                raise ValueError(f"{path}, line {keep[i] + 1}, column {col}: NaN or inf is not allowed")
            blocks.append(values[:, None])
    X = np.concatenate(blocks, axis=1)
    classes, labels = np.unique(tokens[:, label_col], return_inverse=True)
    if classes.size < 2:
        raise ValueError(f"{path}: the label column (last) has fewer than two classes")
    return Dataset(name, X, labels.astype(np.int64), tuple(str(c) for c in classes), path)


def load_all(uci_dir=None, names=None, warn=True):
    """Load every dataset whose file is present.

    Parameters
    ----------
    uci_dir : str or os.PathLike, optional
        See :func:`resolve_uci_dir`.
    names : sequence of str, optional
        Subset to load (default all eight, in the paper's order).
    warn : bool
        Emit a :class:`UserWarning` naming the missing files.

    Returns
    -------
    datasets : dict
        name -> :class:`Dataset`, for the files present.
    missing : list of str
        Names whose file is absent.  Malformed files raise (see
        :func:`load_dataset`); only absent ones are skipped.
    """
    root = resolve_uci_dir(uci_dir)
    names = DATASETS if names is None else [_check_name(n) for n in names]
    out, missing = {}, []
    for name in names:
        if not (root / SPECS[name].file).is_file():
            missing.append(name)
            continue
        out[name] = load_dataset(name, root)
    if missing and warn:
        files = ", ".join(SPECS[n].file for n in missing)
        warnings.warn(f"UCI data in {root}: missing {files}; running the {len(out)} present dataset(s)",
                      UserWarning, stacklevel=2)
    return out, missing
