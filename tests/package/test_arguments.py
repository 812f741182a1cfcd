"""Arguments are checked by name before anything reaches the library:
thread counts (a count the OpenMP runtime cannot start crashed the
interpreter), every integer argument (the extension's conversions wrapped
negative and too large values around), paths given as masks and Dask
arrays whose chunk sizes are unknown."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import qem
from conftest import counts_array

BAD_THREADS = [100000, -5, 2**64, 1025]


@pytest.fixture(scope="module")
def sources(generated, tmp_path_factory):
    d = tmp_path_factory.mktemp("sources")
    np.save(d / "a.npy", counts_array((2, 3, 4, 5), 20))
    return {"qem": generated["u16"][0], "pack": generated["pack16"][0], "npy": d / "a.npy"}


def child_outcome(code, **names):
    """What `code` does in a child interpreter (numpy as np and qem
    imported, `names` bound): (exception class, message), or
    ("returned", ""). A crash fails here, with the child's status, instead
    of taking the test run down."""
    bound = "".join(f"{k} = {str(v)!r}\n" for k, v in names.items())
    script = "import numpy as np, qem\n" + bound + textwrap.dedent(f"""
        try:
            {code}
        except Exception as e:
            print(type(e).__name__)
            print(e)
        else:
            print("returned")
            print()
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"the child died (status {done.returncode}): {done.stderr}"
    kind, message = done.stdout.split("\n", 1)
    return kind, message.strip()


THREADS_CALLS = {
    "save": "qem.save(out + '/s.qem', np.zeros((2, 2, 4, 4), np.uint16), threads=V)",
    "open .qem, mean": "qem.open(qem_path, threads=V).mean()",
    "open pack, mean": "qem.open(pack_path, threads=V).mean()",
    "convert": "qem.convert(npy_path, out + '/c.qem', threads=V)",
}


@pytest.mark.parametrize("call", sorted(THREADS_CALLS))
@pytest.mark.parametrize("value", BAD_THREADS)
def test_threads_out_of_range_refused_by_name(call, value, sources, tmp_path):
    kind, message = child_outcome(THREADS_CALLS[call].replace("V", repr(value)),
                                  out=tmp_path, qem_path=sources["qem"],
                                  pack_path=sources["pack"], npy_path=sources["npy"])
    assert kind == "ValueError", (kind, message)
    assert message == (f"threads must be an integer from 0 to 1024 (0 or None: every core), "
                       f"not {value}")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", [True, 2.0, "2", np.float32(1)])
def test_threads_not_an_integer(value, sources, tmp_path):
    a = counts_array((2, 2, 4, 4), 21)
    with pytest.raises(TypeError, match="^threads must be an integer, not"):
        qem.save(tmp_path / "s.qem", a, threads=value)
    with pytest.raises(TypeError, match="^threads must be an integer, not"):
        qem.open(sources["qem"], threads=value)
    with pytest.raises(TypeError, match="^threads must be an integer, not"):
        qem.convert(sources["npy"], tmp_path / "c.qem", threads=value)
    assert list(tmp_path.iterdir()) == []


def test_threads_in_range_give_the_same_results(generated, tmp_path):
    a = counts_array((3, 4, 6, 5), 22)
    files = [qem.save(tmp_path / f"t{k}.qem", a, threads=t)
             for k, t in enumerate([None, 0, 1, 2, np.int64(3)])]
    first = open(files[0], "rb").read()
    assert all(open(p, "rb").read() == first for p in files)
    path, want = generated["pack16"]
    for t in (None, 0, 1, 2, np.uint8(2)):
        with qem.open(path, threads=t) as f:
            np.testing.assert_array_equal(np.asarray(f), want)


# Every integer argument of the package: -1, 2**32 + 7 (an unsigned int
# keeps 7), 2**64 + 100 (an unsigned 64-bit keeps 100) and, where a value
# must be positive, 0. Each is refused with the argument's name and range.
def _save(tmp_path, **kw):
    a = counts_array((2, 2, 4, 4), 23)
    if "shape" in kw:
        return qem.save(tmp_path / "s.qem", iter([a.reshape(-1, 4, 4)]), dtype=np.uint16, **kw)
    if "scan_shape" in kw:
        return qem.save(tmp_path / "s.qem", a.reshape(4, 4, 4), **kw)
    return qem.save(tmp_path / "s.qem", a, **kw)


def _raw(tmp_path, call, **kw):
    a = counts_array((2, 2, 4, 4), 24)
    a.tofile(tmp_path / "frames.bin")
    args = dict(raw_shape=(2, 2, 4, 4), raw_dtype="uint16")
    args.update(kw)
    src = tmp_path / "frames.bin"
    if call == "convert":
        return qem.convert(src, tmp_path / "r.qem", **args)
    if call == "inspect":
        return qem.inspect(src, **args)
    if call == "pack.inspect":
        return qem.pack.inspect(src, **args)
    return qem.pack.produce(src, tmp_path / "r.h5", **args)


def _npy(tmp_path, call, **kw):
    np.save(tmp_path / "a.npy", counts_array((2, 3, 4, 5), 25).reshape(6, 4, 5))
    src = tmp_path / "a.npy"
    if call == "convert":
        return qem.convert(src, tmp_path / "n.qem", **kw)
    if call == "inspect":
        return qem.inspect(src, **kw)
    if call == "pack.inspect":
        return qem.pack.inspect(src, **kw)
    return qem.pack.produce(src, tmp_path / "n.h5", **kw)


ACQUISITION_CALLS = ["convert", "inspect", "pack.inspect", "pack.produce"]
WRAPS = [-1, 2**32 + 7, 2**64 + 100]
CASES = (
    [(f"save chunk_scans={v}", "chunk_scans", lambda t, v=v: _save(t, chunk_scans=v))
     for v in WRAPS + [0]] +
    [(f"save max_in_flight={v}", "max_in_flight", lambda t, v=v: _save(t, max_in_flight=v))
     for v in [-1, 0, 2**64 + 100]] +
    # (-2, -2) holds the data's 4 frames, and was saved as 2**64 - 2 rows.
    [(f"save scan_shape={v}", r"scan_shape\[0\]", lambda t, v=v: _save(t, scan_shape=v))
     for v in [(-2, -2), (2**32 + 7, 1), (2**64 + 100, 1), (0, 4)]] +
    [(f"save shape[0]={v}", r"shape\[0\]", lambda t, v=v: _save(t, shape=(v, 2, 4, 4)))
     for v in WRAPS + [0]] +
    [(f"convert chunk_scans={v}", "chunk_scans",
      lambda t, v=v: _npy(t, "convert", scan_shape=(2, 3), chunk_scans=v)) for v in WRAPS] +
    [(f"{c} raw_offset={v}", "raw_offset", lambda t, c=c, v=v: _raw(t, c, raw_offset=v))
     for c in ACQUISITION_CALLS for v in [-1, 2**62 + 1, 2**64 + 100]] +
    [(f"{c} raw_frame_header={v}", "raw_frame_header",
      lambda t, c=c, v=v: _raw(t, c, raw_frame_header=v))
     for c in ACQUISITION_CALLS for v in [-1, 2**64, 2**64 + 100]] +
    [(f"{c} raw_shape[0]={v}", r"raw_shape\[0\]",
      lambda t, c=c, v=v: _raw(t, c, raw_shape=(v, 2, 4, 4))) for c in ACQUISITION_CALLS
     for v in WRAPS + [0]] +
    [(f"{c} scan_shape[1]={v}", r"scan_shape\[1\]",
      lambda t, c=c, v=v: _npy(t, c, scan_shape=(2, v))) for c in ACQUISITION_CALLS
     for v in WRAPS + [0]]
)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_integer_arguments_refused_by_name(case, tmp_path):
    _, name, call = case
    with pytest.raises(ValueError, match=f"^{name} must be an integer from [0-9]+ to [0-9]+"):
        call(tmp_path)
    assert not [p for p in tmp_path.iterdir() if p.suffix in (".qem", ".h5", ".json")]


def test_integer_arguments_within_range_work(tmp_path):
    a = counts_array((2, 2, 4, 4), 24)
    a.tofile(tmp_path / "frames.bin")
    with open(tmp_path / "framed.bin", "wb") as f:
        f.write(b"H" * 100)
        for frame in a.reshape(-1, 4, 4):
            f.write(b"F" * 12)
            f.write(frame.tobytes())
    qem.convert(tmp_path / "framed.bin", tmp_path / "r.qem", raw_shape=(2, 2, 4, 4),
                raw_dtype="uint16", raw_offset=np.uint64(100), raw_frame_header=12,
                chunk_scans=np.int32(3))
    with qem.open(tmp_path / "r.qem") as f:
        np.testing.assert_array_equal(np.asarray(f), a)
        assert f.chunks == ((0, 3), (3, 4))


def test_scan_indices_beyond_int64_are_out_of_range(sources):
    with qem.open(sources["qem"]) as f:
        last = f.shape[0] * f.shape[1] - 1
        with pytest.raises(IndexError, match="scan_indices must lie in"):
            f.read(scan_indices=np.array([2**64 - 1], dtype=np.uint64))  # -1 as int64
        with pytest.raises(IndexError, match="scan_indices must lie in"):
            f.read(scan_indices=np.array([2**63], dtype=np.uint64))
        np.testing.assert_array_equal(f.read(scan_indices=np.array([last], dtype=np.uint64)),
                                      f.read(scan_indices=[-1]))


def test_dask_partition_and_region_are_integers(generated):
    import qem.dask as qd

    path = generated["u16"][0]
    for bad in (2**64 + 100, 0, -1):
        with pytest.raises(ValueError, match="^partition must be an integer from 1 to"):
            qd.mean(path, partition=bad)
    for bad in (2.5, True):
        with pytest.raises(TypeError, match="^partition must be an integer"):
            qd.mean(path, partition=bad)
    with pytest.raises(TypeError, match="^r1 must be an integer"):
        qd.region(path, 0, 2.0, 0, 2)
    with qem.open(path) as f:
        np.testing.assert_array_equal(qd.region(path, 0, np.int64(2), 0, 2),
                                      f.region(0, 2, 0, 2))


def test_pack_exclude_takes_a_path(tmp_path):
    a = counts_array((4, 8, 6, 5), 26)
    np.save(tmp_path / "a.npy", a)
    exclude = np.zeros((6, 5), bool)
    exclude[1, 1] = True
    np.save(tmp_path / "exclude.npy", exclude)
    want = qem.pack.produce(tmp_path / "a.npy", tmp_path / "array.h5", exclude=exclude)
    for k, path in enumerate([str(tmp_path / "exclude.npy"), tmp_path / "exclude.npy",
                              np.str_(tmp_path / "exclude.npy")]):
        got = qem.pack.produce(tmp_path / "a.npy", tmp_path / f"path{k}.h5", exclude=path)
        assert got["badPixelIndices"] == want["badPixelIndices"] == [6]
        with qem.open(tmp_path / f"path{k}.h5") as f:
            np.testing.assert_array_equal(f.valid, ~exclude)
    with pytest.raises(qem.Error, match="missing.npy"):
        qem.pack.produce(tmp_path / "a.npy", tmp_path / "m.h5", exclude=tmp_path / "missing.npy")
    with pytest.raises(TypeError, match=r"exclude must be booleans or 0/1 integers of the "
                                        r"detector's shape \(6, 5\)"):
        qem.pack.produce(tmp_path / "a.npy", tmp_path / "m.h5", exclude=np.array(["x"]))
    assert not (tmp_path / "m.h5").exists()


def test_dask_array_with_unknown_chunk_sizes(tmp_path):
    da = pytest.importorskip("dask.array")
    a = counts_array((4, 3, 4, 4), 27)
    x = da.from_array(a, chunks=(2, 3, 4, 4))
    unknown = x[x[:, 0, 0, 0] >= 0]  # boolean indexing: row counts unknown
    assert np.isnan(unknown.shape[0])
    with pytest.raises(ValueError, match=r"unknown \(NaN\).*compute_chunk_sizes\(\)"):
        qem.save(tmp_path / "u.qem", unknown)
    assert list(tmp_path.iterdir()) == []
    unknown.compute_chunk_sizes()
    qem.save(tmp_path / "u.qem", unknown)
    with qem.open(tmp_path / "u.qem") as f:
        np.testing.assert_array_equal(np.asarray(f), a)


def test_empty_axis_refused_before_any_work(tmp_path):
    """A 128-byte .npy declaring (0, 1, 3000000, 3000000) once made
    qem.inspect hash a 36 TB implicit mask; now every entry point refuses
    it at once (a child with a time limit, so a regression fails instead
    of hanging)."""
    header = "{'descr': '<u2', 'fortran_order': False, 'shape': (0, 1, 3000000, 3000000), }"
    header = header.ljust(117) + "\n"
    path = tmp_path / "empty.npy"
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode())
    assert path.stat().st_size == 128
    script = textwrap.dedent(f"""
        import qem
        for call in (lambda: qem.inspect({str(path)!r}),
                     lambda: qem.pack.inspect({str(path)!r}),
                     lambda: qem.convert({str(path)!r}, {str(tmp_path / 'e.qem')!r})):
            try:
                call()
                print("accepted")
            except qem.FormatError as e:
                print("refused:", e)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3 and all("has an empty dimension" in line for line in lines), lines
    assert not (tmp_path / "e.qem").exists()
