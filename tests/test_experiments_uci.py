"""UCI loaders (Sec. 5.3): parsing against facts about the files, the paper's preprocessing, bad input.

Data tests use ``$SIMPLEX_RF_UCI_DIR`` or ``../shared/uci`` beside the
repository root and are skipped (with the reason) when neither exists.
"""

import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from montecarlo.experiments import uci

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "uci"
UCI_DIR = Path(os.environ.get(uci.ENV_VAR) or SHARED)
needs_data = pytest.mark.skipif(not UCI_DIR.is_dir(), reason=f"UCI data directory {UCI_DIR} not found "
                                                              f"(set ${uci.ENV_VAR})")

# Facts about the UCI files, independent of the loader: records, inputs after one-hot
# encoding (numeric columns + sum of category counts), classes.
FACTS = {
    "abalone": (4177, 3 + 7, 28),
    "banknote": (1372, 4, 2),
    "car": (1728, 4 + 4 + 4 + 3 + 3 + 3, 4),
    "yeast": (1484, 8, 10),
    "cmc": (1473, 9, 3),
    "nursery": (12960, 3 + 5 + 4 + 4 + 3 + 2 + 3 + 3, 5),
    "wifi": (2000, 7, 4),
    "chess": (28056, 4 + 4 + 8 + 8 + 8 + 8, 18),
}


@needs_data
@pytest.mark.parametrize("name", uci.DATASETS)
def test_load_matches_file_facts(name):
    ds = uci.load_dataset(name, UCI_DIR)
    n, d, c = FACTS[name]
    assert ds.X.shape == (n, d) and ds.n_classes == c and ds.labels.shape == (n,)
    assert np.bincount(ds.labels).min() >= 1
    n_cat = len(uci.SPECS[name].categorical)
    if n_cat:  # each categorical column contributes exactly one 1 per record
        onehot = ds.X[:, np.all((ds.X == 0) | (ds.X == 1), axis=0)]
        assert np.all(onehot.sum(axis=1) >= n_cat)


@needs_data
def test_first_records_parsed_as_written():
    """abalone line 1 'M,0.455,0.365,0.095,0.514,0.2245,0.101,0.15,15'; yeast drops the sequence name;
    wifi is tab separated with CRLF line ends; nursery ends with a blank line."""
    ab = uci.load_dataset("abalone", UCI_DIR)
    assert ab.X[0].tolist() == [0, 0, 1, 0.455, 0.365, 0.095, 0.514, 0.2245, 0.101, 0.15]  # F, I, M one-hot
    assert ab.classes[ab.labels[0]] == "15"
    ye = uci.load_dataset("yeast", UCI_DIR)
    assert ye.X[0].tolist() == [0.58, 0.61, 0.47, 0.13, 0.50, 0.00, 0.48, 0.22]
    assert ye.classes[ye.labels[0]] == "MIT"
    wi = uci.load_dataset("wifi", UCI_DIR)
    assert wi.X[0].tolist() == [-64, -56, -61, -66, -71, -82, -81] and wi.classes == ("1", "2", "3", "4")


@needs_data
def test_paper_split_sizes_and_standardisation():
    ds = uci.load_dataset("nursery", UCI_DIR)
    sp = ds.split(0)
    assert sp.X_train.shape == (1000, 27) and sp.X_test.shape == (100, 27)  # the paper's cap
    ab = uci.load_dataset("abalone", UCI_DIR).split(3)
    assert ab.X_test.shape[0] == round(0.05 * 4177) and ab.X_train.shape[0] == 4177 - 209
    assert np.allclose(ab.X_train.mean(axis=0), 0, atol=1e-12)
    assert np.allclose(ab.X_train.std(axis=0), 1)
    assert not np.allclose(ab.X_test.mean(axis=0), 0, atol=1e-3)  # test data use the training statistics


def _toy_dataset(n=200, n_classes=3):
    """A Dataset whose first column is the record id, to check split disjointness."""
    X = np.column_stack([np.arange(n, dtype=float), np.random.default_rng(0).normal(size=(n, 2))])
    return uci.Dataset("toy", X, np.arange(n) % n_classes, tuple("abc"[:n_classes]), Path("toy"))


def test_split_is_disjoint_reproducible_and_uses_training_statistics():
    """Ids 0..199 in column 0: one common affine map (the training statistics) sends the three parts to
    200 distinct, equally spaced values, i.e. the parts are disjoint and cover every record."""
    ds = _toy_dataset()
    sp = ds.split(5, test_fraction=0.1, validation_fraction=0.2)
    assert (sp.X_test.shape[0], sp.X_val.shape[0], sp.X_train.shape[0]) == (20, 40, 140)
    ids = np.sort(np.concatenate([sp.X_train[:, 0], sp.X_test[:, 0], sp.X_val[:, 0]]))
    step = np.diff(ids)
    assert np.allclose(step, step[0]) and step[0] > 0
    assert abs(sp.X_train[:, 0].mean()) < 1e-12 and sp.X_train[:, 0].std() == pytest.approx(1.0)
    again = ds.split(5, test_fraction=0.1, validation_fraction=0.2)
    assert np.array_equal(again.X_test, sp.X_test)
    assert not np.array_equal(ds.split(6, test_fraction=0.1).X_test, ds.split(5, test_fraction=0.1).X_test)
    padded = sp.padded()
    assert padded.X_train.shape[1] == 4 and np.all(padded.X_test[:, 3] == 0)
    assert np.array_equal(padded.X_test[:, :3], sp.X_test)


def test_constant_training_column_is_centred_not_divided_by_zero():
    X = np.column_stack([np.ones(50), np.arange(50.0)])
    ds = uci.Dataset("toy", X, np.arange(50) % 2, ("a", "b"), Path("toy"))
    sp = ds.split(0)
    assert np.all(np.isfinite(sp.X_train)) and np.all(sp.X_train[:, 0] == 0)


@pytest.mark.parametrize("kwargs, match", [
    ({"test_fraction": 0.0}, "test_fraction"),
    ({"test_fraction": 1.5}, "test_fraction"),
    ({"validation_fraction": -0.1}, "validation_fraction"),
    ({"test_fraction": 0.6, "validation_fraction": 0.5}, "< 1"),
    ({"max_train": 0}, "max_train"),
    ({"max_test": "all"}, "max_test"),
])
def test_split_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _toy_dataset().split(0, **kwargs)


def test_resolve_uci_dir_precedence(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    monkeypatch.setenv(uci.ENV_VAR, str(b))
    assert uci.resolve_uci_dir(a) == a  # explicit beats the environment
    assert uci.resolve_uci_dir() == b
    monkeypatch.setenv(uci.ENV_VAR, str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="nope.*SIMPLEX_RF_UCI_DIR"):
        uci.resolve_uci_dir()
    with pytest.raises(FileNotFoundError, match="missing_dir"):
        uci.resolve_uci_dir(tmp_path / "missing_dir")
    with pytest.raises(TypeError, match="uci_dir"):
        uci.resolve_uci_dir(3)


def test_unknown_dataset_names_the_allowed_ones(tmp_path):
    with pytest.raises(ValueError, match="'abalone'.*'chess'.*got 'iris'"):
        uci.load_dataset("iris", tmp_path)


def _write(tmp_path, name, text):
    (tmp_path / uci.SPECS[name].file).write_text(text)
    return tmp_path


@pytest.mark.parametrize("text, match", [
    ("3.6,8.6,-2.8,-0.4,0\n4.5,8.1,-2.4,0\n", r"banknote.txt, line 2: expected 5 fields, got 4"),
    ("3.6,8.6,-2.8,-0.4,0\n4.5,8.1,abc,-1.4,1\n", r"banknote.txt, line 2, column 2: expected a number, got 'abc'"),
    ("3.6,8.6,-2.8,-0.4,0\n4.5,nan,-2.4,-1.4,1\n", r"banknote.txt, line 2, column 1: NaN or inf"),
    ("\n\n", "no records"),
    ("3.6,8.6,-2.8,-0.4,0\n4.5,8.1,-2.4,-1.4,0\n", "fewer than two classes"),
])
def test_malformed_files_name_file_and_line(tmp_path, text, match):
    _write(tmp_path, "banknote", text)
    with pytest.raises(ValueError, match=match):
        uci.load_dataset("banknote", tmp_path)


def test_too_few_columns_for_the_format(tmp_path):
    _write(tmp_path, "car", "vhigh,unacc\nlow,acc\n")
    with pytest.raises(ValueError, match="car.data: expected at least 7 fields"):
        uci.load_dataset("car", tmp_path)


def test_missing_file_and_partial_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="wifi.txt"):
        uci.load_dataset("wifi", tmp_path)
    _write(tmp_path, "banknote", "3.6,8.6,-2.8,-0.4,0\n4.5,8.1,-2.4,-1.4,1\n")
    _write(tmp_path, "yeast", "A  0.5  0.6  0.4  0.1  0.5  0.0  0.4  0.2  MIT\n"
                              "B  0.4  0.6  0.4  0.2  0.5  0.0  0.5  0.2  CYT\n")
    with pytest.warns(UserWarning, match=r"missing abalone.data, car.data, cmc.data, nursery.data, wifi.txt, "
                                         r"chess.data; running the 2 present"):
        data, missing = uci.load_all(tmp_path)
    assert list(data) == ["banknote", "yeast"]
    assert missing == ["abalone", "car", "cmc", "nursery", "wifi", "chess"]
    assert data["yeast"].X.shape == (2, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        data, missing = uci.load_all(tmp_path, names=["banknote"], warn=False)
    assert list(data) == ["banknote"] and missing == []
