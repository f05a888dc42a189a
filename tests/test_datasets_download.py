"""Tests for the downloaded data sets in dtfkit.datasets (MNIST, Fashion-MNIST), without internet.

Downloads come from a small ``http.server`` on 127.0.0.1 serving fake files (a few 28x28
images) whose sha256 is put into ``datasets.CHECKSUMS`` with monkeypatch; "offline" is a
monkeypatched ``requests.adapters.HTTPAdapter.send`` (every request pooch makes goes through it)
or a real refused/unanswered local connection.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import pickle
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import numpy as np
import pooch
import pytest
import requests

from dtfkit import datasets
from dtfkit.datasets import (
    ChecksumMismatch,
    DatasetUnavailable,
    load_fashion_mnist,
    load_mnist,
    prepare,
)
from dtfkit.errors import DtfkitError

REPO = Path(__file__).resolve().parents[1]
KERAS_MIRROR = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"
FASHION_FILES = (
    "train-labels-idx1-ubyte.gz",
    "train-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
)
N_TRAIN, N_TEST = 6, 4
LOADERS = {"mnist": load_mnist, "fashion_mnist": load_fashion_mnist}


# --- fake data --------------------------------------------------------------


def _images(n: int, seed: int) -> np.ndarray:
    images = np.random.default_rng(seed).integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    images[0, 0, 0], images[0, 0, 1] = 0, 255  # the full range, so normalising gives 0.0 and 1.0
    return images


def _labels(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 10, size=n, dtype=np.uint8)


FAKE = {
    "train": (_images(N_TRAIN, 1), _labels(N_TRAIN, 2)),
    "test": (_images(N_TEST, 3), _labels(N_TEST, 4)),
}


def _npz_bytes() -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(
        buf,
        x_train=FAKE["train"][0],
        y_train=FAKE["train"][1],
        x_test=FAKE["test"][0],
        y_test=FAKE["test"][1],
    )
    return buf.getvalue()


def _idx_gz(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape)
    return gzip.compress(header + array.tobytes(), mtime=0)


FAKE_FILES = {
    "mnist": {"mnist.npz": _npz_bytes()},
    "fashion_mnist": {
        "train-labels-idx1-ubyte.gz": _idx_gz(FAKE["train"][1]),
        "train-images-idx3-ubyte.gz": _idx_gz(FAKE["train"][0]),
        "t10k-labels-idx1-ubyte.gz": _idx_gz(FAKE["test"][1]),
        "t10k-images-idx3-ubyte.gz": _idx_gz(FAKE["test"][0]),
    },
}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


# --- fixtures and helpers ---------------------------------------------------


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch, tmp_path):
    """An empty per-process cache, $DTFKIT_DATA in tmp_path, and no proxy for 127.0.0.1."""
    monkeypatch.setattr(datasets, "_LOADED", {})
    monkeypatch.setattr(datasets, "_VERIFIED", set())
    monkeypatch.setenv("DTFKIT_DATA", str(tmp_path / "env-cache"))
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
def cache(tmp_path) -> Path:
    return tmp_path / "cache"


def use_fake_checksums(monkeypatch, name: str, files: dict[str, bytes] | None = None) -> None:
    for filename, data in (files or FAKE_FILES[name]).items():
        monkeypatch.setitem(datasets.CHECKSUMS[name], filename, _sha256(data))


def block_network(monkeypatch) -> list[str]:
    """Make every download attempt fail loudly; returns the URLs that were tried."""
    tried: list[str] = []

    def no_network(adapter, request, *args, **kwargs):
        tried.append(request.url)
        raise AssertionError(f"unexpected download of {request.url}")

    monkeypatch.setattr(requests.adapters.HTTPAdapter, "send", no_network)
    return tried


@contextmanager
def serve(files: dict[str, bytes], *, headers: dict[str, str] | None = None) -> Iterator[tuple[str, list]]:
    """Serve ``files`` (name -> bytes) over HTTP on 127.0.0.1; yields (base URL, requested paths)."""
    requested: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            requested.append(self.path)
            body = files.get(self.path.lstrip("/"))
            if body is None:
                self.send_error(404, "Not Found")
                return
            self.send_response(200)
            sent = {"Content-Type": "application/octet-stream", "Content-Length": str(len(body))}
            for key, value in {**sent, **(headers or {})}.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # keep the test output clean
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", requested
    finally:
        server.shutdown()  # returns once serve_forever has stopped
        server.server_close()
        thread.join(timeout=10)
        assert not thread.is_alive(), "the test HTTP server thread did not stop"


def _check_loaded(name: str, cache: Path) -> None:
    """Every split/flatten/normalize combination gives the fake data with the right dtypes."""
    load = LOADERS[name]
    for split, (images, labels) in FAKE.items():
        n = len(labels)
        x, y = load(split, cache_dir=cache)
        assert x.shape == (n, 784) and x.dtype == np.float32
        assert y.shape == (n,) and y.dtype == np.int64
        np.testing.assert_array_equal(y, labels)
        np.testing.assert_allclose(x, images.reshape(n, 784) / 255.0, rtol=1e-6)
        assert x.min() >= 0.0 and x.max() <= 1.0
        x3, _ = load(split, flatten=False, cache_dir=cache)
        assert x3.shape == (n, 28, 28) and x3.dtype == np.float32
        raw, _ = load(split, flatten=False, normalize=False, cache_dir=cache)
        assert raw.dtype == np.uint8
        np.testing.assert_array_equal(raw, images)


# --- the tables and paths ---------------------------------------------------


def test_checksum_table_and_urls():
    assert set(datasets.CHECKSUMS) == {"mnist", "fashion_mnist"}
    assert datasets.CHECKSUMS["mnist"] == {
        "mnist.npz": "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"  # Keras's file_hash
    }
    assert sorted(datasets.CHECKSUMS["fashion_mnist"]) == sorted(FASHION_FILES)
    for files in datasets.CHECKSUMS.values():
        for digest in files.values():
            assert len(digest) == 64 and set(digest) <= set("0123456789abcdef"), digest
    assert datasets.BASE_URLS == {"mnist": KERAS_MIRROR, "fashion_mnist": KERAS_MIRROR}


def test_checksums_listed_in_readme():
    readme = (REPO / "datasets" / "README.md").read_text(encoding="utf-8")
    for files in datasets.CHECKSUMS.values():
        for filename, digest in files.items():
            assert f"{digest}  {filename}" in readme


def test_cache_root_precedence(monkeypatch, tmp_path):
    given = tmp_path / "given"
    assert datasets.cache_root(given) == given
    assert datasets.dataset_dir("mnist", given) == given / "mnist"
    assert datasets.cache_root() == tmp_path / "env-cache"  # $DTFKIT_DATA (fresh_state)
    monkeypatch.delenv("DTFKIT_DATA")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert datasets.dataset_dir("fashion_mnist") == tmp_path / "home/.cache/dtfkit/datasets/fashion_mnist"
    assert datasets.cache_root("~/data") == tmp_path / "home/data"
    assert not (tmp_path / "home").exists()  # nothing is created


def test_bad_arguments(cache):
    with pytest.raises(ValueError, match="unknown split 'validation'"):
        load_mnist("validation", cache_dir=cache)
    with pytest.raises(ValueError, match="unknown dataset 'cifar10'"):
        prepare("cifar10", cache_dir=cache)
    assert not cache.exists()


# --- offline ----------------------------------------------------------------


# What requests raises, around the socket's error (real ones have urllib3's errors between).
OFFLINE_FAILURES = {
    "dns": requests.ConnectionError(socket.gaierror(-3, "Temporary failure in name resolution")),
    "timeout": requests.ConnectTimeout(TimeoutError("timed out")),
    "read-timeout": requests.ReadTimeout(TimeoutError("The read operation timed out")),
    "reset": requests.ConnectionError(ConnectionResetError(104, "Connection reset by peer")),
}


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist"])
@pytest.mark.parametrize("failure", sorted(OFFLINE_FAILURES))
def test_offline_raises_dataset_unavailable(monkeypatch, cache, name, failure):
    calls = []

    def offline(adapter, request, *args, timeout=None, **kwargs):
        calls.append((request.url, timeout))
        raise OFFLINE_FAILURES[failure]

    monkeypatch.setattr(requests.adapters.HTTPAdapter, "send", offline)
    with pytest.raises(DatasetUnavailable) as info:
        LOADERS[name]("train", cache_dir=cache)
    err = info.value
    assert isinstance(err, DtfkitError) and not isinstance(err, ChecksumMismatch)
    message = str(err)
    folder = cache / name
    assert str(folder) in message  # where the files would be cached
    for filename in datasets.CHECKSUMS[name]:
        assert KERAS_MIRROR + filename in message  # every exact URL
    assert "machine with internet" in message and "copy" in message
    assert "load_digits()" in message
    assert {"dns": "name resolution", "timeout": "timed out", "read-timeout": "timed out"}.get(
        failure, "reset"
    ) in message
    # one attempt, with a timeout, then give up (no point trying the other files)
    assert calls == [(KERAS_MIRROR + next(iter(datasets.CHECKSUMS[name])), datasets.DOWNLOAD_TIMEOUT)]
    assert datasets.DOWNLOAD_TIMEOUT > 0
    assert not cache.exists(), _files_under(cache)  # nothing left, not even empty folders


def test_connection_refused_is_unavailable(monkeypatch, cache):
    with socket.socket() as sock:  # bound but not listening: connecting is refused
        sock.bind(("127.0.0.1", 0))
        base = f"http://127.0.0.1:{sock.getsockname()[1]}/"
        monkeypatch.setitem(datasets.BASE_URLS, "mnist", base)
        with pytest.raises(DatasetUnavailable, match="could not reach") as info:
            load_mnist(cache_dir=cache)
    assert base + "mnist.npz" in str(info.value)
    assert not cache.exists()


def test_server_that_never_answers_times_out(monkeypatch, cache):
    with socket.socket() as sock:  # accepts connections (kernel backlog) but never replies
        sock.bind(("127.0.0.1", 0))
        sock.listen(4)
        monkeypatch.setitem(datasets.BASE_URLS, "mnist", f"http://127.0.0.1:{sock.getsockname()[1]}/")
        with pytest.raises(DatasetUnavailable, match=r"within 0\.3 s \(timed out\)"):
            prepare("mnist", cache_dir=cache, progress=False, timeout=0.3)
    assert not cache.exists()


def test_http_error_is_unavailable(monkeypatch, cache):
    use_fake_checksums(monkeypatch, "mnist")
    with serve({}) as (base, requested):
        monkeypatch.setitem(datasets.BASE_URLS, "mnist", base)
        with pytest.raises(DatasetUnavailable, match="HTTP 404"):
            load_mnist(cache_dir=cache)
    assert requested == ["/mnist.npz"]
    assert not cache.exists()


def test_offline_lists_only_the_missing_files(monkeypatch, cache):
    use_fake_checksums(monkeypatch, "fashion_mnist")
    folder = cache / "fashion_mnist"
    folder.mkdir(parents=True)
    present = FASHION_FILES[:2]
    for filename in present:
        (folder / filename).write_bytes(FAKE_FILES["fashion_mnist"][filename])
    monkeypatch.setattr(
        requests.adapters.HTTPAdapter,
        "send",
        lambda *a, **k: (_ for _ in ()).throw(requests.ConnectionError("offline")),
    )
    with pytest.raises(DatasetUnavailable) as info:
        load_fashion_mnist("test", cache_dir=cache)
    message = str(info.value)
    for filename in FASHION_FILES:
        assert ((KERAS_MIRROR + filename) in message) == (filename not in present)
    assert sorted(p.name for p in _files_under(cache)) == sorted(present)  # kept, nothing added


# --- downloading from a local server ----------------------------------------


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist"])
def test_download_verify_cache_and_load(monkeypatch, cache, capfd, name):
    use_fake_checksums(monkeypatch, name)
    with serve(FAKE_FILES[name]) as (base, requested):
        monkeypatch.setitem(datasets.BASE_URLS, name, base)
        x, y = LOADERS[name]("train", cache_dir=cache)
        assert x.shape == (N_TRAIN, 784) and x.dtype == np.float32 and y.dtype == np.int64
        _check_loaded(name, cache)  # both splits, every option
    # every file fetched exactly once, however many loads
    assert sorted(requested) == sorted("/" + f for f in FAKE_FILES[name])
    assert capfd.readouterr().err.count("100%|") == len(FAKE_FILES[name])  # a full progress bar each

    folder = cache / name
    cached = _files_under(cache)
    assert [p.name for p in cached] == sorted(FAKE_FILES[name])  # no temporary files left
    for path in cached:
        assert path.parent == folder
        assert path.read_bytes() == FAKE_FILES[name][path.name]

    # the server is gone: a fresh process state loads from the cache without any network
    tried = block_network(monkeypatch)
    monkeypatch.setattr(datasets, "_LOADED", {})
    monkeypatch.setattr(datasets, "_VERIFIED", set())
    _check_loaded(name, cache)
    assert prepare(name, cache_dir=cache) == folder
    assert tried == []


def test_cached_files_are_checked_and_read_once_per_process(monkeypatch, cache):
    use_fake_checksums(monkeypatch, "mnist")
    with serve(FAKE_FILES["mnist"]) as (base, _):
        monkeypatch.setitem(datasets.BASE_URLS, "mnist", base)
        prepare("mnist", cache_dir=cache, progress=False)
    block_network(monkeypatch)
    monkeypatch.setattr(datasets, "_VERIFIED", set())
    hashed = []
    real_file_hash = pooch.file_hash
    monkeypatch.setattr(pooch, "file_hash", lambda p, **k: hashed.append(Path(p)) or real_file_hash(p, **k))

    x1, y1 = load_mnist("test", flatten=False, normalize=False, cache_dir=cache)
    assert hashed == [cache / "mnist" / "mnist.npz"]  # checked once ...
    load_mnist("train", cache_dir=cache)
    assert len(hashed) == 1  # ... not again for the other split
    (cache / "mnist" / "mnist.npz").unlink()
    x1[:] = 0  # the arrays returned are copies
    y1[:] = 0
    x2, y2 = load_mnist("test", flatten=False, normalize=False, cache_dir=cache)  # from memory
    np.testing.assert_array_equal(x2, FAKE["test"][0])
    np.testing.assert_array_equal(y2, FAKE["test"][1])


def test_pre_seeded_cache_works_offline_in_a_new_process(tmp_path):
    """Copy the files into $DTFKIT_DATA/<name>/ by hand; a new process loads them, no network."""
    root = tmp_path / "seeded"
    for name, files in FAKE_FILES.items():
        (root / name).mkdir(parents=True)
        for filename, data in files.items():
            (root / name / filename).write_bytes(data)
    sums = {name: {f: _sha256(d) for f, d in files.items()} for name, files in FAKE_FILES.items()}
    code = (
        "import json, sys, requests\n"
        "def offline(*a, **k): raise AssertionError('network used')\n"
        "requests.adapters.HTTPAdapter.send = offline\n"
        "from dtfkit import datasets\n"
        f"for name, files in {sums!r}.items(): datasets.CHECKSUMS[name].update(files)\n"
        "out = {}\n"
        "for load in (datasets.load_mnist, datasets.load_fashion_mnist):\n"
        "    for split in ('train', 'test'):\n"
        "        x, y = load(split)\n"
        "        out[f'{load.__name__}/{split}'] = [list(x.shape), str(x.dtype), list(y.shape), str(y.dtype)]\n"
        "print(json.dumps(out))\n"
    )
    env = dict(os.environ, DTFKIT_DATA=str(root))
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    expected = {
        f"{load}/{split}": [[n, 784], "float32", [n], "int64"]
        for load in ("load_mnist", "load_fashion_mnist")
        for split, n in (("train", N_TRAIN), ("test", N_TEST))
    }
    assert json.loads(proc.stdout) == expected


# --- bad files --------------------------------------------------------------


def test_corrupted_download_is_deleted(monkeypatch, cache):
    use_fake_checksums(monkeypatch, "mnist")
    expected = datasets.CHECKSUMS["mnist"]["mnist.npz"]
    corrupted = bytearray(FAKE_FILES["mnist"]["mnist.npz"])
    corrupted[100] ^= 0xFF
    with serve({"mnist.npz": bytes(corrupted)}) as (base, requested):
        monkeypatch.setitem(datasets.BASE_URLS, "mnist", base)
        with pytest.raises(ChecksumMismatch) as info:
            load_mnist(cache_dir=cache)
    err = info.value
    assert isinstance(err, DatasetUnavailable)
    assert (err.expected, err.actual) == (expected, _sha256(bytes(corrupted)))
    assert err.url == base + "mnist.npz" and err.path == cache / "mnist" / "mnist.npz"
    message = str(err)
    assert "mnist.npz" in message and expected in message and err.actual in message
    assert "CHECKSUMS['mnist']['mnist.npz']" in message  # where to correct it
    assert requested == ["/mnist.npz"]
    assert _files_under(cache) == []  # the partial file is gone
    assert datasets._LOADED == {}
    copy = pickle.loads(pickle.dumps(err))  # it can travel from a task to the driver
    assert type(copy) is ChecksumMismatch and str(copy) == message
    assert (copy.path, copy.url, copy.expected, copy.actual) == (err.path, err.url, err.expected, err.actual)


def test_corrupted_download_keeps_the_good_files(monkeypatch, cache):
    use_fake_checksums(monkeypatch, "fashion_mnist")
    files = dict(FAKE_FILES["fashion_mnist"])
    files["t10k-labels-idx1-ubyte.gz"] = b"not the file"
    with serve(files) as (base, requested):
        monkeypatch.setitem(datasets.BASE_URLS, "fashion_mnist", base)
        with pytest.raises(ChecksumMismatch, match="t10k-labels-idx1-ubyte.gz"):
            prepare("fashion_mnist", cache_dir=cache, progress=False)
    assert requested == ["/" + f for f in FASHION_FILES[:3]]  # stops at the bad one
    assert [p.name for p in _files_under(cache)] == sorted(FASHION_FILES[:2])


def test_truncated_download_is_unavailable(monkeypatch, cache):
    data = FAKE_FILES["mnist"]["mnist.npz"]
    use_fake_checksums(monkeypatch, "mnist")
    # announce more bytes than are sent: the connection closes early
    with serve({"mnist.npz": data}, headers={"Content-Length": str(len(data) + 1000)}) as (base, _):
        monkeypatch.setitem(datasets.BASE_URLS, "mnist", base)
        with pytest.raises(DatasetUnavailable, match=r"closed after [\d,]+ of [\d,]+ bytes") as info:
            prepare("mnist", cache_dir=cache, progress=False)
    assert not isinstance(info.value, ChecksumMismatch)
    assert not cache.exists()


def test_corrupted_cached_file_is_reported_not_deleted(monkeypatch, cache):
    use_fake_checksums(monkeypatch, "mnist")
    path = cache / "mnist" / "mnist.npz"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"a truncated copy")
    tried = block_network(monkeypatch)
    with pytest.raises(ChecksumMismatch) as info:
        load_mnist(cache_dir=cache)
    message = str(info.value)
    assert str(path) in message and "Delete it" in message
    assert datasets.CHECKSUMS["mnist"]["mnist.npz"] in message and _sha256(b"a truncated copy") in message
    assert path.read_bytes() == b"a truncated copy"  # the user's file is left alone
    assert tried == []


def test_invalid_idx_file_is_reported(monkeypatch, cache):
    files = dict(FAKE_FILES["fashion_mnist"])
    files["train-images-idx3-ubyte.gz"] = gzip.compress(b"\x00\x00\x08\x01" + b"\x00" * 8)
    use_fake_checksums(monkeypatch, "fashion_mnist", files)
    folder = cache / "fashion_mnist"
    folder.mkdir(parents=True)
    for filename, data in files.items():
        (folder / filename).write_bytes(data)
    with pytest.raises(DatasetUnavailable, match="not an IDX file"):
        load_fashion_mnist(cache_dir=cache)
