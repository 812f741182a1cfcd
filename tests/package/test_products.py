"""Products from Python equal numpy on the dense array (integers exactly;
float data within rtol = atol = 1e-6 of a float64 reference) and equal
the qem command's outputs for the same file, bit for bit."""
import os

import numpy as np
import pytest

import qem

INTEGER = ["u16", "u8", "pack16", "pack8"]


def disk(shape, center, radius):
    rows, cols = np.indices(shape)
    return (rows - center[0]) ** 2 + (cols - center[1]) ** 2 <= radius ** 2


def test_virtual_exact(generated):
    rng = np.random.default_rng(11)
    for name in INTEGER:
        path, a = generated[name]
        with qem.open(path) as f:
            mask = rng.random(a.shape[2:]) < 0.4
            got = f.virtual(mask)
            want = (a.astype(np.uint64) * mask).sum(axis=(2, 3))
            assert got.dtype == np.uint32
            np.testing.assert_array_equal(got, want)
            bf = f.virtual(detector="bf", center=(4, 4), radius=3)
            np.testing.assert_array_equal(
                bf, (a.astype(np.uint64) * disk(a.shape[2:], (4, 4), 3)).sum(axis=(2, 3)))


def test_mean_region_frame_exact(generated):
    for name in INTEGER:
        path, a = generated[name]
        with qem.open(path) as f:
            n = a.shape[0] * a.shape[1]
            mean = f.mean()
            assert mean.dtype == np.float32
            np.testing.assert_array_equal(
                mean, (a.astype(np.uint64).sum(axis=(0, 1)) / n).astype(np.float32))
            s = f.region(1, 3, 2, 5, reduce="sum")
            assert s.dtype == np.uint64
            np.testing.assert_array_equal(s, a[1:3, 2:5].astype(np.uint64).sum(axis=(0, 1)))
            np.testing.assert_array_equal(f.region(1, 3, 2, 5, reduce="max"),
                                          a[1:3, 2:5].max(axis=(0, 1)))
            np.testing.assert_array_equal(
                f.region(0, 2, 0, 2, reduce="mean"),
                (a[0:2, 0:2].astype(np.uint64).sum(axis=(0, 1)) / 4).astype(np.float32))
            np.testing.assert_array_equal(f.dp(-1, 2), a[-1, 2])


def test_com_exact(generated):
    for name in INTEGER:
        path, a = generated[name]
        with qem.open(path) as f:
            rows, cols = np.indices(a.shape[2:])
            w = a.astype(np.float64)
            total = w.sum(axis=(2, 3))
            want = np.stack([(w * rows).sum(axis=(2, 3)) / total,
                             (w * cols).sum(axis=(2, 3)) / total], axis=-1).astype(np.float32)
            np.testing.assert_array_equal(f.com(), want)
            sub = f.com(subtract_mean=True)
            np.testing.assert_allclose(sub, want - want.reshape(-1, 2).mean(axis=0), atol=1e-5)


def test_float_products_within_rule(generated):
    path, a = generated["f32"]
    ref = a.astype(np.float64)
    with qem.open(path) as f:
        mask = disk(a.shape[2:], (6, 5), 3)
        np.testing.assert_allclose(f.virtual(mask), (ref * mask).sum(axis=(2, 3)), rtol=1e-6,
                                   atol=1e-6)
        np.testing.assert_allclose(f.mean(), ref.mean(axis=(0, 1)), rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(f.dp(2, 3), a[2, 3])


def test_products_equal_the_cli(generated, cli, tmp_path):
    for name in INTEGER + ["f32"]:
        path, a = generated[name]
        with qem.open(path) as f:
            cli("virtual", path, "--detector", "adf", "--center", "4,4", "--radius", "2",
                "-o", tmp_path / f"{name}-adf.npy")
            got = f.virtual(detector="adf", center=(4, 4), radius=2)
            want = np.load(tmp_path / f"{name}-adf.npy")
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
            # The centre and radius the CLI resolves from the file.
            cli("virtual", path, "--detector", "bf", "-o", tmp_path / f"{name}-bf.npy")
            assert f.virtual(detector="bf").tobytes() == \
                np.load(tmp_path / f"{name}-bf.npy").tobytes()
            cli("mean", path, "-o", tmp_path / f"{name}-mean.npy")
            assert f.mean().tobytes() == np.load(tmp_path / f"{name}-mean.npy").tobytes()
            cli("com", path, "--subtract-mean", "-o", tmp_path / f"{name}-com.npy")
            assert f.com(subtract_mean=True).tobytes() == \
                np.load(tmp_path / f"{name}-com.npy").tobytes()
            cli("dpc", path, "-o", tmp_path / f"{name}-dpc.npy")
            assert f.dpc().idpc.tobytes() == np.load(tmp_path / f"{name}-dpc.npy").tobytes()
            cli("dp", path, "--region", "0:2,1:3", "--reduce", "max",
                "-o", tmp_path / f"{name}-max.npy")
            assert f.region(0, 2, 1, 3, reduce="max").tobytes() == \
                np.load(tmp_path / f"{name}-max.npy").tobytes()
            calibrate = cli("calibrate", path, "--json").stdout
            import json

            c = json.loads(calibrate)
            mine = f.calibrate()
            assert mine["center"] == pytest.approx(tuple(c["detector_center_px"]), abs=0)
            assert mine["radius"] == c["bright_field_radius_px"]


def test_detector_mask_and_dpc(generated):
    path, a = generated["u16"]
    with qem.open(path) as f:
        mask, used = f.detector_mask("annulus", center=(6, 5), inner=1, outer=3)
        np.testing.assert_array_equal(mask, disk(a.shape[2:], (6, 5), 3) &
                                      ~disk(a.shape[2:], (6, 5), 1 - 1e-9))
        assert used["radius"] is None and used["origin"] == "given"
        mask, used = f.detector_mask("bf")
        assert used["origin"].startswith("estimate")
        d = f.dpc(rotation=30)
        assert d.rotation == 30 and d.idpc.shape == a.shape[:2] and d.com.shape == a.shape[:2] + (2,)
        with pytest.raises(ValueError, match="detector must be one of"):
            f.virtual(detector="xx")
        with pytest.raises(ValueError, match="mask or detector"):
            f.virtual(np.ones(a.shape[2:], bool), detector="bf")
        with pytest.raises(ValueError, match="named detector"):
            f.virtual(np.ones(a.shape[2:], bool), radius=3)
        with pytest.raises(ValueError, match="detector's shape"):
            f.virtual(np.ones((2, 2), bool))
        with pytest.raises(ValueError, match="0 and 1"):
            f.virtual(np.full(a.shape[2:], 2))
        with pytest.raises(qem.UsageError):
            f.virtual(detector="annulus")


def test_sessions_update_by_deltas(generated):
    p1, a1 = generated["u16"]
    with qem.open(p1) as f, f.session() as s:
        m1 = disk(a1.shape[2:], (6, 5), 3)
        img = s.set_mask(m1)
        np.testing.assert_array_equal(img, (a1.astype(np.uint64) * m1).sum(axis=(2, 3)))
        assert s.stats["full_recomputation"]
        m2 = disk(a1.shape[2:], (6, 6), 3)
        img = s.set_mask(m2)
        np.testing.assert_array_equal(img, (a1.astype(np.uint64) * m2).sum(axis=(2, 3)))
        assert not s.stats["full_recomputation"]
        assert s.stats["pixels_changed"] == int((m1 ^ m2).sum())
        with pytest.raises(RuntimeError, match="in use"):
            f.close()
    path, _ = generated["u16"]
    with qem.open(path) as f1, qem.open(generated["u16"][0]) as f2:
        with pytest.raises(qem.Error):
            qem.session([f1, f2])  # the same file twice


@pytest.mark.parametrize("resident", [True, "copy", "mapped"])
def test_resident_session_equals_numpy(generated, resident):
    """A .qem file held in memory (copied or mapped): a detector dragged
    back and forth gives numpy's images at every step, as a file read per
    use does."""
    path, a = generated["u16"]
    dense = a.astype(np.uint64)
    with qem.open(path, resident=resident) as f, f.session(keep_mib=1) as s:
        seen = set()
        for center in [(6, 5), (6, 6), (6, 7), (6, 6), (6, 5), (5, 5)]:
            m = disk(a.shape[2:], center, 3)
            np.testing.assert_array_equal(s.set_mask(m), (dense * m).sum(axis=(2, 3)))
            # A mask the session held before is a kept image, not a computation.
            assert s.stats["from_kept"] == (center in seen and len(seen) > 1)
            seen.add(center)
        np.testing.assert_array_equal(f[3, 4], a[3, 4])
        np.testing.assert_array_equal(f.mean(), a.mean(axis=(0, 1), dtype=np.float64)
                                      .astype(np.float32))


@pytest.mark.parametrize("name", ["u16", "u8"])
def test_packed_copy_equals_numpy(generated, name):
    """After build_packed_copy, a detector dragged around, CoM and single
    patterns equal numpy's; a limit it would pass keeps nothing; a pack and
    float32 data have none."""
    path, a = generated[name]
    dense = a.astype(np.uint64)
    with qem.open(path, resident="mapped") as f:
        assert f.packed_copy is None
        with pytest.raises(qem.LimitError):
            f.build_packed_copy(limit_bytes=16)
        assert f.packed_copy is None
        seen = []
        stats = f.build_packed_copy(progress=lambda done, total: seen.append((done, total)))
        assert stats == f.packed_copy and stats["bytes"] > 0 and stats["build_s"] >= 0
        assert seen and seen[-1][0] == seen[-1][1]
        with f.session(keep_mib=0) as s:
            for center in [(4, 4), (4, 5), (5, 5), (4, 5)]:
                m = disk(a.shape[2:], center, 3)
                np.testing.assert_array_equal(s.set_mask(m), (dense * m).sum(axis=(2, 3)))
        for r, c in [(0, 0), (a.shape[0] - 1, a.shape[1] - 1), (2, 3)]:
            np.testing.assert_array_equal(f[r, c], a[r, c])
        m = disk(a.shape[2:], (4, 4), 4)
        np.testing.assert_array_equal(f.virtual(m), (dense * m).sum(axis=(2, 3)))
    for other in ("pack16", "f32"):
        with qem.open(generated[other][0]) as g, pytest.raises(qem.UnsupportedError):
            g.build_packed_copy()


def test_mapped_file_rewritten_in_place_is_refused(generated, tmp_path):
    """resident="mapped" reads the file's own pages: a rewrite in place is
    refused on the next read (a copy keeps what it read), and an unknown
    mode is refused by name before the library sees it."""
    path, a = generated["u16"]
    target = tmp_path / "mapped.qem"
    target.write_bytes(path.read_bytes())
    with qem.open(target, resident="mapped") as f, qem.open(target, resident="copy") as g:
        np.testing.assert_array_equal(f[2, 3], a[2, 3])
        data = target.read_bytes()
        with open(target, "r+b") as out:  # the same inode, new times
            out.write(data)
        later = os.stat(target).st_mtime + 5
        os.utime(target, (later, later))
        with pytest.raises(qem.ChangedError):
            f.virtual(disk(a.shape[2:], (6, 6), 3))
        np.testing.assert_array_equal(g[2, 3], a[2, 3])
    with pytest.raises(ValueError, match="resident"):
        qem.open(target, resident="always")


def test_mean_kept_between_opens(fixtures, tmp_path):
    """cache_dir keeps the exact pixel sums of a file that does not record
    them: the second open's mean comes from there and is the same."""
    path = fixtures / "qem" / "u16_dense_highdose.qem"
    cache = tmp_path / "cache"
    means = []
    for want in ("computed", "cached"):
        with qem.open(path, cache_dir=cache) as f:
            assert f.sums_origin == "none"
            means.append(f.mean())
            assert f.sums_origin == want
    np.testing.assert_array_equal(means[0], means[1])
    with qem.open(path) as f:
        np.testing.assert_array_equal(f.mean(), means[0])
        assert f.sums_origin == "computed"


def test_default_image_kept_between_opens(fixtures, tmp_path):
    """cache_dir keeps the default detector's image of a file that does
    not record it: the second open's f.virtual(detector="bf") comes from
    there ("cached") and equals a dense numpy sum over the same mask."""
    path = fixtures / "qem" / "u16_dense_highdose.qem"
    cache = tmp_path / "cache"
    for want in ("computed", "cached"):
        with qem.open(path, cache_dir=cache) as f:
            image = f.virtual(detector="bf")
            assert f.last_origin == want
            mask = f.detector_mask("bf")[0].astype(bool)
            dense = f[:, :].astype(np.int64)
            np.testing.assert_array_equal(image, (dense * mask).sum(axis=(2, 3)))


def test_prepared_pack_values_answer_without_decoding(fixtures, tmp_path, cli):
    """A calibrated copy of a uint8 pack carries the upstream's prepared
    DPC moments and BF/ABF/ADF images: the CoM over every pixel and the BF
    virtual image come from them ("recorded") and equal a dense numpy
    computation over the working values; one pixel off is computed."""
    src = fixtures / "pack" / "v3_upstream_test_writer_notes_v3.h5"
    copy = tmp_path / "prepared.h5"
    cli("calibrate", src, "-o", copy)
    with qem.open(copy) as f:
        a = f[:, :].astype(np.float64)
        valid = np.asarray(f.valid, dtype=bool)
        com = f.com()
        assert f.last_origin == "recorded"
        rows, cols = np.indices(a.shape[2:])
        total = (a * valid).sum(axis=(2, 3))
        want_r = (a * valid * rows).sum(axis=(2, 3)) / total
        want_c = (a * valid * cols).sum(axis=(2, 3)) / total
        np.testing.assert_array_equal(com[..., 0], want_r.astype(np.float32))
        np.testing.assert_array_equal(com[..., 1], want_c.astype(np.float32))
        mask, used = f.detector_mask(detector="bf")
        bf = f.virtual(mask)
        assert f.last_origin == "recorded"
        np.testing.assert_array_equal(bf, (a * (mask.astype(bool) & valid)).sum(axis=(2, 3)))
        off = mask.copy()
        k = int(np.flatnonzero(valid.ravel() & (off.ravel() == 0))[0])
        off.ravel()[k] = 1
        np.testing.assert_array_equal(f.virtual(off),
                                      (a * (off.astype(bool) & valid)).sum(axis=(2, 3)))
        assert f.last_origin == "computed"


def test_saved_qem_answers_its_default_detector_from_the_record(tmp_path):
    """qem.save records the default BF detector's image in the header: the
    default `virtual(detector="bf")` comes from it ("recorded") and equals a
    dense numpy sum over that mask; any other mask is computed, also exact."""
    rng = np.random.default_rng(3)
    rows, cols = np.mgrid[0:48, 0:48]
    bright = (rows - 20.4) ** 2 + (cols - 26.2) ** 2 <= 64
    counts = rng.poisson(np.where(bright, 25.0, 0.4), (96, 96, 48, 48)).astype(np.uint16)
    path = tmp_path / "disk.qem"
    qem.save(path, counts)
    with qem.open(path) as f:
        assert "qem.detector_image" in f.header["scientific_metadata"]["extensions"]
        bf = f.virtual(detector="bf")
        assert f.last_origin == "recorded"
        mask, _ = f.detector_mask(detector="bf")
        valid = np.asarray(f.valid, dtype=bool)
        want = (counts.astype(np.int64) * (mask.astype(bool) & valid)).sum(axis=(2, 3))
        np.testing.assert_array_equal(bf, want)
        other = f.virtual(detector="bf", center=(20.0, 26.0), radius=8)
        assert f.last_origin == "computed"
        mask, _ = f.detector_mask(detector="bf", center=(20.0, 26.0), radius=8)
        want = (counts.astype(np.int64) * (mask.astype(bool) & valid)).sum(axis=(2, 3))
        np.testing.assert_array_equal(other, want)
