"""Tests for dtfkit.datasets (numpy only, no TensorFlow)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from itertools import islice
from pathlib import Path

import numpy as np
import pytest

from dtfkit import datasets
from dtfkit.datasets import batches, load_digits, shard

REPO = Path(__file__).resolve().parents[1]
PACKAGE_NPZ = REPO / "dtfkit" / "data" / "digits.npz"
DATASET_NPZ = REPO / "datasets" / "digits" / "digits.npz"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- the data files ---------------------------------------------------------


def test_npz_copies_are_identical_and_match_readme():
    assert PACKAGE_NPZ.is_file() and DATASET_NPZ.is_file()
    digest = _sha256(PACKAGE_NPZ)
    assert digest == _sha256(DATASET_NPZ)
    readme = (REPO / "datasets" / "digits" / "README.md").read_text(encoding="utf-8")
    assert digest in readme


def test_npz_contents():
    with np.load(PACKAGE_NPZ, allow_pickle=False) as npz:
        assert sorted(npz.files) == ["images", "labels"]
        images, labels = npz["images"], npz["labels"]
    assert images.dtype == np.uint8 and images.shape == (1797, 8, 8)
    assert labels.dtype == np.uint8 and labels.shape == (1797,)
    assert images.min() == 0 and images.max() == 16
    assert set(np.unique(labels).tolist()) == set(range(10))
    # every class is present in roughly equal numbers (174..183 in the UCI set)
    assert np.bincount(labels).min() >= 170
    assert PACKAGE_NPZ.stat().st_size < 100_000


def test_loader_reads_package_copy():
    assert datasets.digits_path().name == "digits.npz"
    assert datasets.digits_path().read_bytes() == PACKAGE_NPZ.read_bytes()


def test_import_does_not_pull_tensorflow():
    code = (
        "import sys; from dtfkit.datasets import load_digits; load_digits(); "
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'; "
        "assert 'pooch' not in sys.modules, 'pooch imported'"  # only a download or a cache check needs it
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=60)


# --- load_digits ------------------------------------------------------------


def test_load_digits_shapes_and_dtypes():
    x, y = load_digits()
    assert x.shape == (1438, 64) and x.dtype == np.float32
    assert y.shape == (1438,) and y.dtype == np.int64
    assert 0.0 <= x.min() and x.max() == 1.0
    xt, yt = load_digits(split="test")
    assert xt.shape == (359, 64) and yt.shape == (359,)
    xa, ya = load_digits(split="all", flatten=False, normalize=False)
    assert xa.shape == (1797, 8, 8) and xa.dtype == np.uint8 and ya.dtype == np.int64
    x3, _ = load_digits(flatten=False)
    assert x3.shape == (1438, 8, 8) and x3.dtype == np.float32


def test_normalize_is_divide_by_16():
    raw, y_raw = load_digits(split="test", normalize=False)
    norm, y_norm = load_digits(split="test")
    np.testing.assert_array_equal(y_raw, y_norm)
    np.testing.assert_allclose(norm, raw.astype(np.float32) / 16.0)


def _rows(x: np.ndarray, y: np.ndarray) -> list[bytes]:
    """Sorted rows of (pixels, label) as bytes: a multiset view of a dataset."""
    return sorted(map(bytes, np.column_stack([x, y]).astype(np.uint8)))


def test_split_deterministic_disjoint_and_covering():
    xa, ya = load_digits(split="all", normalize=False)
    for seed in (0, 1, 123):
        x1, y1 = load_digits(split="train", seed=seed, normalize=False)
        x2, y2 = load_digits(split="train", seed=seed, normalize=False)
        np.testing.assert_array_equal(x1, x2)
        np.testing.assert_array_equal(y1, y2)
        xt, yt = load_digits(split="test", seed=seed, normalize=False)
        # rows of train+test are a permutation of all rows (pixels+label)
        both = _rows(np.concatenate([x1, xt]), np.concatenate([y1, yt]))
        assert both == _rows(xa, ya)
    a, _ = load_digits(seed=0)
    b, _ = load_digits(seed=1)
    assert not np.array_equal(a, b)


def test_test_fraction():
    assert len(load_digits(split="test", test_fraction=0.5)[1]) == 898  # round(898.5)
    assert len(load_digits(split="train", test_fraction=0.1)[1]) == 1797 - 180


def test_returned_arrays_are_copies():
    x, y = load_digits(split="all", normalize=False, flatten=False)
    x[:] = 0
    y[:] = 0
    x2, y2 = load_digits(split="all", normalize=False, flatten=False)
    assert x2.max() == 16 and y2.max() == 9


@pytest.mark.parametrize(
    ("kwargs", "exc"),
    [
        ({"split": "validation"}, ValueError),
        ({"test_fraction": 0.0}, ValueError),
        ({"test_fraction": 1.0}, ValueError),
        ({"test_fraction": -0.1}, ValueError),
        ({"test_fraction": "0.2"}, TypeError),
        ({"seed": -1}, ValueError),
        ({"seed": 1.5}, TypeError),
    ],
)
def test_load_digits_bad_arguments(kwargs, exc):
    with pytest.raises(exc):
        load_digits(**kwargs)


def test_unknown_split_message():
    with pytest.raises(ValueError, match="unknown split 'val'"):
        load_digits(split="val")


# --- shard ------------------------------------------------------------------


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_shards_disjoint_and_covering(count):
    x, y = load_digits()
    ids = np.arange(len(y))
    seen = []
    sizes = []
    for i in range(count):
        xs, ys = shard(x, y, i, count)
        ids_s, _ = shard(ids, y, i, count)
        assert len(xs) == len(ys) == len(ids_s)
        np.testing.assert_array_equal(xs, x[ids_s])
        np.testing.assert_array_equal(ys, y[ids_s])
        seen.extend(ids_s.tolist())
        sizes.append(len(ys))
    assert sorted(seen) == ids.tolist()  # disjoint and covering
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize(
    ("index", "count", "exc", "match"),
    [
        (2, 2, ValueError, r"shard index must be in \[0, 1\]"),
        (-1, 2, ValueError, "shard index"),
        (0, 0, ValueError, "shard count must be >= 1"),
        (0, 11, ValueError, "non-empty shards"),
        (0.0, 2, TypeError, "index must be an int"),
        (True, 2, TypeError, "index must be an int"),
    ],
)
def test_shard_bad_arguments(index, count, exc, match):
    x, y = np.zeros((10, 2)), np.zeros(10)
    with pytest.raises(exc, match=match):
        shard(x, y, index, count)


def test_shard_length_mismatch():
    with pytest.raises(ValueError, match="same length"):
        shard(np.zeros((10, 2)), np.zeros(9), 0, 2)


# --- batches ----------------------------------------------------------------


def test_batches_deterministic_by_seed():
    x, y = load_digits()

    def take(seed: int) -> list[np.ndarray]:
        gen = batches(x, y, 32, seed=seed)
        return [np.concatenate([xb.ravel(), yb]) for xb, yb in islice(gen, 50)]

    a, b, c = take(3), take(3), take(4)
    assert all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))
    assert not all(np.array_equal(p, q) for p, q in zip(a, c, strict=True))


def test_batches_epoch_bounded_covers_each_epoch():
    x = np.arange(10, dtype=np.float32).reshape(10, 1)
    y = np.arange(10)
    out = list(batches(x, y, 4, seed=0, epochs=2))
    assert [len(yb) for _, yb in out] == [4, 4, 2, 4, 4, 2]
    for xb, yb in out:
        np.testing.assert_array_equal(xb[:, 0], yb)  # pairs stay aligned
    first = np.concatenate([yb for _, yb in out[:3]])
    second = np.concatenate([yb for _, yb in out[3:]])
    assert sorted(first.tolist()) == sorted(second.tolist()) == list(range(10))
    assert not np.array_equal(first, second)  # reshuffled each epoch


def test_batches_drop_remainder_and_infinite():
    x, y = np.zeros((10, 1)), np.arange(10)
    assert [len(yb) for _, yb in batches(x, y, 4, seed=0, epochs=2, drop_remainder=True)] == [
        4,
        4,
        4,
        4,
    ]
    gen = batches(x, y, 3, seed=0)  # infinite
    assert sum(len(yb) for _, yb in islice(gen, 100)) == 250  # 25 epochs of 3+3+3+1


@pytest.mark.parametrize(
    ("args", "kwargs", "exc"),
    [
        ((0,), {"seed": 0}, ValueError),
        ((-3,), {"seed": 0}, ValueError),
        ((2.0,), {"seed": 0}, TypeError),
        ((2,), {"seed": 0, "epochs": 0}, ValueError),
        ((2,), {"seed": -1}, ValueError),
        ((20,), {"seed": 0, "drop_remainder": True}, ValueError),
    ],
)
def test_batches_bad_arguments_raise_eagerly(args, kwargs, exc):
    x, y = np.zeros((10, 1)), np.arange(10)
    with pytest.raises(exc):
        batches(x, y, *args, **kwargs)  # raised at call time, before next()


def test_batches_requires_seed_and_matching_lengths():
    x, y = np.zeros((10, 1)), np.arange(10)
    with pytest.raises(TypeError):
        batches(x, y, 2)  # seed is keyword-only and required
    with pytest.raises(ValueError, match="same length"):
        batches(x, y[:5], 2, seed=0)
    with pytest.raises(ValueError, match="empty"):
        batches(x[:0], y[:0], 2, seed=0)
