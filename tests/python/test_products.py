"""Products of the qem command against numpy on the same files.

The data are made here with numpy, stored as .qem and as a pack by the
qem command, and every product qem writes is compared with numpy's dense
computation: integers exactly, floats within rtol = atol = 1e-6 of a
float64 reference (iDPC: 1e-5, two FFTs in float64 against numpy's).
Run by ctest with QEM_CLI naming the qem executable.
"""
import os
import subprocess

import numpy as np
import pytest

QEM = os.environ.get("QEM_CLI", "qem")


def qem(*args):
    done = subprocess.run([QEM, *map(str, args)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("products")
    rng = np.random.default_rng(20261129)
    shape = (5, 7, 24, 20)
    rows, cols = np.indices(shape[2:])
    disk = (rows - 11.3) ** 2 + (cols - 9.6) ** 2 <= 6.5 ** 2
    counts = rng.poisson(0.4, size=shape).astype(np.uint16)
    counts[:, :, disk] += rng.poisson(300, size=(shape[0], shape[1], int(disk.sum()))).astype(
        np.uint16
    )
    np.save(d / "counts.npy", counts)
    qem("save", "--quiet", d / "counts.npy", d / "counts.qem")
    qem("pack", "produce", "--quiet", d / "counts.npy", d / "counts.h5")
    values = (counts.astype(np.float32) * np.float32(0.73)
              + rng.normal(0, 1, size=shape).astype(np.float32))
    dark = rng.uniform(0, 2, size=shape[2:]).astype(np.float32)
    np.save(d / "values.npy", values)
    np.save(d / "dark.npy", dark)
    qem("save", "--quiet", d / "values.npy", d / "values.qem", "--dark", d / "dark.npy")
    return d, counts, values, dark


def sources(d):
    return [d / "counts.qem", d / "counts.h5"]


def test_virtual_bf_exact(data):
    d, counts, _, _ = data
    rows, cols = np.indices(counts.shape[2:])
    mask = (rows - 11.0) ** 2 + (cols - 10.0) ** 2 <= 7.0 ** 2  # inclusive, squared
    want = counts[:, :, mask].astype(np.uint64).sum(axis=2)
    for k, src in enumerate(sources(d)):
        out = d / f"bf{k}.npy"
        qem("virtual", src, "--detector", "bf", "--center", "11,10", "--radius", "7", "-o", out)
        got = np.load(out)
        assert got.dtype == np.uint32
        np.testing.assert_array_equal(got, want)


def test_virtual_mask_npy_exact(data):
    d, counts, _, _ = data
    rng = np.random.default_rng(3)
    mask = (rng.random(counts.shape[2:]) < 0.3).astype(np.uint8)
    np.save(d / "mask.npy", mask)
    want = (counts.astype(np.uint64) * mask).sum(axis=(2, 3))
    for k, src in enumerate(sources(d)):
        out = d / f"vm{k}.npy"
        qem("virtual", src, "--mask", d / "mask.npy", "-o", out)
        np.testing.assert_array_equal(np.load(out), want)


def test_mean_exact_rounding(data):
    d, counts, _, _ = data
    n = counts.shape[0] * counts.shape[1]
    want = (counts.astype(np.uint64).sum(axis=(0, 1)) / n).astype(np.float32)
    for k, src in enumerate(sources(d)):
        out = d / f"mean{k}.npy"
        qem("mean", src, "-o", out)
        np.testing.assert_array_equal(np.load(out), want)


def test_region_sum_and_max(data):
    d, counts, _, _ = data
    block = counts[1:4, 2:6].astype(np.uint64)
    for k, src in enumerate(sources(d)):
        qem("dp", src, "--region", "1:4,2:6", "--reduce", "sum", "-o", d / f"rs{k}.npy")
        qem("dp", src, "--region", "1:4,2:6", "--reduce", "max", "-o", d / f"rm{k}.npy")
        np.testing.assert_array_equal(np.load(d / f"rs{k}.npy"), block.sum(axis=(0, 1)))
        np.testing.assert_array_equal(np.load(d / f"rm{k}.npy"), block.max(axis=(0, 1)))


def test_com_exact(data):
    d, counts, _, _ = data
    rows, cols = np.indices(counts.shape[2:])
    c = counts.astype(np.float64)
    total = c.sum(axis=(2, 3))
    want = np.stack([(c * rows).sum(axis=(2, 3)) / total,
                     (c * cols).sum(axis=(2, 3)) / total], axis=-1).astype(np.float32)
    for k, src in enumerate(sources(d)):
        out = d / f"com{k}.npy"
        qem("com", src, "-o", out)
        got = np.load(out)
        assert got.shape == counts.shape[:2] + (2,)
        np.testing.assert_array_equal(got, want)


def test_float_products_within_tolerance(data):
    d, _, values, dark = data
    corrected = values.astype(np.float64) - dark.astype(np.float64)
    rows, cols = np.indices(values.shape[2:])
    mask = (rows - 11.0) ** 2 + (cols - 10.0) ** 2 <= 7.0 ** 2
    qem("virtual", d / "values.qem", "--detector", "bf", "--center", "11,10", "--radius", "7",
        "-o", d / "fbf.npy")
    np.testing.assert_allclose(np.load(d / "fbf.npy"), corrected[:, :, mask].sum(axis=2),
                               rtol=1e-6, atol=1e-6)
    qem("mean", d / "values.qem", "-o", d / "fmean.npy")
    np.testing.assert_allclose(np.load(d / "fmean.npy"), corrected.mean(axis=(0, 1)),
                               rtol=1e-6, atol=1e-6)


def idpc_reference(g_r, g_c):
    """The Poisson solve of notes-products section 2.4, in numpy."""
    nr, nc = g_r.shape
    nu_r = np.fft.fftfreq(nr).astype(np.float32)[:, None]
    nu_c = np.fft.fftfreq(nc).astype(np.float32)[None, :]
    k2 = nu_r ** 2 + nu_c ** 2
    k2[0, 0] = 1
    phi_hat = (-0.25j) * (nu_r * np.fft.fft2(g_r) + nu_c * np.fft.fft2(g_c)) / k2
    phi_hat[0, 0] = 0
    phi = np.real(np.fft.ifft2(phi_hat)).astype(np.float32)
    return -(phi - phi.astype(np.float64).mean())


def test_idpc_matches_numpy(data):
    d, counts, _, _ = data
    qem("com", d / "counts.qem", "--subtract-mean", "-o", d / "dcom.npy")
    com = np.load(d / "dcom.npy").astype(np.float64)
    qem("dpc", d / "counts.qem", "--rotation", "0", "-o", d / "phase.npy")
    np.testing.assert_allclose(np.load(d / "phase.npy"), idpc_reference(com[..., 0], com[..., 1]),
                               rtol=1e-5, atol=1e-5)
