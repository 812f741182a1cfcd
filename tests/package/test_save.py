"""qem.save from numpy, memmaps, Dask, h5py, HyperSpy and iterables round
trips bit for bit; bad input is refused naming the problem and leaves no
file; qem.convert, qem.inspect and qem.pack take every detector file."""
import signal
import textwrap

import numpy as np
import pytest

import qem
from conftest import counts_array, interruptible_python


def back(path):
    with qem.open(path) as f:
        return np.asarray(f)


def same(path, want):
    got = back(path)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == np.ascontiguousarray(want).tobytes()


def test_from_numpy_every_dtype(tmp_path):
    a16 = counts_array((3, 4, 8, 6), 1)
    same(qem.save(tmp_path / "a16.qem", a16), a16)
    a8 = counts_array((3, 4, 8, 6), 2, np.uint8, dose=50)
    same(qem.save(tmp_path / "a8.qem", a8), a8)
    f32 = np.random.default_rng(3).normal(0, 5, (2, 3, 5, 4)).astype(np.float32)
    f32.reshape(-1)[:4] = [np.nan, -0.0, np.inf, 1e-45]
    same(qem.save(tmp_path / "f32.qem", f32), f32)
    with qem.open(tmp_path / "f32.qem") as f:
        assert f.codec == "float32-bit-lanes-rans-v1"


def test_exact_conversion_or_refusal(tmp_path):
    a = counts_array((2, 3, 4, 5), 4).astype(np.int64)
    same(qem.save(tmp_path / "i64.qem", a), a.astype(np.uint16))
    big = a.astype(np.uint32)
    big[1, 2, 3, 4] = 65536
    with pytest.raises(ValueError, match=r"scan position \(1, 2\), detector pixel \(3, 4\) holds 65536"):
        qem.save(tmp_path / "big.qem", big)
    assert not (tmp_path / "big.qem").exists()
    neg = a.copy()
    neg[0, 1, 2, 3] = -1
    with pytest.raises(ValueError, match=r"\(0, 1\), detector pixel \(2, 3\) holds -1"):
        qem.save(tmp_path / "neg.qem", neg)
    f64 = np.full((1, 2, 3, 3), 0.1)
    with pytest.raises(ValueError, match="float32 cannot hold"):
        qem.save(tmp_path / "f64.qem", f64)
    same(qem.save(tmp_path / "f64ok.qem", np.full((1, 2, 3, 3), 0.5)),
         np.full((1, 2, 3, 3), 0.5, np.float32))
    with pytest.raises(TypeError, match="booleans"):
        qem.save(tmp_path / "b.qem", np.zeros((1, 1, 2, 2), bool))
    be = a.astype(">u2")
    same(qem.save(tmp_path / "be.qem", be), a.astype(np.uint16))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["be.qem", "f64ok.qem", "i64.qem"]


def test_existing_destination(tmp_path):
    a = counts_array((2, 2, 4, 4), 5)
    qem.save(tmp_path / "x.qem", a)
    before = (tmp_path / "x.qem").read_bytes()
    with pytest.raises(FileExistsError):
        qem.save(tmp_path / "x.qem", a + 1)
    assert (tmp_path / "x.qem").read_bytes() == before


def test_argument_errors(tmp_path):
    a = counts_array((2, 2, 4, 4), 6)
    with pytest.raises(ValueError, match="scan_shape"):
        qem.save(tmp_path / "s.qem", a.reshape(4, 4, 4))
    with pytest.raises(ValueError, match="holds 6 frames"):
        qem.save(tmp_path / "s.qem", a.reshape(4, 4, 4), scan_shape=(2, 3))
    same(qem.save(tmp_path / "s.qem", a.reshape(4, 4, 4), scan_shape=(2, 2)), a)
    with pytest.raises(ValueError, match="4D"):
        qem.save(tmp_path / "t.qem", a[0, 0])
    with pytest.raises(TypeError, match="shape= "):
        qem.save(tmp_path / "t.qem", iter([a]))
    with pytest.raises(ValueError, match="detector's shape"):
        qem.save(tmp_path / "t.qem", a, valid=np.ones((3, 3), bool))
    with pytest.raises(TypeError, match="progress"):
        qem.save(tmp_path / "t.qem", a, progress="yes")
    with pytest.raises(qem.UsageError):
        qem.save(tmp_path / "t.npy", a)  # .qem files end in .qem
    assert not (tmp_path / "t.qem").exists()


def test_valid_dark_metadata_calibration(tmp_path):
    a = counts_array((2, 3, 6, 5), 7)
    valid = np.ones((6, 5), bool)
    valid[2, 3] = False
    cal = {"quantities": {"scan_sampling_row": {"value": 0.5, "unit": "nm"},
                          "scan_sampling_column": {"value": 0.5, "unit": "nm"}}}
    qem.save(tmp_path / "v.qem", a, valid=valid, metadata={"operator": "me"}, calibration=cal)
    with qem.open(tmp_path / "v.qem") as f:
        np.testing.assert_array_equal(f.valid, valid)
        assert f.header["metadata"]["operator"] == "me"
        assert f.calibration["scan_step_row"] == {"value": 5.0, "unit": "angstrom",
                                                  "source": "recorded"}
        np.testing.assert_array_equal(np.asarray(f), a)
    v = a.astype(np.float32) + np.float32(0.25)
    dark = np.full((6, 5), 0.25, np.float32)
    qem.save(tmp_path / "d.qem", v, dark=dark)
    with qem.open(tmp_path / "d.qem") as f:
        np.testing.assert_array_equal(np.asarray(f), v)  # stored values untouched
        np.testing.assert_array_equal(f.dp(1, 1), a[1, 1].astype(np.float32))


def test_from_memmap_dask_h5py_iterable(tmp_path):
    import dask.array as da
    import h5py

    a = counts_array((7, 5, 9, 8), 8)
    np.save(tmp_path / "a.npy", a)
    same(qem.save(tmp_path / "mm.qem", np.load(tmp_path / "a.npy", mmap_mode="r")), a)
    same(qem.save(tmp_path / "da.qem", da.from_array(a, chunks=(2, 3, 9, 8))), a)
    with h5py.File(tmp_path / "a.h5", "w") as h:
        h.create_dataset("data", data=a, chunks=(1, 1, 9, 8), compression="gzip")
    with h5py.File(tmp_path / "a.h5", "r") as h:
        same(qem.save(tmp_path / "h5.qem", h["data"]), a)
    blocks = (a.reshape(-1, 9, 8)[k:k + 4] for k in range(0, 35, 4))
    same(qem.save(tmp_path / "it.qem", blocks, shape=a.shape, dtype=a.dtype), a)
    short = (a.reshape(-1, 9, 8)[k:k + 4] for k in range(0, 30, 4))
    with pytest.raises(ValueError, match="held 32 scans"):
        qem.save(tmp_path / "short.qem", short, shape=a.shape, dtype=a.dtype)
    assert not (tmp_path / "short.qem").exists()
    with qem.open(tmp_path / "da.qem") as f:
        assert f.header["scientific_metadata"]["source_metadata"]["source_format"] == "dask"


def test_from_hyperspy_with_calibrated_axes(tmp_path):
    import hyperspy.api as hs

    a = counts_array((4, 5, 8, 6), 9)
    s = hs.signals.Signal2D(a)
    nav_y, nav_x = (s.axes_manager.navigation_axes[1], s.axes_manager.navigation_axes[0])
    sig_y, sig_x = (s.axes_manager.signal_axes[1], s.axes_manager.signal_axes[0])
    nav_y.scale, nav_y.units = 0.25, "nm"
    nav_x.scale, nav_x.units = 3.0, "Å"
    sig_y.scale, sig_y.units = 0.8, "mrad"
    sig_x.scale, sig_x.units = 0.8, "mrad"
    s.metadata.set_item("Acquisition_instrument.TEM.beam_energy", 300.0)
    s.metadata.set_item("Acquisition_instrument.TEM.convergence_angle", 21.4)
    qem.save(tmp_path / "hs.qem", s)
    with qem.open(tmp_path / "hs.qem") as f:
        np.testing.assert_array_equal(np.asarray(f), a)
        c = f.calibration
        assert c["scan_step_row"]["value"] == pytest.approx(2.5)
        assert c["scan_step_column"]["value"] == pytest.approx(3.0)
        assert c["detector_step_row"] == {"value": 0.8, "unit": "mrad", "source": "recorded"}
        assert c["voltage"]["value"] == 300.0 and c["semiangle"]["value"] == 21.4
        facts = f.metadata["source_metadata"]
        assert facts["family"] == "hyperspy" and len(facts["axes"]) == 4
        back = f.to_hyperspy(lazy=True)
        assert back._lazy
        names = [ax.name for ax in sorted(back.axes_manager._axes,
                                          key=lambda x: x.index_in_array)]
        assert names == ["scan_row", "scan_column", "detector_row", "detector_column"]
        assert back.axes_manager.navigation_axes[1].scale == pytest.approx(2.5)
        assert back.axes_manager.signal_axes[0].units == "mrad"
        np.testing.assert_array_equal(back.data.compute(), a)
    lazy = hs.signals.Signal2D(a).as_lazy()
    same(qem.save(tmp_path / "lazy.qem", lazy), a)


def test_progress_callable(tmp_path):
    a = counts_array((4, 4, 4, 4), 10)
    seen = []
    qem.save(tmp_path / "p.qem", a, progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1] == (16, 16)


def test_interrupted_by_exception_leaves_nothing(tmp_path):
    a = counts_array((4, 4, 4, 4), 11)

    def blocks():
        yield a.reshape(-1, 4, 4)[:8]
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        qem.save(tmp_path / "k.qem", blocks(), shape=a.shape, dtype=a.dtype)
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_during_save_leaves_no_file(tmp_path):
    """A real SIGINT while the library encodes: KeyboardInterrupt, no file."""
    script = textwrap.dedent(f"""
        import numpy as np, qem, sys
        a = np.random.default_rng(1).poisson(3, (64, 64, 64, 64)).astype(np.uint16)
        def blocks():
            while True:
                for k in range(0, 4096, 256):
                    yield a.reshape(-1, 64, 64)[k:k + 256]
                    sys.stdout.write("block\\n"); sys.stdout.flush()
        try:
            qem.save({str(tmp_path / "big.qem")!r}, blocks(), shape=(4096, 4096, 64, 64),
                     dtype=np.uint16)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(3)
    """)
    with interruptible_python(script) as p:
        for _ in range(3):
            assert p.stdout.readline() == "block\n"
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=60)
    assert p.returncode == 3 and "interrupted" in out
    assert list(tmp_path.iterdir()) == []


def test_convert_detector_files(fixtures, tmp_path):
    d = fixtures / "detectors"
    qem.convert(d / "arina" / "test_00_master.h5", tmp_path / "a.qem", scan_shape=(4, 4))
    want = np.load(d / "arina" / "test_00_data_000001.npy")
    np.testing.assert_array_equal(back(tmp_path / "a.qem").reshape(-1), want.reshape(-1))
    with qem.open(tmp_path / "a.qem") as f:
        assert f.metadata["source_metadata"]["family"] == "arina"
    e = d / "eiger" / "eiger2_simread7_2datafiles_4images_bslz4_data_000001.h5"
    qem.convert(e, tmp_path / "e.qem", scan_shape=(1, 2))
    np.testing.assert_array_equal(back(tmp_path / "e.qem").reshape(-1),
                                  np.load(str(e)[:-3] + ".npy").reshape(-1))
    with pytest.raises(qem.FormatError, match="does not state its scan shape"):
        qem.convert(d / "arina" / "test_00_master.h5", tmp_path / "b.qem")
    info = qem.inspect(d / "arina" / "test_00_master.h5", scan_shape=(4, 4))
    assert info["family"] == "arina" and info["sample_type"] == "uint32"
    np.save(tmp_path / "raw.npy", counts_array((2, 2, 4, 4), 12))
    a = counts_array((2, 2, 4, 4), 12)
    a.tofile(tmp_path / "frames.bin")
    qem.convert(tmp_path / "frames.bin", tmp_path / "r.qem", raw_shape=(2, 2, 4, 4),
                raw_dtype="uint16")
    same(tmp_path / "r.qem", a)


def test_pack_produce_and_inspect(fixtures, tmp_path):
    a = counts_array((4, 8, 6, 5), 13)
    np.save(tmp_path / "a.npy", a)
    exclude = np.zeros((6, 5), bool)
    exclude[1, 1] = True
    info = qem.pack.inspect(tmp_path / "a.npy")
    assert info["shape"] == [4, 8, 6, 5] if "shape" in info else True
    receipt = qem.pack.produce(tmp_path / "a.npy", tmp_path / "a.h5", exclude=exclude)
    assert receipt["badPixelIndices"] == [6] and receipt["sourceAcquisition"]["family"] == "npy"
    with qem.open(tmp_path / "a.h5") as f:
        want = a.copy()
        want[:, :, 1, 1] = 0
        np.testing.assert_array_equal(np.asarray(f), want)
    with qem.open(tmp_path / "a.h5", raw=True) as f:
        np.testing.assert_array_equal(np.asarray(f), a)
    with pytest.raises(FileExistsError):
        qem.pack.produce(tmp_path / "a.npy", tmp_path / "a.h5")
    with pytest.raises(qem.FormatError, match="uint8 profile cannot store exactly"):
        qem.pack.produce(tmp_path / "a.npy", tmp_path / "b.h5", profile="u8-bitpacked")
    np.save(tmp_path / "c.npy", a[:2, :5])  # 10 scans
    with pytest.raises(qem.UsageError, match="multiple of 32"):
        qem.pack.produce(tmp_path / "c.npy", tmp_path / "b.h5", profile="u8-bitpacked")
    with pytest.raises(ValueError, match="profile"):
        qem.pack.produce(tmp_path / "a.npy", tmp_path / "b.h5", profile="zip")
    assert not (tmp_path / "b.h5").exists()
