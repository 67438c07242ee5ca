r"""The eight UCI datasets of Sec. 5.3 (nonparametric classification): files, parsing, splits.

The files, parsing and the two protocols: :ref:`guide-montecarlo.experiments.uci`
(``docs/guide/experiments.rst``).
"""

from __future__ import annotations

import hashlib
import math
import numbers
import os
import re
import stat
import threading
import warnings
from array import array
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ._common import (MAX_CLASSES, check_array, check_bool, check_choice, check_int, check_labels, check_positive_float,
                      check_rng, describe, refuse_repeats)

#: Environment variable naming a directory that holds the UCI files (overrides the shipped copy).
ENV_VAR = "SIMPLEX_RF_UCI_DIR"
#: The copy of the eight files shipped with the package.
PACKAGE_DIR = Path(__file__).resolve().parent / "data" / "uci"
#: Files larger than this are refused before reading (the largest of the eight is nursery.data, 1.06 MB).
MAX_FILE_BYTES = 16 * 2**20
#: Lines longer than this many bytes (terminator included) are refused (the longest line of the eight files has 98).
MAX_LINE_BYTES = 4096

_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_WHOLE = re.compile(r"\d+")


@dataclass(frozen=True)
class _Spec:
    file: str
    sep: str | None  # None: any run of whitespace
    fields: int  # fields per record, label included
    categorical: dict  # column -> tuple of allowed values
    labels: object  # tuple of allowed labels, or a compiled regex
    drop: tuple = ()

    def allowed_label(self, value):
        if isinstance(self.labels, tuple):
            return value in self.labels
        return self.labels.fullmatch(value) is not None

    def describe_labels(self):
        if isinstance(self.labels, tuple):
            return ", ".join(self.labels)
        return "a whole number"


_LEVELS4 = ("vhigh", "high", "med", "low")
_FILES = ("a", "b", "c", "d", "e", "f", "g", "h")
_RANKS = tuple("12345678")

#: The datasets in the paper's order, with file format and the documented values of each field.
SPECS = {
    "abalone": _Spec("abalone.data", ",", 9, {0: ("M", "F", "I")}, _WHOLE),
    "banknote": _Spec("banknote.txt", ",", 5, {}, ("0", "1")),
    "car": _Spec("car.data", ",", 7, {0: _LEVELS4, 1: _LEVELS4, 2: ("2", "3", "4", "5more"), 3: ("2", "4", "more"),
                                      4: ("small", "med", "big"), 5: ("low", "med", "high")},
                 ("unacc", "acc", "good", "vgood")),
    "yeast": _Spec("yeast.data", None, 10, {}, ("CYT", "NUC", "MIT", "ME3", "ME2", "ME1", "EXC", "VAC", "POX", "ERL"),
                   drop=(0,)),
    "cmc": _Spec("cmc.data", ",", 10, {}, ("1", "2", "3")),
    "nursery": _Spec("nursery.data", ",", 9, {
        0: ("usual", "pretentious", "great_pret"), 1: ("proper", "less_proper", "improper", "critical", "very_crit"),
        2: ("complete", "completed", "incomplete", "foster"), 3: ("1", "2", "3", "more"),
        4: ("convenient", "less_conv", "critical"), 5: ("convenient", "inconv"),
        6: ("nonprob", "slightly_prob", "problematic"), 7: ("recommended", "priority", "not_recom")},
        ("not_recom", "recommend", "very_recom", "priority", "spec_prior")),
    "wifi": _Spec("wifi.txt", None, 8, {}, ("1", "2", "3", "4")),
    "chess": _Spec("chess.data", ",", 7, {0: _FILES[:4], 1: _RANKS[:4], 2: _FILES, 3: _RANKS, 4: _FILES, 5: _RANKS},
                   ("draw", "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen")),
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
#: The paper's mean (sigma-scaled) ``v = |x' + x|`` per dataset (Table 2's second column).
PAPER_MEAN_V = {"abalone": 1.7, "banknote": 2.6, "car": 5.0, "yeast": 3.1, "cmc": 2.0, "nursery": 1.4, "wifi": 0.8,
                "chess": 2.3}
#: App. C.1: during the sigma search only, nursery and chess are restricted to (training, test) records.
SIGMA_SEARCH_CAPS = {"nursery": (1000, 100), "chess": (1000, 100)}


class DataFileError(ValueError):
    """The loaders' error family: a UCI file that cannot be read as the dataset it should hold.

    The message names the path and what is wrong (and, for a malformed file, the line and the
    reason).  Absent data raise the subclass :class:`DataNotFoundError`.
    """


class DataNotFoundError(DataFileError, FileNotFoundError):
    """The UCI directory or a data file is not there to read: absent, a directory where a file
    should be (or a file where the directory should be), a dangling symbolic link, or not a regular
    file.  Both a :class:`DataFileError` (the loaders' family) and a :class:`FileNotFoundError`
    (what ``open`` would have raised); the message names the path and which of these it is."""


def _path_problem(path, want_dir=False):
    """None if ``path`` is a readable-looking regular file (a directory if ``want_dir``), else what is wrong."""
    try:
        st = path.stat()
    except FileNotFoundError:
        if path.is_symlink():
            try:
                target = os.readlink(path)
            except OSError:  # pragma: no cover - the link vanished in between
                target = "?"
            return f"is a symbolic link to {target!r}, which does not exist"
        return "does not exist"
    except NotADirectoryError:
        return "does not exist (a component of the path is a file, not a directory)"
    except OSError as exc:
        return f"cannot be accessed ({exc.strerror or exc})"
    if want_dir:
        return None if stat.S_ISDIR(st.st_mode) else "is a file, not a directory"
    if stat.S_ISDIR(st.st_mode):
        return "is a directory, not a data file"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file (a pipe, socket or device)"
    return None


def resolve_uci_dir(path=None):
    """The directory holding the UCI files: the one place that decides it.

    Parameters
    ----------
    path : str or os.PathLike, optional
        Explicit directory (the ``uci_dir`` argument, ``--uci-dir``).

    Returns
    -------
    pathlib.Path
        ``path`` if given; else ``$SIMPLEX_RF_UCI_DIR`` if set and non-empty;
        else :data:`PACKAGE_DIR`, the copy shipped with the package.

    Raises
    ------
    DataNotFoundError
        (a :class:`DataFileError` and a :class:`FileNotFoundError`) if the
        chosen directory does not exist or is not a directory (the message
        names it, where the choice came from and which of the two).
    TypeError
        If ``path`` is not a string or path (an empty string is a ValueError).
    """
    if path is not None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"uci_dir must be a str or os.PathLike, got {describe(path)}")
        if isinstance(path, str) and not path.strip():
            raise ValueError("uci_dir must be a directory path, got an empty string")
        source = "uci_dir"
    elif os.environ.get(ENV_VAR):
        path, source = os.environ[ENV_VAR], f"${ENV_VAR}"
    else:
        path, source = PACKAGE_DIR, "the copy shipped with the package"
    p = Path(path).expanduser()
    problem = _path_problem(p, want_dir=True)
    if problem:
        raise DataNotFoundError(f"UCI data directory {str(p)!r} (from {source}) {problem}")
    return p


def check_dataset(name):
    """``name`` if it is one of the eight datasets (ValueError naming them otherwise)."""
    return check_choice(name, "dataset", DATASETS)


# ---------------------------------------------------------------------------
# Parsing


@dataclass(frozen=True)
class Dataset:
    """One parsed UCI dataset (before splitting and standardisation).

    Attributes
    ----------
    name : str
    X : ndarray (N, d), float64
        Features in file order: numeric columns as read, categorical columns
        one-hot encoded in place (values present, sorted as strings).
    labels : ndarray (N,), int64
        Class index into ``classes``.
    classes : tuple of str
        Label values present (sorted as strings).
    path : pathlib.Path
        The file read.
    source_column : ndarray (d,) of int or None
        The file column each feature comes from.
    categorical : ndarray (d,) of bool or None
        Whether each feature is part of a one-hot block.
    ends_with_record : bool
        Whether the last line of the file is a record (not a blank line); the
        authors' loader drops the last line, hence this record.
    """

    name: str
    X: np.ndarray
    labels: np.ndarray
    classes: tuple
    path: Path
    source_column: np.ndarray | None = None
    categorical: np.ndarray | None = None
    ends_with_record: bool = True

    @property
    def n_classes(self):
        return len(self.classes)

    @property
    def d(self):
        return self.X.shape[1]

    def split(self, rng=0, test_fraction=0.05, validation_fraction=0.0, max_train=None, max_test=None):
        """One split of the ``'resampled'`` protocol: shuffle, split, standardise.

        Parameters
        ----------
        rng : int >= 0, numpy.random.Generator or numpy.random.SeedSequence
            Seed of the shuffle.
        test_fraction : float in (0, 1)
            Fraction of the records held out for testing (paper: 0.05),
            ``round(test_fraction * N)`` records (at least one).
        validation_fraction : float in [0, 1)
            Fraction of the records held out for validation, disjoint from
            the test split (the sigma search of App. C.1); 0 for none.
        max_train, max_test : int >= 1, None or 'sigma_search'
            Caps on the training and on the test and validation sizes;
            ``'sigma_search'`` applies App. C.1's restriction of the sigma
            search (1000 / 100 for nursery and chess, :data:`SIGMA_SEARCH_CAPS`).
            Default: no cap (every record is used, as in the paper's
            random-feature runs).

        Returns
        -------
        Split
            Standardised with the mean and standard deviation (ddof 0) of the
            training records that are used; a column constant on them is
            only centred.
        """
        test_fraction = _check_fraction(test_fraction, "test_fraction", 0.0, 1.0, open_low=True)
        validation_fraction = _check_fraction(validation_fraction, "validation_fraction", 0.0, 1.0)
        if test_fraction + validation_fraction >= 1.0:
            raise ValueError(f"test_fraction + validation_fraction must be < 1, got "
                             f"{test_fraction} + {validation_fraction}")
        max_train = _cap(max_train, "max_train", SIGMA_SEARCH_CAPS.get(self.name, (None, None))[0])
        max_test = _cap(max_test, "max_test", SIGMA_SEARCH_CAPS.get(self.name, (None, None))[1])
        n = self.X.shape[0]
        perm = np.random.default_rng(_check_seed(rng, "rng")).permutation(n)
        n_test = max(1, int(round(test_fraction * n)))
        n_val = max(1, int(round(validation_fraction * n))) if validation_fraction > 0 else 0
        if n - n_test - n_val < 1:
            raise ValueError(f"{self.name}: {n} records leave no training points after the test and validation splits")
        test, val, train = perm[:n_test], perm[n_test:n_test + n_val], perm[n_test + n_val:]
        if max_test is not None:
            test, val = test[:max_test], val[:max_test]
        if max_train is not None:
            train = train[:max_train]
        return self._standardised(self.X, train, test, val if n_val else None, "resampled")

    def paper_split(self, seed=42, validation=False, sigma_search=False):
        """The split of the authors' public code (protocol ``'paper'``; module docs).

        Parameters
        ----------
        seed : int >= 0
            Seed of ``numpy.random.default_rng(seed).permutation`` (the
            authors': 42).
        validation : bool
            Hold out the last ``int(0.05 n)`` of the training records as a
            validation part (for the sigma search; the public code used the
            test set instead).  Standardisation then uses the remaining
            training records.
        sigma_search : bool
            Apply App. C.1's restriction of the sigma search: the first 1000
            training and 100 test / validation records of nursery and chess.

        Returns
        -------
        Split
        """
        seed = check_int(seed, "seed", 0)
        validation = check_bool(validation, "validation")
        sigma_search = check_bool(sigma_search, "sigma_search")
        X, labels = self.paper_arrays()
        n = X.shape[0]
        n_train, n_test = int(n * (1 - 0.05)), int(n * 0.05)
        if n_test < 1 or n_train < 2:
            raise ValueError(f"{self.name}: {n} records are too few for the paper's 95% / 5% split")
        perm = np.random.default_rng(seed).permutation(n)
        train, test = perm[:n_train], perm[n - n_test:]
        val = None
        if validation:
            train, val = train[:n_train - n_test], train[n_train - n_test:]
        if sigma_search and self.name in SIGMA_SEARCH_CAPS:
            cap_train, cap_test = SIGMA_SEARCH_CAPS[self.name]
            train, test = train[:cap_train], test[:cap_test]
            val = None if val is None else val[:cap_test]
        return self._standardised(X, train, test, val, "paper", labels)

    def paper_arrays(self):
        """(X, labels) as the authors' loader builds them: last line dropped, numeric features first.

        Returns
        -------
        X : ndarray (N', d)
            The numeric columns in file order, then the one-hot blocks of the
            categorical columns in file order; N' = N - 1 when the file's last
            line is a record.
        labels : ndarray (N',)
        """
        keep = self.X.shape[0] - 1 if self.ends_with_record else self.X.shape[0]
        X, labels = self.X[:keep], self.labels[:keep]
        if self.categorical is not None:
            order = np.argsort(self.categorical, kind="stable")  # numeric features first, file order kept
            X = X[:, order]
        return X, labels

    def _standardised(self, X, train, test, val, protocol, labels=None):
        labels = self.labels if labels is None else labels
        mu = X[train].mean(axis=0)
        sd = X[train].std(axis=0)
        sd = np.where(sd > 0, sd, 1.0)

        def std(idx):
            return (X[idx] - mu) / sd

        return Split(self.name, std(train), labels[train], std(test), labels[test],
                     None if val is None else std(val), None if val is None else labels[val], self.n_classes,
                     protocol)


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
    protocol : str
        ``'resampled'``, ``'paper'`` or ``'custom'`` (built by the caller).

    Construction validates every field (the one check of a Split, so every
    consumer -- :func:`~montecarlo.experiments.classification.prf_accuracy`,
    :func:`~montecarlo.experiments.classification.exact_accuracy`, the curves,
    :func:`mean_v` -- sees a consistent one): ``name`` a str; the inputs non-empty,
    finite, 2-D, the test and validation inputs as wide as ``X_train``
    (:func:`~montecarlo.experiments._common.check_array`); each label array one
    integer class index in ``[0, n_classes)`` per row of its inputs
    (:func:`~montecarlo.experiments._common.check_labels`; integer-valued floats
    become int64); ``X_val`` and ``y_val`` both None or both given; ``n_classes``
    an int in ``[1, MAX_CLASSES]``; ``protocol`` one of :data:`PROTOCOLS` or ``'custom'``.
    A bad field raises ValueError / TypeError naming it.
    """

    name: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    X_val: np.ndarray | None
    y_val: np.ndarray | None
    n_classes: int
    protocol: str = "custom"

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise TypeError(f"Split.name must be a str, got {describe(self.name)}")
        protocol = check_choice(self.protocol, "Split.protocol", (*PROTOCOLS, "custom"))
        n_classes = check_int(self.n_classes, "Split.n_classes", 1, maximum=MAX_CLASSES)
        X_train = check_array(self.X_train, "Split.X_train", 2)
        d = X_train.shape[1]
        X_test = check_array(self.X_test, "Split.X_test", 2, d, "Split.X_train's width")
        if (self.X_val is None) != (self.y_val is None):
            given, missing = ("X_val", "y_val") if self.y_val is None else ("y_val", "X_val")
            raise ValueError(f"Split.X_val and Split.y_val must both be None or both be given, got Split.{given} "
                             f"and Split.{missing} = None")
        X_val = None if self.X_val is None else check_array(self.X_val, "Split.X_val", 2, d, "Split.X_train's width")
        fields = {"protocol": protocol, "n_classes": n_classes, "X_train": X_train, "X_test": X_test, "X_val": X_val,
                  "y_train": check_labels(self.y_train, "Split.y_train", X_train.shape[0], n_classes),
                  "y_test": check_labels(self.y_test, "Split.y_test", X_test.shape[0], n_classes),
                  "y_val": None if X_val is None else check_labels(self.y_val, "Split.y_val", X_val.shape[0],
                                                                   n_classes)}
        for key, value in fields.items():
            object.__setattr__(self, key, value)

    @property
    def d(self):
        return self.X_train.shape[1]

    def padded(self, width=None):
        """The same split with inputs zero-padded to ``width`` columns
        (default: the next power of two, as the fast couplings of App. B.2 need)."""
        d = self.d
        width = 1 << (d - 1).bit_length() if width is None else check_int(width, "width", d)

        def pad(a):
            return None if a is None else np.pad(a, ((0, 0), (0, width - d)))

        return Split(self.name, pad(self.X_train), self.y_train, pad(self.X_test), self.y_test,
                     pad(self.X_val), self.y_val, self.n_classes, self.protocol)


def _check_fraction(value, name, lo, hi, open_low=False):
    ok = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) and math.isfinite(value)
    if ok:
        ok = (lo < value if open_low else lo <= value) and value < hi
    if not ok:
        left = "(" if open_low else "["
        raise ValueError(f"{name} must be a real number in {left}{lo}, {hi}), got {describe(value)}")
    return float(value)


def _cap(value, name, sigma_search):
    if isinstance(value, str):
        if value != "sigma_search":
            raise ValueError(f"{name} must be an integer >= 1, None or 'sigma_search', got {describe(value)}")
        return sigma_search
    if value is None:
        return None
    if not isinstance(value, numbers.Integral) or isinstance(value, (bool, np.bool_)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, None or 'sigma_search', got {describe(value)}")
    return int(value)


def _check_seed(rng, name):
    rng = check_rng(rng, name)
    if rng is None:
        raise ValueError(f"{name} must be a seed (an int >= 0, a numpy Generator or SeedSequence) for a "
                         f"reproducible split, got None")
    return rng


#: Said after every "line L, column C" of a malformed-record error: the two count differently (columns as in the
#: module table and ``Dataset.source_column``).
_COUNTING = "; lines count from 1, columns from 0"


def _read_records(path, spec):
    """Parse ``path`` line by line into typed columns (memory O(file size)); see the module docs.  The last of
    the values returned is a hash of the bytes read (:func:`_file_hash`)."""
    problem = _path_problem(path)
    if problem:
        raise DataNotFoundError(f"{spec.file}: data file {str(path)!r} {problem}")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise DataFileError(f"{path}: {size} bytes, more than the {MAX_FILE_BYTES} allowed for a UCI file of this "
                            f"kind (the largest of the eight is 1.06 MB)")
    n_fields = spec.fields
    numeric = [c for c in range(n_fields - 1) if c not in spec.categorical and c not in spec.drop]
    num_cols = {c: array("d") for c in numeric}
    cat_cols = {c: array("q") for c in spec.categorical}
    cat_seen = {c: {} for c in spec.categorical}
    label_codes, label_seen = array("q"), {}
    n_records, blank_since, ends_with_record = 0, None, False
    digest = hashlib.blake2b(digest_size=16)
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise DataFileError(f"{spec.file}: data file {str(path)!r} cannot be read ({exc.strerror or exc})") from None
    with fh:
        lineno = 0
        while True:
            raw = fh.readline(MAX_LINE_BYTES + 1)
            if not raw:
                break
            digest.update(raw)
            lineno += 1
            where = f"{path}, line {lineno}"
            if len(raw) > MAX_LINE_BYTES:
                raise DataFileError(f"{where}: longer than {MAX_LINE_BYTES} bytes (not a record of {spec.file})")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataFileError(f"{where}: not UTF-8 text (byte {exc.start + 1} of the line)") from None
            if lineno == 1 and line.startswith("\ufeff"):
                raise DataFileError(f"{where}: starts with a byte-order mark (U+FEFF); save the file as plain UTF-8")
            if "\x00" in line:
                raise DataFileError(f"{where}: contains a NUL byte")
            if not line.strip():
                blank_since = blank_since or lineno
                ends_with_record = False
                continue
            if blank_since is not None:
                raise DataFileError(f"{path}, line {blank_since}: blank line between records")
            ends_with_record = True
            tokens = line.split() if spec.sep is None else [t.strip() for t in line.split(spec.sep)]
            if len(tokens) != n_fields:
                raise DataFileError(f"{where}: expected {n_fields} fields, got {len(tokens)} "
                                    f"({spec.file} has {n_fields} fields per record, the label last)")
            for c, col in num_cols.items():
                t = tokens[c]
                if _NUMBER.fullmatch(t) is None:
                    raise DataFileError(f"{where}, column {c}: expected a number, got {t[:40]!r}{_COUNTING}")
                x = float(t)
                if not math.isfinite(x):
                    raise DataFileError(f"{where}, column {c}: {t[:40]!r} is not a finite number{_COUNTING}")
                col.append(x)
            for c, allowed in spec.categorical.items():
                t = tokens[c]
                seen = cat_seen[c]
                code = seen.get(t)
                if code is None:
                    if t not in allowed:
                        raise DataFileError(f"{where}, column {c}: {t[:40]!r} is not a value of this column "
                                            f"(allowed: {', '.join(allowed)}){_COUNTING}")
                    code = seen[t] = len(seen)
                cat_cols[c].append(code)
            t = tokens[-1]
            code = label_seen.get(t)
            if code is None:
                if not spec.allowed_label(t):
                    raise DataFileError(f"{where}, column {n_fields - 1} (label): {t[:40]!r} is not a label of "
                                        f"{spec.file} (allowed: {spec.describe_labels()}){_COUNTING}")
                code = label_seen[t] = len(label_seen)
            label_codes.append(code)
            n_records += 1
    if n_records == 0:
        raise DataFileError(f"{path}: the file has no records")
    return n_records, num_cols, cat_cols, cat_seen, label_codes, label_seen, ends_with_record, digest.digest()


def _file_hash(path):
    """The hash :func:`_read_records` computes of the bytes of ``path``, read in blocks (bounded memory); None if
    the file cannot be read or is larger than :data:`MAX_FILE_BYTES` (the parser then says why)."""
    digest, size = hashlib.blake2b(digest_size=16), 0
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # (a pipe would block an open for reading)
        with open(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            while block := fh.read(1 << 16):
                size += len(block)
                if size > MAX_FILE_BYTES:
                    return None
                digest.update(block)
    except OSError:
        return None
    return digest.digest()


#: Datasets parsed in this process, by (name, path, hash of the file's bytes), oldest first: a file read again
#: with the same bytes is not parsed again (the figures' main job reads each file for Fig. 8 and again for
#: Fig. 10; parsing the eight is about 0.9 CPU-seconds).  Their arrays are read-only: every caller gets the same.
_LOADED = {}
_LOADED_LOCK = threading.Lock()
#: At most this many parsed datasets are kept (the eight of two directories).
_LOADED_MAX = 16


def _sorted_codes(codes, seen):
    """Codes in order of first appearance -> codes into the values sorted as strings."""
    values = sorted(seen)
    remap = np.empty(len(values), dtype=np.int64)
    for new, value in enumerate(values):
        remap[seen[value]] = new
    return remap[np.frombuffer(codes, dtype=np.int64)], values


def load_dataset(name, uci_dir=None):
    """Parse one of the eight datasets.

    Parameters
    ----------
    name : {'abalone', 'banknote', 'car', 'yeast', 'cmc', 'nursery', 'wifi', 'chess'}
    uci_dir : str or os.PathLike, optional
        Directory of the files (see :func:`resolve_uci_dir`; default the
        shipped copy).

    Returns
    -------
    Dataset

    Raises
    ------
    ValueError
        Unknown name.
    DataFileError
        A file that does not hold the dataset (module docs, *Parsing*),
        naming the file, line and reason; or fewer than two classes; or a
        file that cannot be opened (naming the path and the system's reason).
    DataNotFoundError
        (a DataFileError and a FileNotFoundError) The directory or the file
        is absent, or is a directory, a dangling symbolic link or not a
        regular file (naming the path and which).
    """
    name = check_dataset(name)
    spec = SPECS[name]
    path = resolve_uci_dir(uci_dir) / spec.file
    digest = _file_hash(path)
    key = (name, str(path), digest)
    if digest is not None:
        with _LOADED_LOCK:
            ds = _LOADED.get(key)
        if ds is not None:
            return ds
    ds, read = _parse_dataset(name, spec, path)
    if read == digest:  # (not a file that changed between the two reads)
        with _LOADED_LOCK:
            _LOADED[key] = ds
            while len(_LOADED) > _LOADED_MAX:
                del _LOADED[next(iter(_LOADED))]
    return ds


def _parse_dataset(name, spec, path):
    """``(Dataset, hash of the bytes read)`` of the file ``path`` (:func:`load_dataset`), its arrays read-only."""
    n, num_cols, cat_cols, cat_seen, label_codes, label_seen, ends_with_record, read = _read_records(path, spec)
    blocks, source, categorical = [], [], []
    for col in range(spec.fields - 1):  # a loop over columns, not records
        if col in spec.drop:
            continue
        if col in spec.categorical:
            codes, values = _sorted_codes(cat_cols[col], cat_seen[col])
            block = np.zeros((n, len(values)))
            block[np.arange(n), codes] = 1.0
            blocks.append(block)
            source += [col] * len(values)
            categorical += [True] * len(values)
        else:
            blocks.append(np.frombuffer(num_cols[col], dtype=np.float64)[:, None])
            source.append(col)
            categorical.append(False)
    labels, classes = _sorted_codes(label_codes, label_seen)
    if len(classes) < 2:
        raise DataFileError(f"{path}: the label column (last) has fewer than two classes ({', '.join(classes)})")
    arrays = (np.concatenate(blocks, axis=1), labels, np.array(source, dtype=np.int64),
              np.array(categorical, dtype=bool))
    for a in arrays:
        a.setflags(write=False)
    X, labels, source, categorical = arrays
    return Dataset(name, X, labels, tuple(classes), path, source, categorical, ends_with_record), read


def load_all(uci_dir=None, names=None, warn=True, require=False):
    """Load the datasets whose file is present.

    Parameters
    ----------
    uci_dir : str or os.PathLike, optional
        See :func:`resolve_uci_dir`.
    names : sequence of str, optional
        Subset to load (default all eight, in the paper's order).
    warn : bool
        Emit a :class:`UserWarning` naming the missing files.
    require : bool
        Raise :class:`DataNotFoundError` (a :class:`FileNotFoundError`)
        instead when a file is missing (the command lines: a requested
        dataset that is absent is a failure).

    Returns
    -------
    datasets : dict
        name -> :class:`Dataset`, for the files present.
    missing : list of str
        Names whose file is absent (or is a directory, a dangling link, not
        a regular file: the warning and the error say which).  Malformed
        files raise (see :func:`load_dataset`); only absent ones are skipped.
    """
    root = resolve_uci_dir(uci_dir)
    if names is None:
        names = DATASETS
    elif isinstance(names, str):
        raise TypeError(f"names must be a sequence of dataset names, got the string {names!r}")
    else:
        names = [check_dataset(n) for n in names]
        if not names:
            raise ValueError(f"names must not be empty (choose from {', '.join(DATASETS)})")
    warn, require = check_bool(warn, "warn"), check_bool(require, "require")
    out, missing = {}, []
    for name in names:
        if _path_problem(root / SPECS[name].file):
            missing.append(name)
            continue
        out[name] = load_dataset(name, root)
    if missing and require:
        raise DataNotFoundError(f"UCI data in {root}: missing {_describe_missing(root, missing)}")
    if missing and warn:
        warn_missing(root, missing, len(out), stacklevel=3)
    return out, missing


def _describe_missing(root, missing):
    """'car.data, wifi.txt (is a directory, not a data file)': each file, with the reason unless plainly absent."""
    parts = []
    for n in missing:
        problem = _path_problem(Path(root) / SPECS[n].file)
        parts.append(SPECS[n].file + (f" ({problem})" if problem and problem != "does not exist" else ""))
    return ", ".join(parts)


def warn_missing(root, missing, n_present, stacklevel=2):
    """The :class:`UserWarning` naming the missing files of a partial UCI directory."""
    warnings.warn(f"UCI data in {root}: missing {_describe_missing(root, missing)}; running the {n_present} present "
                  "dataset(s)", UserWarning, stacklevel=stacklevel + 1)


# ---------------------------------------------------------------------------
# Protocols


@dataclass(frozen=True)
class Protocol:
    """One way of splitting the data (module docs, *Protocols*).

    Attributes
    ----------
    name : str
    description : str
    default_seeds : tuple of int
        Split seeds used when the caller gives none.
    """

    name: str
    description: str
    default_seeds: tuple
    _make: object = field(repr=False, compare=False)

    def split(self, dataset, seed, validation=False, sigma_search=False):
        """The :class:`Split` of ``dataset`` for one seed."""
        return self._make(dataset, seed, validation, sigma_search)


def _resampled(ds, seed, validation, sigma_search):
    cap = "sigma_search" if sigma_search else None
    return ds.split(seed, validation_fraction=0.05 if validation else 0.0, max_train=cap, max_test=cap)


def _paper(ds, seed, validation, sigma_search):
    return ds.paper_split(seed, validation=validation, sigma_search=sigma_search)


#: The protocols by name; the first is the default.
PROTOCOLS = {
    "resampled": Protocol("resampled", "random splits (5% test, 5% validation held out for the sigma search), "
                                       "results averaged over splits", (0, 1, 2, 3, 4), _resampled),
    "paper": Protocol("paper", "the authors' split: last line dropped, default_rng(42) permutation, first "
                               "int(0.95 n) train, last int(0.05 n) test", (42,), _paper),
}
#: Name of the default protocol.
DEFAULT_PROTOCOL = "resampled"


def get_protocol(protocol):
    """The :class:`Protocol` called ``protocol`` (ValueError naming the allowed ones otherwise)."""
    return PROTOCOLS[check_choice(protocol, "protocol", tuple(PROTOCOLS))]


def split_seeds(protocol, seeds=None):
    """The split seeds to use: ``seeds`` (an int >= 0 or a non-empty sequence of them) or the protocol's defaults."""
    proto = get_protocol(protocol)
    if seeds is None:
        return proto.default_seeds
    if isinstance(seeds, (list, tuple, range, np.ndarray)):
        out = tuple(check_int(s, "split_rng", 0) for s in seeds)
        if not out:
            raise ValueError("split_rng must be an int >= 0 or a non-empty sequence of them, got an empty sequence")
        refuse_repeats(out, "split_rng", "a seed")
        return out
    return (check_int(seeds, "split_rng", 0),)


def make_split(dataset, protocol=DEFAULT_PROTOCOL, seed=None, *, validation=False, sigma_search=False, uci_dir=None):
    """One split of a dataset under a protocol (module docs, *Protocols*).

    Parameters
    ----------
    dataset : str or Dataset
        A name loads the file (see :func:`load_dataset`).
    protocol : {'resampled', 'paper'}
    seed : int >= 0, optional
        Split seed (default: the protocol's first, 0 or 42).
    validation : bool
        Also hold out a validation part, disjoint from the test part.
    sigma_search : bool
        Apply App. C.1's restriction of the sigma search (nursery and chess:
        1000 training, 100 test and validation records).
    uci_dir : str or os.PathLike, optional

    Returns
    -------
    Split
    """
    proto = get_protocol(protocol)
    if isinstance(dataset, str):
        dataset = load_dataset(dataset, uci_dir)
    if not isinstance(dataset, Dataset):
        raise TypeError(f"dataset must be a dataset name or a Dataset, got {describe(dataset)}")
    seed = proto.default_seeds[0] if seed is None else check_int(seed, "seed", 0)
    return proto.split(dataset, seed, check_bool(validation, "validation"), check_bool(sigma_search, "sigma_search"))


def mean_v(split, sigma=None, block=1 << 22):
    r"""Mean sigma-scaled :math:`v = \|\sigma x' + \sigma x\|` over every (test, training) pair (Table 2's column).

    Parameters
    ----------
    split : Split
    sigma : float > 0, optional
        Default: the paper's value for the dataset.
    block : int
        Pairs per chunk (bounded memory).

    Returns
    -------
    float
        Under the ``'paper'`` protocol this reproduces the paper's column
        (1.7, 2.6, 5.0, 3.1, 2.0, 1.4, 0.8, 2.3) to 0.05.
    """
    if not isinstance(split, Split):
        raise TypeError(f"split must be a Split, got {describe(split)}")
    if sigma is None:
        if split.name not in PAPER_SIGMAS:
            raise ValueError(f"sigma must be given for dataset {split.name!r} (no paper value)")
        sigma = PAPER_SIGMAS[split.name]
    sigma = check_positive_float(sigma, "sigma")
    block = check_int(block, "block", 1)
    a, b = sigma * split.X_test, sigma * split.X_train
    sa, sb = np.einsum("nd,nd->n", a, a), np.einsum("nd,nd->n", b, b)
    rows = max(1, block // b.shape[0])
    total = 0.0
    for lo in range(0, a.shape[0], rows):  # a loop over chunks of test rows
        sq = sa[lo:lo + rows, None] + sb[None, :] + 2 * (a[lo:lo + rows] @ b.T)
        total += float(np.sqrt(np.maximum(sq, 0.0)).sum())
    return total / (a.shape[0] * b.shape[0])
