"""UCI loaders and splits (Sec. 5.3): parsing against facts about the files, the two protocols, bad files.

The data are the copy shipped with the package (or ``$SIMPLEX_RF_UCI_DIR``), found by
``uci.resolve_uci_dir()``, the one place that decides the directory.  The paper protocol is checked
against what the paper prints (Table 2's mean-v column, its accuracies) and against a rebuild from the
description of the authors' loader written out here.
"""

import hashlib
import os
import re
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pytest

from montecarlo.experiments import classification as cl, uci

UCI_DIR = uci.resolve_uci_dir()

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


@pytest.mark.parametrize("name", uci.DATASETS)
def test_load_matches_file_facts(name):
    ds = uci.load_dataset(name, UCI_DIR)
    n, d, c = FACTS[name]
    assert ds.X.shape == (n, d) and ds.n_classes == c and ds.labels.shape == (n,)
    assert np.bincount(ds.labels).min() >= 1
    spec = uci.SPECS[name]
    n_cat = len(spec.categorical)
    assert int((~ds.categorical).sum()) == spec.fields - 1 - n_cat - len(spec.drop)  # numeric columns
    if n_cat:  # each categorical column contributes exactly one 1 per record
        assert np.array_equal(ds.X[:, ds.categorical].sum(axis=1), np.full(n, n_cat))
    assert ds.ends_with_record == (name != "nursery")  # only nursery.data ends with a blank line


def test_first_records_parsed_as_written():
    """abalone line 1 'M,0.455,0.365,0.095,0.514,0.2245,0.101,0.15,15'; yeast drops the sequence name;
    wifi is tab separated with CRLF line ends; banknote has CRLF and no final newline."""
    ab = uci.load_dataset("abalone", UCI_DIR)
    assert ab.X[0].tolist() == [0, 0, 1, 0.455, 0.365, 0.095, 0.514, 0.2245, 0.101, 0.15]  # F, I, M one-hot
    assert ab.classes[ab.labels[0]] == "15"
    ye = uci.load_dataset("yeast", UCI_DIR)
    assert ye.X[0].tolist() == [0.58, 0.61, 0.47, 0.13, 0.50, 0.00, 0.48, 0.22]
    assert ye.classes[ye.labels[0]] == "MIT"
    wi = uci.load_dataset("wifi", UCI_DIR)
    assert wi.X[0].tolist() == [-64, -56, -61, -66, -71, -82, -81] and wi.classes == ("1", "2", "3", "4")
    bn = uci.load_dataset("banknote", UCI_DIR)
    assert bn.X[-1].tolist() == [-2.5419, -0.65804, 2.6842, 1.1952] and bn.classes[bn.labels[-1]] == "1"


def test_shipped_copy_readme_cites_every_file_with_its_license_and_hash():
    """The README beside the data names each dataset's DOI and CC BY 4.0, and its SHA-256 list matches
    the files as shipped (so an edited file cannot pass as the UCI original)."""
    assert uci.PACKAGE_DIR.is_dir() and (uci.PACKAGE_DIR / "README.md").is_file()
    text = (uci.PACKAGE_DIR / "README.md").read_text()
    assert "CC BY 4.0" in text and "creativecommons.org/licenses/by/4.0" in text
    listed = dict((f, h) for h, f in re.findall(r"^([0-9a-f]{64})  (\S+)$", text, re.M))
    assert sorted(listed) == sorted(spec.file for spec in uci.SPECS.values())
    for f, h in listed.items():
        assert hashlib.sha256((uci.PACKAGE_DIR / f).read_bytes()).hexdigest() == h, f
    for doi in ("C55C7W", "C55P57", "C5JP48", "C5KG68", "C59W2D", "C5P88W", "C51880", "C57W2S"):
        assert f"https://doi.org/10.24432/{doi}" in text


def test_resolve_uci_dir_precedence(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    monkeypatch.setenv(uci.ENV_VAR, str(b))
    assert uci.resolve_uci_dir(a) == a  # explicit beats the environment
    assert uci.resolve_uci_dir() == b
    monkeypatch.setenv(uci.ENV_VAR, "")
    assert uci.resolve_uci_dir() == uci.PACKAGE_DIR  # an empty variable counts as unset
    monkeypatch.delenv(uci.ENV_VAR)
    assert uci.resolve_uci_dir() == uci.PACKAGE_DIR
    monkeypatch.setenv(uci.ENV_VAR, str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match=r"nope.*from \$SIMPLEX_RF_UCI_DIR"):
        uci.resolve_uci_dir()
    with pytest.raises(FileNotFoundError, match="missing_dir.*from uci_dir"):
        uci.resolve_uci_dir(tmp_path / "missing_dir")
    with pytest.raises(TypeError, match="uci_dir must be a str or os.PathLike"):
        uci.resolve_uci_dir(3)
    with pytest.raises(ValueError, match="empty string"):
        uci.resolve_uci_dir("")


def test_unknown_dataset_names_the_allowed_ones(tmp_path):
    with pytest.raises(ValueError, match="dataset must be one of 'abalone'.*'chess', got 'iris'"):
        uci.load_dataset("iris", tmp_path)


# ---------------------------------------------------------------------------
# The resampled protocol


def test_resampled_split_uses_every_record_and_caps_only_the_sigma_search():
    """App. C.1 restricts nursery and chess to 1000 / 100 records during the sigma search only."""
    ds = uci.load_dataset("nursery", UCI_DIR)
    sp = uci.make_split(ds, "resampled", 0)
    assert sp.X_train.shape == (12960 - 648, 27) and sp.X_test.shape == (648, 27) and sp.protocol == "resampled"
    ss = uci.make_split(ds, "resampled", 0, validation=True, sigma_search=True)
    assert ss.X_train.shape == (1000, 27) and ss.X_test.shape == (100, 27) and ss.X_val.shape == (100, 27)
    ab = uci.load_dataset("abalone", UCI_DIR).split(3)
    assert ab.X_test.shape[0] == round(0.05 * 4177) and ab.X_train.shape[0] == 4177 - 209
    assert np.allclose(ab.X_train.mean(axis=0), 0, atol=1e-12)
    assert np.allclose(ab.X_train.std(axis=0), 1)
    assert not np.allclose(ab.X_test.mean(axis=0), 0, atol=1e-3)  # test data use the training statistics
    assert uci.split_seeds("resampled") == (0, 1, 2, 3, 4) and uci.split_seeds("paper") == (42,)


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
    step = np.diff(np.sort(np.concatenate([sp.X_train[:, 0], sp.X_test[:, 0], sp.X_val[:, 0]])))
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


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"test_fraction": 0.0}, ValueError, "test_fraction"),
    ({"test_fraction": 1.5}, ValueError, "test_fraction"),
    ({"test_fraction": True}, ValueError, "test_fraction"),
    ({"validation_fraction": -0.1}, ValueError, "validation_fraction"),
    ({"test_fraction": 0.6, "validation_fraction": 0.5}, ValueError, "< 1"),
    ({"max_train": 0}, ValueError, "max_train must be an integer >= 1, None or 'sigma_search'"),
    ({"max_test": "paper"}, ValueError, "max_test"),
    ({"rng": -1}, ValueError, "rng must be"),
    ({"rng": None}, ValueError, "reproducible split"),
    ({"rng": np.random.RandomState(0)}, TypeError, "legacy RandomState"),
])
def test_split_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        _toy_dataset().split(**kwargs)


def test_protocol_lookup_and_bad_arguments():
    assert uci.get_protocol("paper").default_seeds == (42,)
    with pytest.raises(ValueError, match="protocol must be one of 'resampled', 'paper', got 'authors'"):
        uci.get_protocol("authors")
    with pytest.raises(ValueError, match=r"split_rng must not repeat a seed, got \[1, 1\] \(1 repeated\)"):
        uci.split_seeds("resampled", [1, 1])
    with pytest.raises(ValueError, match="split_rng must be an int >= 0 or a non-empty sequence"):
        uci.split_seeds("resampled", [])
    with pytest.raises(TypeError, match="split_rng must be an integer >= 0"):
        uci.split_seeds("resampled", 1.0)
    with pytest.raises(TypeError, match="dataset must be a dataset name or a Dataset"):
        uci.make_split(np.ones((3, 3)))
    with pytest.raises(TypeError, match="validation must be True or False"):
        uci.make_split(_toy_dataset(), "resampled", 0, validation="yes")


# ---------------------------------------------------------------------------
# The paper protocol (the authors' data_loader.load_data_onehot, from its description)

# Sizes derived from the files and the paper's 95% / 5% split: the authors' loader drops the last line
# (the last record in 7 files; nursery's blank line), train = int(0.95 n), test = int(0.05 n).
PAPER_SIZES = {name: (int(0.95 * (n - (name != "nursery"))), int(0.05 * (n - (name != "nursery"))))
               for name, (n, _, _) in FACTS.items()}


def _rebuild_paper_split(name):
    """The authors' split written out from the issue's description with the csv-free str.split parser."""
    spec = uci.SPECS[name]
    lines = (UCI_DIR / spec.file).read_text().splitlines(keepends=True)[:-1]  # the last line is dropped
    rows = [line.rstrip("\n").split(spec.sep) for line in lines]
    rows = [[t.strip() for t in r if spec.sep is not None or t] for r in rows]
    if spec.drop:
        rows = [[t for j, t in enumerate(r) if j not in spec.drop] for r in rows]
    cols = list(zip(*rows))
    text = [c for c in range(len(cols)) if c in spec.categorical] + [len(cols) - 1]
    numeric = [np.array(cols[c], dtype=float) for c in range(len(cols)) if c not in text]
    onehots = []
    for c in text:
        values, codes = np.unique(np.array(cols[c]), return_inverse=True)
        onehots.append(np.eye(values.size)[codes])
    X = np.column_stack(numeric + onehots[:-1])
    y = onehots[-1].argmax(axis=1)
    perm = np.random.default_rng(42).permutation(len(X))
    X, y = X[perm], y[perm]
    n_tr, n_te = int(len(X) * 0.95), int(len(X) * 0.05)
    mu, sd = X[:n_tr].mean(axis=0), X[:n_tr].std(axis=0)
    return (X[:n_tr] - mu) / sd, y[:n_tr], (X[-n_te:] - mu) / sd, y[-n_te:]


@pytest.mark.parametrize("name", ["abalone", "nursery", "yeast"])
def test_paper_split_equals_a_rebuild_from_the_description(name):
    """abalone: categorical column first (moves behind the numeric ones); nursery: trailing blank line
    (no record dropped), all categorical; yeast: whitespace separated, column 0 dropped."""
    sp = uci.make_split(name, "paper")
    Xtr, ytr, Xte, yte = _rebuild_paper_split(name)
    assert sp.protocol == "paper"
    assert np.array_equal(sp.X_train, Xtr) and np.array_equal(sp.y_train, ytr)
    assert np.array_equal(sp.X_test, Xte) and np.array_equal(sp.y_test, yte)


@pytest.mark.parametrize("name", uci.DATASETS)
def test_paper_split_sizes_standardisation_and_mean_v(name):
    """Sizes from the files and the 95/5 rule; training columns standardised (ddof 0) with no constant
    column (so the authors' unguarded division and ours agree); Table 2's mean v to 0.05."""
    sp = uci.make_split(name, "paper")
    assert (sp.X_train.shape[0], sp.X_test.shape[0]) == PAPER_SIZES[name]
    assert np.allclose(sp.X_train.mean(axis=0), 0, atol=1e-10) and np.allclose(sp.X_train.std(axis=0), 1)
    assert abs(uci.mean_v(sp) - uci.PAPER_MEAN_V[name]) <= 0.05


def test_mean_v_resolves_a_wrong_sigma():
    """Power of the mean-v check: a sigma 10% off moves the column by more than 0.05 on every dataset
    with v >= 1 (v is proportional to sigma), e.g. car 5.0 -> 5.5."""
    sp = uci.make_split("car", "paper")
    assert abs(uci.mean_v(sp, 1.1 * uci.PAPER_SIGMAS["car"]) - uci.PAPER_MEAN_V["car"]) > 0.05
    bn = uci.make_split("banknote", "paper")
    assert uci.mean_v(bn, block=7) == pytest.approx(uci.mean_v(bn), rel=1e-12)  # chunking does not matter


def _exact_accuracy_direct(split, sigma):
    """Exact-kernel kernel regression written out (squared distances, per-class sums) for a check."""
    a, b = sigma * split.X_test, sigma * split.X_train
    d2 = ((a[:, None, :] - b[None, :, :]) ** 2).sum(axis=2)
    k = np.exp(-0.5 * (d2 - d2.min(axis=1, keepdims=True)))
    sums = np.stack([k[:, split.y_train == c].sum(axis=1) for c in range(split.n_classes)], axis=1)
    return float(np.mean(sums.argmax(axis=1) == split.y_test))


@pytest.mark.parametrize("name", uci.DATASETS)
def test_paper_split_exact_kernel_accuracy(name):
    """The exact classifier equals a direct computation (small sets) and lies above the paper's Table 2
    accuracy at m = d (Sec. 5.3: accuracy tends to the exact kernel's as m grows)."""
    sp = uci.make_split(name, "paper")
    exact = cl.exact_accuracy(sp)
    if sp.X_train.shape[0] * sp.X_test.shape[0] <= 2_000_000:
        assert exact == _exact_accuracy_direct(sp, uci.PAPER_SIGMAS[name])
    paper_simrf, paper_plus = cl.PAPER_TABLE2[name]
    assert exact > max(paper_simrf[0], paper_plus[0])


def test_paper_split_validation_and_sigma_search_restriction():
    ds = uci.load_dataset("chess", UCI_DIR)
    n_tr, n_te = PAPER_SIZES["chess"]
    full = ds.paper_split()
    val = ds.paper_split(validation=True)
    assert val.X_val.shape[0] == n_te and val.X_train.shape[0] == n_tr - n_te
    assert np.array_equal(val.y_test, full.y_test)  # the test part is untouched
    ss = ds.paper_split(validation=True, sigma_search=True)
    assert (ss.X_train.shape[0], ss.X_val.shape[0], ss.X_test.shape[0]) == (1000, 100, 100)
    wifi = uci.load_dataset("wifi", UCI_DIR).paper_split(validation=True, sigma_search=True)
    assert wifi.X_train.shape[0] == PAPER_SIZES["wifi"][0] - PAPER_SIZES["wifi"][1]  # no cap for wifi
    other = ds.paper_split(seed=43)
    assert not np.array_equal(other.y_test, full.y_test)
    with pytest.raises(TypeError, match="seed must be an integer >= 0"):
        ds.paper_split(seed="42")


# ---------------------------------------------------------------------------
# Malformed files: each a clear error naming the file, the line and the reason (issue 12 item 6)


def _write(tmp_path, name, text, mode="w"):
    path = tmp_path / uci.SPECS[name].file
    if mode == "wb":
        path.write_bytes(text)
    else:
        path.write_text(text)
    return tmp_path


def _lines(name, k):
    return (UCI_DIR / uci.SPECS[name].file).read_text().splitlines()[:k]


@pytest.mark.parametrize("text, match", [
    ("3.6,8.6,-2.8,-0.4,0\n4.5,8.1,-2.4,0\n", r"banknote.txt, line 2: expected 5 fields, got 4"),
    ("3.6,8.6,-2.8,-0.4,0\n4.5,8.1,abc,-1.4,1\n", r"banknote.txt, line 2, column 2: expected a number, got 'abc'"),
    ("3.6,8.6,-2.8,-0.4,0\n4.5,nan,-2.4,-1.4,1\n", r"banknote.txt, line 2, column 1: expected a number, got 'nan'"),
    ("3.6,8.6,-2.8,-0.4,0\n4.5,1e999,-2.4,-1.4,1\n", r"banknote.txt, line 2, column 1: '1e999' is not a finite"),
    ("3.6,8.6,-2.8,-0.4,0\n4.5,8.1,-2.4,-1.4,2\n", r"line 2, column 4 \(label\): '2' is not a label .*0, 1"),
    ("3.6,8.6,-2.8,-0.4,0\n\n4.5,8.1,-2.4,-1.4,1\n", r"banknote.txt, line 2: blank line between records"),
    ("\n\n", "no records"),
    ("3.6,8.6,-2.8,-0.4,0\n4.5,8.1,-2.4,-1.4,0\n", "fewer than two classes"),
])
def test_malformed_banknote_files_name_file_and_line(tmp_path, text, match):
    _write(tmp_path, "banknote", text)
    with pytest.raises(uci.DataFileError, match=match):
        uci.load_dataset("banknote", tmp_path)


def test_every_line_missing_the_last_column_is_not_a_new_label(tmp_path):
    """Finding: abalone without its rings column made shell weight the label (1156 classes)."""
    _write(tmp_path, "abalone", "\n".join(line.rsplit(",", 1)[0] for line in _lines("abalone", 50)) + "\n")
    with pytest.raises(uci.DataFileError, match=r"abalone.data, line 1: expected 9 fields, got 8"):
        uci.load_dataset("abalone", tmp_path)


def test_header_row_of_an_all_categorical_file_is_refused(tmp_path):
    """Finding: a header row in car.data became a record and a class."""
    _write(tmp_path, "car", "buying,maint,doors,persons,lug_boot,safety,class\n" + "\n".join(_lines("car", 20)) + "\n")
    with pytest.raises(uci.DataFileError, match=r"car.data, line 1, column 0: 'buying' is not a value of this "
                                                r"column \(allowed: vhigh, high, med, low\)"):
        uci.load_dataset("car", tmp_path)


def test_truncated_last_label_is_refused(tmp_path):
    """Finding: a truncated last label ('unac') became a new class."""
    lines = _lines("car", 30)
    lines[-1] = lines[-1][:-2]
    _write(tmp_path, "car", "\n".join(lines))
    with pytest.raises(uci.DataFileError, match=r"car.data, line 30, column 6 \(label\): 'una' is not a label"):
        uci.load_dataset("car", tmp_path)


@pytest.mark.parametrize("prefix, match", [
    (b"\xef\xbb\xbf", r"car.data, line 1: starts with a byte-order mark"),
    (b"", r"car.data, line 3: contains a NUL byte"),
])
def test_bom_and_nul_bytes_are_refused(tmp_path, prefix, match):
    """Finding: a BOM or NUL bytes in a categorical column added a one-hot column."""
    lines = [line.encode() for line in _lines("car", 10)]
    if not prefix:
        lines[2] = lines[2].replace(b"vhigh", b"vhigh\x00", 1)
    _write(tmp_path, "car", prefix + b"\n".join(lines) + b"\n", mode="wb")
    with pytest.raises(uci.DataFileError, match=match):
        uci.load_dataset("car", tmp_path)


def test_non_utf8_bytes_are_refused(tmp_path):
    _write(tmp_path, "car", b"vhigh,vhigh,2,2,small,low,unacc\nvhigh,vhigh,2,2,small,\xe9,unacc\n", mode="wb")
    with pytest.raises(uci.DataFileError, match=r"car.data, line 2: not UTF-8 text"):
        uci.load_dataset("car", tmp_path)


def test_a_one_megabyte_line_is_refused_in_bounded_memory(tmp_path):
    """Finding: a single 1 MB line made np.loadtxt(dtype=str) ask for 25.6 GiB; now the reader stops
    after MAX_LINE_BYTES of the line (traced peak well below the line itself)."""
    _write(tmp_path, "banknote", "3.6,8.6,-2.8,-0.4,0\n" + "1" * 2**20 + ",2,3,4,1\n")
    tracemalloc.start()
    try:
        with pytest.raises(uci.DataFileError, match=r"banknote.txt, line 2: longer than 4096 bytes"):
            uci.load_dataset("banknote", tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**19


def test_an_oversized_file_is_refused_before_reading(tmp_path):
    path = tmp_path / "chess.data"
    with open(path, "wb") as fh:
        fh.truncate(uci.MAX_FILE_BYTES + 1)  # sparse: nothing is written
    with pytest.raises(uci.DataFileError, match=r"chess.data: 16777217 bytes, more than the 16777216 allowed"):
        uci.load_dataset("chess", tmp_path)


def test_trailing_blank_lines_are_allowed_and_recorded(tmp_path):
    _write(tmp_path, "car", "\n".join(_lines("car", 5) + ["low,low,5more,more,big,high,vgood"]) + "\n\n")
    ds = uci.load_dataset("car", tmp_path)
    assert ds.X.shape[0] == 6 and not ds.ends_with_record
    assert ds.classes == ("unacc", "vgood")  # sorted as strings


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
    with pytest.raises(FileNotFoundError, match="missing wifi.txt"):
        uci.load_all(tmp_path, names=["banknote", "wifi"], require=True)
    with pytest.raises(TypeError, match="names must be a sequence of dataset names"):
        uci.load_all(tmp_path, names="banknote")


# ---------------------------------------------------------------------------
# issue 22, item 5: absent data raise the loaders' family, naming the path and what is wrong


def test_absent_data_raise_the_loaders_family_naming_path_and_reason(tmp_path):
    """A nonexistent directory, a directory or a dangling symbolic link where a data file should be,
    and a pipe (whose read would block) each raise DataNotFoundError: a DataFileError (the loaders'
    family) and a FileNotFoundError, whose message names the path and says which it is (a
    directory used to be reported as 'not found')."""
    cases = []
    with pytest.raises(uci.DataNotFoundError, match=r"UCI data directory '/nonexistent/uci' \(from uci_dir\) "
                                                    r"does not exist") as info:
        uci.load_dataset("car", uci_dir="/nonexistent/uci")
    cases.append(info.value)
    (tmp_path / "car.data").mkdir()
    with pytest.raises(uci.DataNotFoundError, match=r"car.data: data file '.*car.data' is a directory, not a data "
                                                    r"file") as info:
        uci.load_dataset("car", uci_dir=tmp_path)
    cases.append(info.value)
    (tmp_path / "wifi.txt").symlink_to(tmp_path / "gone.txt")
    with pytest.raises(uci.DataNotFoundError, match=r"wifi.txt: data file '.*wifi.txt' is a symbolic link to "
                                                    r"'.*gone.txt', which does not exist") as info:
        uci.load_dataset("wifi", uci_dir=tmp_path)
    cases.append(info.value)
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "chess.data")
        with pytest.raises(uci.DataNotFoundError, match=r"chess.data' is not a regular file"):
            uci.load_dataset("chess", uci_dir=tmp_path)
    with pytest.raises(uci.DataNotFoundError, match=r"yeast.data: data file '.*yeast.data' does not exist"):
        uci.load_dataset("yeast", uci_dir=tmp_path)
    _write(tmp_path, "banknote", "3.6,8.6,-2.8,-0.4,0\n4.5,8.1,-2.4,-1.4,1\n")
    with pytest.raises(uci.DataNotFoundError, match=r"\(from uci_dir\) is a file, not a directory"):
        uci.load_dataset("car", uci_dir=tmp_path / "banknote.txt")
    for exc in cases:
        assert isinstance(exc, uci.DataFileError) and isinstance(exc, FileNotFoundError)
    # load_all says why a present-but-unusable entry counts as missing
    with pytest.raises(uci.DataNotFoundError, match=r"missing car.data \(is a directory, not a data file\), "
                                                    r"wifi.txt \(is a symbolic link"):
        uci.load_all(tmp_path, names=["banknote", "car", "wifi"], require=True)
    with pytest.warns(UserWarning, match=r"missing car.data \(is a directory, not a data file\); running the 1"):
        data, missing = uci.load_all(tmp_path, names=["banknote", "car"])
    assert list(data) == ["banknote"] and missing == ["car"]
    # a symbolic link to a real file is read like the file
    (tmp_path / "b2").write_bytes((tmp_path / "banknote.txt").read_bytes())
    (tmp_path / "banknote.txt").unlink()
    (tmp_path / "banknote.txt").symlink_to(tmp_path / "b2")
    assert uci.load_dataset("banknote", tmp_path).X.shape == (2, 4)


# ---------------------------------------------------------------------------
# Round 2 of the experiments' Python API review: the paired IID budget, Split validation, accuracy_table's
# sigmas keys, TrainConfig validation and distinct arms, NaN-safe Fig. 8 verdicts, attention_errors' record of
# the caller's data.  Every test names the old behaviour it would have caught.


def _parts():
    r = np.random.default_rng(0)
    return r.normal(size=(40, 3)), r.integers(0, 2, 40), r.normal(size=(10, 3)), r.integers(0, 2, 10)


def test_a_valid_custom_split_works_and_integer_valued_float_labels_become_int():
    Xtr, ytr, Xte, yte = _parts()
    s = uci.Split("mine", Xtr, ytr.astype(float), Xte, yte, None, None, 2)
    assert s.y_train.dtype == np.int64 and np.array_equal(s.y_train, ytr) and s.protocol == "custom"
    est = cl.prf_accuracy(s, "simplex", 3, 4, sigma=1.0, rng=0)
    assert 0.0 <= est.mean <= 1.0 and est.n == 4


@pytest.mark.parametrize("field, change, exc, match", [
    ("X_test", "nan", ValueError, r"Split\.X_test must be finite"),
    ("y_train", "label5", ValueError, r"Split\.y_train holds class index 5 >= n_classes = 2"),
    ("y_test", "half", TypeError, r"Split\.y_test must hold integer class indices"),
    ("n_classes", "str", TypeError, r"Split\.n_classes must be an integer"),
    ("y_test", "short", ValueError, r"Split\.y_test must be a 1-D array of 10 class indices"),
    ("X_test", "narrow", ValueError, r"Split\.X_test must have shape \(N, 3\)"),
    ("X_val", "val_only", ValueError, r"Split\.X_val and Split\.y_val must both be None or both be given"),
    ("protocol", "protocol", ValueError, r"Split\.protocol must be one of 'resampled', 'paper', 'custom'"),
    ("name", "name", TypeError, r"Split\.name must be a str"),
])
def test_a_bad_split_field_is_refused_naming_it(field, change, exc, match):
    """The finding's cases: before, a NaN test input gave a number, label 5 with n_classes = 2 was accepted,
    y_test + 0.5 gave accuracy 0.0 silently, n_classes='2' was accepted and a short y_test or narrow X_test
    gave raw numpy errors."""
    Xtr, ytr, Xte, yte = _parts()
    kw = dict(name="mine", X_train=Xtr, y_train=ytr, X_test=Xte, y_test=yte, X_val=None, y_val=None, n_classes=2)
    if change == "nan":
        kw["X_test"] = Xte.copy()
        kw["X_test"][1, 1] = np.nan
    elif change == "label5":
        kw["y_train"] = ytr.copy()
        kw["y_train"][3] = 5
    elif change == "half":
        kw["y_test"] = yte + 0.5
    elif change == "str":
        kw["n_classes"] = "2"
    elif change == "short":
        kw["y_test"] = yte[:5]
    elif change == "narrow":
        kw["X_test"] = Xte[:, :2]
    elif change == "val_only":
        kw["X_val"] = Xte
    elif change == "protocol":
        kw["protocol"] = "mine"
    elif change == "name":
        kw["name"] = 3
    with pytest.raises(exc, match=match):
        uci.Split(**kw)


def test_the_package_own_splits_still_build_and_pad():
    """make_split (both protocols, with validation) and padded() construct Splits through the same check."""
    s = uci.make_split("banknote", "resampled", 0, validation=True)
    assert s.y_val is not None and s.protocol == "resampled"
    p = s.padded()
    assert p.d == 4 and p.X_val.shape[1] == 4
    assert uci.make_split("banknote", "paper").protocol == "paper"


def test_a_file_read_again_with_the_same_bytes_is_not_parsed_again(tmp_path, monkeypatch):
    """Issue 42 (main job within its promise): the figures' main job parsed each of the eight files twice (Fig. 8,
    then Fig. 10's sigma search), about 0.9 CPU-seconds of pure Python the second time; now a file whose bytes
    are unchanged gives the dataset parsed before (its arrays read-only, since every caller shares them), and a
    file rewritten with other bytes of the same size (same length, possibly the same modification time) is
    parsed again.  Power: before, every load parsed (two parses for two loads)."""
    parses = []
    read = uci._read_records
    monkeypatch.setattr(uci, "_read_records", lambda path, spec: parses.append(path) or read(path, spec))
    text = "3.6,8.6,-2.8,-0.4,0\n1.5,2.5,3.5,4.5,1\n"
    _write(tmp_path, "banknote", text)
    a = uci.load_dataset("banknote", tmp_path)
    b = uci.load_dataset("banknote", tmp_path)
    assert b is a and len(parses) == 1
    assert not a.X.flags.writeable and not a.labels.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        a.X[0, 0] = 1.0
    _write(tmp_path, "banknote", text.replace("3.6", "3.7"))
    c = uci.load_dataset("banknote", tmp_path)
    assert len(parses) == 2 and c.X[0, 0] == 3.7 and a.X[0, 0] == 3.6
