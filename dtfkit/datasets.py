"""Datasets for dtfkit: the UCI 8x8 digits (shipped), MNIST and Fashion-MNIST (downloaded).

Nothing here imports TensorFlow. ``load_digits`` never touches the network: the data ships inside
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

``load_mnist`` and ``load_fashion_mnist`` download their files on first use (with pooch,
checked against the sha256 in ``CHECKSUMS``) into a cache folder (``dataset_dir``), then read
them from there with no network at all (pooch is only imported to download or check a file).
Offline, they raise ``DatasetUnavailable`` saying which files to copy where; see ``datasets/README.md``.
"""

from __future__ import annotations

import functools
import gzip
import io
import os
import re
import threading
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import numpy as np

from dtfkit.errors import DtfkitError

__all__ = [
    "BASE_URLS",
    "CHECKSUMS",
    "DIGITS_NUM_CLASSES",
    "DIGITS_NUM_EXAMPLES",
    "ChecksumMismatch",
    "DatasetUnavailable",
    "batches",
    "cache_root",
    "dataset_dir",
    "digits_path",
    "load_digits",
    "load_fashion_mnist",
    "load_mnist",
    "prepare",
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
    return resources.files("dtfkit").joinpath("data").joinpath("digits.npz")


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


# --- downloaded data sets: MNIST and Fashion-MNIST (pooch, https://www.fatiando.org/pooch) ----------
# The cache never holds a partial or unverified file (see ``_download``). Loaded arrays are kept per
# process in ``_LOADED``: each task of a cluster reads (and checks) the files once.

_KERAS_MIRROR = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"

#: Where each data set's files come from: the URL of a file is ``BASE_URLS[name] + file name``
#: (the mirrors that ``keras.datasets`` uses).
BASE_URLS: dict[str, str] = {
    "mnist": _KERAS_MIRROR,
    "fashion_mnist": _KERAS_MIRROR,
}

#: The sha256 of every file, by data set and file name. A download whose hash differs is
#: deleted, and a file in the cache whose hash differs is refused. Correct an entry here if
#: a mirror ever changes a file (check the new file first).
CHECKSUMS: dict[str, dict[str, str]] = {
    "mnist": {
        # The file_hash in keras.datasets.mnist.load_data(); 11,490,434 bytes.
        "mnist.npz": "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1",
    },
    "fashion_mnist": {
        # Keras gives no hashes for these. These are the sha256 of Zalando Research's
        # original files (the same in TensorFlow Datasets' checksums); the official MD5s
        # from github.com/zalandoresearch/fashion-mnist and the sizes are in the comments.
        # md5 25c81989df183df01b3e8a0aad5dffbe, 29,515 bytes
        "train-labels-idx1-ubyte.gz": "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
        # md5 8d4fb7e6c68d591d4c3dfef9ec88bf0d, 26,421,880 bytes
        "train-images-idx3-ubyte.gz": "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
        # md5 bb300cfdad3c16e7a12a480ee83cd310, 5,148 bytes
        "t10k-labels-idx1-ubyte.gz": "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
        # md5 bef4ecab320f06d8554ea6380940ec79, 4,422,102 bytes
        "t10k-images-idx3-ubyte.gz": "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
    },
}

#: Seconds a download waits for the server (to connect, and for each read) before giving up.
DOWNLOAD_TIMEOUT = 30.0

_DATA_ENV = "DTFKIT_DATA"
_TITLES = {"mnist": "MNIST", "fashion_mnist": "Fashion-MNIST"}
_LOAD_SPLITS = ("train", "test")
_IMAGE_SHAPE = (28, 28)
_CHUNK = 1 << 16  # bytes per read (and progress bar step) of a download

_LOCK = threading.RLock()
# (name, folder, split) -> read-only (images uint8 (n, 28, 28), labels uint8 (n,))
_LOADED: dict[tuple[str, str, str], tuple[np.ndarray, np.ndarray]] = {}
# (path, size, mtime_ns) of the files whose sha256 this process has checked
_VERIFIED: set[tuple[str, int, int]] = set()


class DatasetUnavailable(DtfkitError):
    """A data set is not in the cache and could not be downloaded, or its files are unusable.

    The message says what failed, where the files would be cached, their URLs, and how to
    get them there without network access (or to use ``load_digits()``, which ships with
    dtfkit).
    """


class ChecksumMismatch(DatasetUnavailable):
    """A downloaded or cached file does not have the sha256 listed in ``CHECKSUMS``.

    Attributes:
        path: the file in the cache (for a download: where it would have been saved).
        url: where the file is downloaded from.
        expected: the sha256 in ``CHECKSUMS``.
        actual: the sha256 of the bytes received or found.
    """

    # The keywords have defaults so that pickle (which calls ``cls(message)`` and then restores
    # the attributes) can carry this error from a task back to the driver.
    def __init__(
        self,
        message: str,
        *,
        path: Path | None = None,
        url: str = "",
        expected: str = "",
        actual: str = "",
    ):
        super().__init__(message)
        self.path = path
        self.url = url
        self.expected = expected
        self.actual = actual


def _check_name(name: str) -> str:
    if name not in CHECKSUMS:
        raise ValueError(f"unknown dataset {name!r}; expected one of {', '.join(CHECKSUMS)}")
    return name


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The folder that holds the downloaded data sets, one subfolder each.

    ``cache_dir`` if given, else ``$DTFKIT_DATA`` if set, else ``~/.cache/dtfkit/datasets``.
    Nothing is created.

    >>> cache_root("/data/dtfkit").as_posix()
    '/data/dtfkit'
    """
    if cache_dir is not None:
        root = Path(cache_dir)
    elif os.environ.get(_DATA_ENV):
        root = Path(os.environ[_DATA_ENV])
    else:
        root = Path.home() / ".cache" / "dtfkit" / "datasets"
    return root.expanduser().absolute()


def dataset_dir(name: str, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The folder where data set ``name``'s files are (or would be) cached; nothing is created.

    Copy the files listed in ``CHECKSUMS[name]`` there to use the data set offline.

    >>> dataset_dir("fashion_mnist", "/data/dtfkit").as_posix()
    '/data/dtfkit/fashion_mnist'
    """
    return cache_root(cache_dir) / _check_name(name)


def prepare(
    name: str,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
    timeout: float | None = None,
) -> Path:
    """Make sure every file of data set ``name`` is in the cache; return its folder.

    Files already there are checked against ``CHECKSUMS`` (once per process) and never
    downloaded again, so this works with no network once the cache is populated. Missing
    files are downloaded by pooch from ``BASE_URLS[name]``, with a tqdm progress bar
    (``progress``), giving up after ``timeout`` seconds (default ``DOWNLOAD_TIMEOUT``)
    without an answer. Run it once on the machine (e.g. before starting a cluster) so that
    the tasks only read the cache.

    Raises:
        DatasetUnavailable: a file could not be downloaded (no network, DNS failure,
            timeout, HTTP error, connection cut); nothing partial is left in the cache.
        ChecksumMismatch: a downloaded file (deleted) or a cached file (kept) has the
            wrong sha256.

    >>> prepare("mnist")  # doctest: +SKIP
    PosixPath('/home/me/.cache/dtfkit/datasets/mnist')
    """
    folder = dataset_dir(name, cache_dir)
    timeout = DOWNLOAD_TIMEOUT if timeout is None else float(timeout)
    with _LOCK:
        files = CHECKSUMS[name]
        missing = [f for f in files if not (folder / f).is_file()]
        for filename, expected in files.items():
            if filename not in missing:
                _verify_cached(name, folder / filename, expected)
        if missing:
            created = [p for p in (folder, *folder.parents) if not p.exists()]
            try:
                for i in range(len(missing)):
                    _download(name, folder, missing[i:], progress=progress, timeout=timeout)
            except BaseException:
                for p in created:  # innermost first; only folders this call made, if empty
                    try:
                        p.rmdir()
                    except OSError:
                        break
                raise
    return folder


def _verify_cached(name: str, path: Path, expected: str) -> None:
    # Checked here, not left to pooch: pooch would download a file whose hash differs again,
    # over the user's copy, where dtfkit reports it and leaves it alone.
    import pooch  # imported only when needed: every task imports this module at start-up

    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key in _VERIFIED:
        return
    actual = pooch.file_hash(str(path), alg="sha256")
    if actual != expected:
        url = BASE_URLS[name] + path.name
        raise ChecksumMismatch(
            f"the cached file {path} is not the expected {_TITLES[name]} file {path.name}: "
            f"its sha256 is {actual}, expected {expected}. Delete it (it is downloaded again "
            f"on the next load) or replace it with an unchanged copy of {url}",
            path=path,
            url=url,
            expected=expected,
            actual=actual,
        )
    _VERIFIED.add(key)


def _download(name: str, folder: Path, missing: list[str], *, progress: bool, timeout: float) -> None:
    """Download ``missing[0]`` into ``folder`` (the rest are named if it fails).

    pooch streams it to a temporary file in ``folder``, checks its sha256 and only then
    renames it into place; it deletes the temporary file whatever happens.
    """
    import pooch
    import requests

    filename = missing[0]
    url = BASE_URLS[name] + filename
    expected = CHECKSUMS[name][filename]
    downloader = pooch.HTTPDownloader(progressbar=progress, chunk_size=_CHUNK, timeout=timeout)
    try:
        pooch.retrieve(url, f"sha256:{expected}", fname=filename, path=folder, downloader=downloader)
    except (requests.RequestException, ConnectionError, TimeoutError) as exc:
        cause = _describe_failure(exc, url, timeout)
        raise DatasetUnavailable(_offline_message(name, folder, missing, cause)) from exc
    except ValueError as exc:
        # pooch's hash check: "SHA256 hash of downloaded file (...) does not match the known
        # hash: expected sha256:<hex> but got <hex>. Deleted download for safety. ..."
        got = re.search(r"but got ([0-9a-fA-F]{64})", str(exc))
        if got is None:
            raise
        actual = got.group(1).lower()
        raise ChecksumMismatch(
            f"{filename} downloaded from {url} is not the expected {_TITLES[name]} file: "
            f"its sha256 is {actual}, expected {expected}. The download was deleted and "
            f"nothing was cached. Try again; if it happens again, the file on the mirror "
            f"differs: check it and, if it is genuine, correct "
            f"CHECKSUMS[{name!r}][{filename!r}] in dtfkit/datasets.py",
            path=folder / filename,
            url=url,
            expected=expected,
            actual=actual,
        ) from exc
    st = (folder / filename).stat()
    _VERIFIED.add((str(folder / filename), st.st_size, st.st_mtime_ns))


def _describe_failure(exc: BaseException, url: str, timeout: float) -> str:
    """One line for a failed download, from requests' error and the ones it wraps."""
    import requests
    import urllib3

    if isinstance(exc, requests.HTTPError) and exc.response is not None:
        return f"the server answered HTTP {exc.response.status_code} {exc.response.reason} for {url}"
    chain = [exc]  # requests wraps urllib3's errors, which wrap the socket's (or name the cause)
    while (inner := _inner_error(chain[-1])) is not None and inner not in chain:
        chain.append(inner)
    root = chain[-1]
    if isinstance(root, urllib3.exceptions.IncompleteRead):  # the body was cut short
        return f"the connection closed after {root.partial:,} of {root.partial + root.expected:,} bytes from {url}"
    if any(isinstance(e, (TimeoutError, requests.Timeout)) for e in chain):
        return f"no answer from {url} within {timeout:g} s (timed out)"
    if isinstance(exc, requests.ConnectionError):
        return f"could not reach {url}: {root}"
    return f"the download from {url} failed: {type(root).__name__}: {root}"


def _inner_error(exc: BaseException) -> BaseException | None:
    for inner in (exc.__cause__, getattr(exc, "reason", None), *exc.args):
        if isinstance(inner, BaseException):
            return inner
    return None


def _offline_message(name: str, folder: Path, missing: list[str], cause: str) -> str:
    title = _TITLES[name]
    urls = "\n".join(f"    {BASE_URLS[name]}{f}" for f in missing)
    these = "this file" if len(missing) == 1 else f"these {len(missing)} files"
    return (
        f"{title} is not in the cache and could not be downloaded: {cause}.\n"
        f"It would be cached in {folder} (missing: {', '.join(missing)}).\n"
        f"To use {title} without network access, download {these} on a machine with internet:\n"
        f"{urls}\n"
        f"and copy them, unchanged (still compressed), into {folder}/ on this machine "
        f"(or into a {name}/ subfolder of the folder given by cache_dir= or ${_DATA_ENV}); "
        f"dtfkit checks their sha256 when it loads them. See datasets/README.md.\n"
        f"Or use dtfkit.datasets.load_digits(), which ships with dtfkit and needs no download."
    )


def _bad_file(path: Path, problem: str) -> DatasetUnavailable:
    return DatasetUnavailable(f"{path} is not a usable data file: {problem}. Delete it and load again.")


def _check_images(path: Path, images: np.ndarray, labels: np.ndarray) -> None:
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != _IMAGE_SHAPE:
        raise _bad_file(path, f"images are {images.dtype} {images.shape}, expected uint8 (n, 28, 28)")
    if labels.dtype != np.uint8 or labels.shape != (len(images),):
        raise _bad_file(path, f"labels are {labels.dtype} {labels.shape}, expected uint8 ({len(images)},)")


def _read_mnist(folder: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    path = folder / "mnist.npz"
    try:
        with np.load(path, allow_pickle=False) as npz:
            images, labels = npz[f"x_{split}"], npz[f"y_{split}"]
    except (KeyError, ValueError, OSError) as exc:
        raise _bad_file(path, f"{type(exc).__name__}: {exc}") from exc
    _check_images(path, images, labels)
    return images, labels


def _read_idx(path: Path, ndim: int) -> np.ndarray:
    """An IDX array of unsigned bytes (type code 0x08) from a gzip file, without copying."""
    try:
        with gzip.open(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as exc:
        raise _bad_file(path, f"{type(exc).__name__}: {exc}") from exc
    header = 4 + 4 * ndim
    if len(data) < header or data[:4] != bytes([0, 0, 0x08, ndim]):
        raise _bad_file(path, f"not an IDX file of {ndim}-d unsigned bytes (header {data[:4].hex()})")
    dims = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    if len(data) - header != int(np.prod(dims)):
        raise _bad_file(path, f"{len(data) - header} bytes of data for shape {dims}")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def _read_fashion_mnist(folder: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    prefix = "train" if split == "train" else "t10k"
    path = folder / f"{prefix}-images-idx3-ubyte.gz"
    images = _read_idx(path, 3)
    labels = _read_idx(folder / f"{prefix}-labels-idx1-ubyte.gz", 1)
    _check_images(path, images, labels)
    return images, labels


_READERS = {"mnist": _read_mnist, "fashion_mnist": _read_fashion_mnist}


def _load_28x28(
    name: str,
    split: str,
    flatten: bool,
    normalize: bool,
    cache_dir: str | os.PathLike[str] | None,
) -> tuple[np.ndarray, np.ndarray]:
    if split not in _LOAD_SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(_LOAD_SPLITS)}")
    folder = dataset_dir(name, cache_dir)
    key = (name, str(folder), split)
    with _LOCK:
        raw = _LOADED.get(key)
        if raw is None:
            prepare(name, cache_dir=cache_dir)
            images, labels = _READERS[name](folder, split)
            images.setflags(write=False)
            labels.setflags(write=False)
            raw = _LOADED[key] = (images, labels)
    images, labels = raw
    if normalize:
        x = images.astype(np.float32)
        np.divide(x, np.float32(255.0), out=x)
    else:
        x = images.copy()
    if flatten:
        x = x.reshape(len(x), -1)
    return x, labels.astype(np.int64)


def load_mnist(
    split: str = "train",
    *,
    flatten: bool = True,
    normalize: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Load MNIST (28x28 handwritten digits, 60,000 train + 10,000 test) as ``(x, y)``.

    Downloads ``mnist.npz`` (11 MB) on first use into ``dataset_dir("mnist", cache_dir)``
    and reads it from there afterwards, with no network (see ``prepare``). Features are
    float32 in [0, 1] (pixel / 255) when ``normalize`` is true, else the raw uint8 0..255;
    shape ``(n, 784)`` when ``flatten`` is true, else ``(n, 28, 28)``. Labels are int64
    0..9. The files are read once per process; the arrays returned are fresh copies.

    Raises ``DatasetUnavailable`` when the file is not cached and cannot be downloaded;
    its message says which file to copy where (``load_digits()`` needs no download).

    >>> x, y = load_mnist()  # doctest: +SKIP
    >>> x.shape, x.dtype, y.shape, y.dtype  # doctest: +SKIP
    ((60000, 784), dtype('float32'), (60000,), dtype('int64'))
    """
    return _load_28x28("mnist", split, flatten, normalize, cache_dir)


def load_fashion_mnist(
    split: str = "train",
    *,
    flatten: bool = True,
    normalize: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Load Fashion-MNIST (28x28 clothing images, 10 classes, 60,000 + 10,000) as ``(x, y)``.

    Downloads the four gzip IDX files (30 MB) on first use into
    ``dataset_dir("fashion_mnist", cache_dir)``; otherwise exactly like ``load_mnist``.
    Labels: 0 T-shirt/top, 1 trouser, 2 pullover, 3 dress, 4 coat, 5 sandal, 6 shirt,
    7 sneaker, 8 bag, 9 ankle boot.

    >>> x, y = load_fashion_mnist("test", flatten=False)  # doctest: +SKIP
    >>> x.shape, y.shape  # doctest: +SKIP
    ((10000, 28, 28), (10000,))
    """
    return _load_28x28("fashion_mnist", split, flatten, normalize, cache_dir)
