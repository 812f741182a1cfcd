"""Indexing decodes only what is asked and gives exactly what numpy gives
on the dense array: 300 random expressions over files of every codec and
both pack profiles, read() with its regions, scan_indices and out=."""
import numpy as np
import pytest

import qem


def random_axis(rng, n):
    kind = rng.integers(0, 5)
    if kind == 0:
        return int(rng.integers(-n, n))
    if kind == 1:
        return slice(None)
    start = int(rng.integers(-n - 2, n + 2)) if rng.random() < 0.8 else None
    stop = int(rng.integers(-n - 2, n + 2)) if rng.random() < 0.8 else None
    step = None if kind == 2 else int(rng.choice([-3, -2, -1, 1, 2, 3, 5]))
    return slice(start, stop, step)


def random_key(rng, shape):
    axes = [random_axis(rng, n) for n in shape]
    form = rng.integers(0, 4)
    if form == 0:
        return tuple(axes)
    if form == 1:  # leading axes only
        k = int(rng.integers(1, 4))
        return tuple(axes[:k]) if k > 1 else axes[0]
    if form == 2:  # an ellipsis before detector axes
        return (Ellipsis,) + tuple(axes[2:])
    return (axes[0], Ellipsis, axes[3])


def test_300_random_index_expressions(generated):
    rng = np.random.default_rng(20261201)
    names = sorted(generated)
    checked = 0
    for name in names:
        path, dense = generated[name]
        with qem.open(path) as f:
            assert f.shape == dense.shape and f.dtype == dense.dtype
            for _ in range(60):
                key = random_key(rng, dense.shape)
                want = dense[key]
                got = f[key]
                assert got.shape == want.shape, (name, key)
                assert got.dtype == want.dtype
                assert got.tobytes() == np.ascontiguousarray(want).tobytes(), (name, key)
                checked += 1
    assert checked == 300


def test_scan_indices_any_order(generated):
    path, dense = generated["u16"]
    flat = dense.reshape(-1, *dense.shape[2:])
    rng = np.random.default_rng(7)
    with qem.open(path) as f:
        for _ in range(20):
            idx = rng.integers(-flat.shape[0], flat.shape[0], size=int(rng.integers(1, 40)))
            np.testing.assert_array_equal(f.read(scan_indices=idx), flat[idx])
            np.testing.assert_array_equal(
                f.read(scan_indices=idx, detector_region=(2, 9, 1, 4)), flat[idx, 2:9, 1:4])
        assert f.read(scan_indices=[]).shape == (0,) + dense.shape[2:]


def test_read_regions_and_out(generated):
    path, dense = generated["pack16"]
    with qem.open(path) as f:
        got = f.read(scan_region=(1, 5, 2, 8), detector_region=(0, 3, 4, 7))
        np.testing.assert_array_equal(got, dense[1:5, 2:8, 0:3, 4:7])
        out = np.full((4, 6, 3, 3), 7, dtype=f.dtype)
        assert f.read(scan_region=(1, 5, 2, 8), detector_region=(0, 3, 4, 7), out=out) is out
        np.testing.assert_array_equal(out, got)
        with pytest.raises(ValueError, match="out must have shape"):
            f.read(scan_region=(1, 5, 2, 8), out=np.empty((4, 6, 3, 3), f.dtype))
        with pytest.raises(ValueError, match="C-contiguous"):
            f.read(out=np.empty(dense.shape[::-1], f.dtype).T)
        with pytest.raises(ValueError, match="scan_region"):
            f.read(scan_region=(0, 99, 0, 1))
        with pytest.raises(ValueError, match="not both"):
            f.read(scan_region=(0, 1, 0, 1), scan_indices=[0])


def test_index_errors_name_the_problem(generated):
    path, dense = generated["u8"]
    with qem.open(path) as f:
        with pytest.raises(IndexError, match="out of bounds for axis 1"):
            f[0, dense.shape[1]]
        with pytest.raises(IndexError, match="too many indices"):
            f[0, 0, 0, 0, 0]
        with pytest.raises(TypeError, match="scan_indices"):
            f[[0, 1]]
        with pytest.raises(TypeError, match="boolean"):
            f[True]
        with pytest.raises(TypeError, match="None"):
            f[None]
        assert len(f) == dense.shape[0] and f.ndim == 4 and f.size == dense.size


def test_whole_array_checks_memory(generated, monkeypatch):
    path, dense = generated["u16"]
    from qem import _file

    with qem.open(path) as f:
        np.testing.assert_array_equal(np.asarray(f), dense)
        assert np.asarray(f, dtype=np.float64).dtype == np.float64
        monkeypatch.setattr(_file, "_available_memory", lambda: 1000)
        with pytest.raises(qem.LimitError, match="to_dask"):
            np.asarray(f)
        assert f[0, 0].shape == dense.shape[2:]  # small reads still work


def test_attributes(generated):
    path, dense = generated["u16"]
    with qem.open(path) as f:
        assert f.format == "qem" and f.codec == "runtime-column-rans-spatial-v2"
        assert f.profile is None
        assert f.nbytes == dense.nbytes
        assert f.compression_ratio == pytest.approx(dense.nbytes / path.stat().st_size)
        assert f.chunks[0] == (0, 16) and f.chunks[-1][1] == dense.shape[0] * dense.shape[1]
        assert f.valid.all() and f.valid.shape == dense.shape[2:]
        assert f.metadata["schema"] == "quantem.scientific-metadata/2"
    path, dense = generated["pack8"]
    with qem.open(path) as f:
        assert f.format == "pack" and f.profile == "exact-uint8-bitpacked" and f.codec is None
        assert f.dtype == np.uint8
        assert all(end - first == f.chunks[0][1] for first, end in f.chunks)
    f.close()
    assert f.closed
    with pytest.raises(ValueError, match="closed"):
        f[0, 0]
