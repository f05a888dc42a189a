"""Offline datasets for dtfkit: the UCI 8x8 handwritten digits.

Nothing here imports TensorFlow or touches the network: the data ships inside
the package (``dtfkit/data/digits.npz``, 1,797 images of 8x8 pixels with values
0..16, extracted once from scikit-learn's bundled copy of the UCI "Optical
Recognition of Handwritten Digits" data set, E. Alpaydin & C. Kaynak, CC BY 4.0,
https://doi.org/10.24432/C50P49). See ``datasets/digits/README.md``.

Typical use in a data-parallel worker:

>>> from dtfkit.datasets import load_digits, shard, batches
>>> x, y = load_digits(split="train")
>>> x.shape, x.dtype, y.dtype
((1438, 64), dtype('float32'), dtype('int64'))
>>> xs, ys = shard(x, y, index=1, count=2)  # this worker's half
>>> xb, yb = next(batches(xs, ys, 32, seed=1))
>>> xb.shape, yb.shape
((32, 64), (32,))
"""

from __future__ import annotations

import functools
import io
from collections.abc import Iterator
from importlib import resources

import numpy as np

__all__ = [
    "DIGITS_NUM_CLASSES",
    "DIGITS_NUM_EXAMPLES",
    "batches",
    "digits_path",
    "load_digits",
    "shard",
]

DIGITS_NUM_EXAMPLES = 1797
DIGITS_NUM_CLASSES = 10
_SPLITS = ("train", "test", "all")


def digits_path():
    """Return the packaged ``digits.npz`` as an ``importlib.resources`` Traversable.

    >>> digits_path().name
    'digits.npz'
    """
    return resources.files(__package__ or "dtfkit").joinpath("data").joinpath("digits.npz")


@functools.lru_cache(maxsize=1)
def _raw_digits() -> tuple[np.ndarray, np.ndarray]:
    """Read the packaged npz once; returns read-only (images uint8, labels uint8)."""
    data = digits_path().read_bytes()
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        images = npz["images"]
        labels = npz["labels"]
    images.setflags(write=False)
    labels.setflags(write=False)
    return images, labels


def _check_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}: {value!r}")
    return int(value)


def _check_xy(x: np.ndarray, y: np.ndarray) -> None:
    if len(x) != len(y):
        raise ValueError(f"x and y must have the same length, got len(x)={len(x)} and len(y)={len(y)}")


def load_digits(
    *,
    split: str = "train",
    test_fraction: float = 0.2,
    seed: int = 0,
    flatten: bool = True,
    normalize: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Load the 8x8 handwritten digits as ``(features, labels)``.

    The train/test split is a random permutation of the 1,797 examples drawn
    from ``numpy.random.default_rng(seed)``: the same ``seed`` and
    ``test_fraction`` always give the same split, and ``train`` and ``test``
    are disjoint and together cover every example (``split="all"`` returns
    every example in file order).

    Features are float32 in [0, 1] (pixel / 16) when ``normalize`` is true,
    otherwise the raw uint8 values 0..16; shape ``(n, 64)`` when ``flatten``
    is true, else ``(n, 8, 8)``. Labels are int64 in 0..9. The arrays returned
    are fresh copies, safe to modify.

    >>> x_train, y_train = load_digits()
    >>> x_test, y_test = load_digits(split="test")
    >>> len(x_train) + len(x_test)
    1797
    >>> x_train.shape, float(x_train.max()), y_train.dtype
    ((1438, 64), 1.0, dtype('int64'))
    >>> load_digits(split="all", flatten=False, normalize=False)[0].shape
    (1797, 8, 8)
    """
    if split not in _SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(_SPLITS)}")
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float, np.floating)):
        raise TypeError(f"test_fraction must be a float, got {test_fraction!r}")
    if not 0.0 < float(test_fraction) < 1.0:
        raise ValueError(f"test_fraction must be strictly between 0 and 1, got {test_fraction!r}")
    seed = _check_int("seed", seed)
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")

    images, labels = _raw_digits()
    n = len(labels)
    if split == "all":
        idx = np.arange(n)
    else:
        n_test = round(n * float(test_fraction))
        n_test = min(max(n_test, 1), n - 1)
        perm = np.random.default_rng(seed).permutation(n)
        idx = perm[:n_test] if split == "test" else perm[n_test:]

    x = images[idx]  # fancy indexing copies
    if normalize:
        x = x.astype(np.float32) / np.float32(16.0)
    if flatten:
        x = x.reshape(len(idx), -1)
    return x, labels[idx].astype(np.int64)


def shard(x: np.ndarray, y: np.ndarray, index: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Return the ``index``-th of ``count`` disjoint shards of ``(x, y)``.

    Shard ``i`` holds the examples ``i, i + count, i + 2 * count, ...``
    (strided), so the ``count`` shards are disjoint, together cover every
    example, and their sizes differ by at most one. Use it for explicit data
    sharding across workers: ``shard(x, y, task_index, num_workers)``.

    >>> import numpy as np
    >>> x, y = np.arange(10).reshape(5, 2), np.arange(5)
    >>> shard(x, y, 0, 2)[1], shard(x, y, 1, 2)[1]
    (array([0, 2, 4]), array([1, 3]))
    """
    index = _check_int("index", index)
    count = _check_int("count", count)
    _check_xy(x, y)
    if count < 1:
        raise ValueError(f"shard count must be >= 1, got {count}")
    if not 0 <= index < count:
        raise ValueError(f"shard index must be in [0, {count - 1}] for count={count}, got {index}")
    if count > len(x):
        raise ValueError(f"cannot split {len(x)} examples into {count} non-empty shards (count > len(x))")
    return x[index::count], y[index::count]


def batches(
    x: np.ndarray,
    y: np.ndarray,
    batch_size: int,
    *,
    seed: int,
    epochs: int | None = None,
    drop_remainder: bool = False,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield shuffled ``(xb, yb)`` batches, reshuffled every epoch.

    Infinite when ``epochs`` is None, otherwise stops after ``epochs`` full
    passes. The order is fully determined by ``seed``. The last batch of an
    epoch is smaller when ``len(x)`` is not a multiple of ``batch_size``,
    unless ``drop_remainder`` is true. Arguments are checked when this is
    called, not at the first ``next()``.

    >>> import numpy as np
    >>> x, y = np.zeros((10, 3), np.float32), np.arange(10)
    >>> [len(yb) for _, yb in batches(x, y, 4, seed=0, epochs=1)]
    [4, 4, 2]
    >>> a = next(batches(x, y, 4, seed=7))[1]
    >>> b = next(batches(x, y, 4, seed=7))[1]
    >>> bool((a == b).all())
    True
    """
    batch_size = _check_int("batch_size", batch_size)
    seed = _check_int("seed", seed)
    _check_xy(x, y)
    if batch_size <= 0:
        raise ValueError(f"batch_size must be > 0, got {batch_size}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    if epochs is not None:
        epochs = _check_int("epochs", epochs)
        if epochs <= 0:
            raise ValueError(f"epochs must be None (infinite) or > 0, got {epochs}")
    if len(x) == 0:
        raise ValueError("cannot batch an empty dataset")
    if drop_remainder and batch_size > len(x):
        raise ValueError(
            f"batch_size={batch_size} > {len(x)} examples with drop_remainder=True would yield nothing"
        )
    return _batch_iter(x, y, batch_size, seed, epochs, drop_remainder)


def _batch_iter(
    x: np.ndarray,
    y: np.ndarray,
    batch_size: int,
    seed: int,
    epochs: int | None,
    drop_remainder: bool,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    n = len(x)
    stop = n - batch_size + 1 if drop_remainder else n
    epoch = 0
    while epochs is None or epoch < epochs:
        perm = rng.permutation(n)
        for start in range(0, stop, batch_size):
            idx = perm[start : start + batch_size]
            yield x[idx], y[idx]
        epoch += 1
