"""The GIL is released while the library decodes: another Python thread
runs during a long read; two threads share one File and read exactly;
Ctrl-C stops a long read, and the hashing of a large source, with
KeyboardInterrupt."""
import signal
import subprocess
import textwrap
import threading
import time

import numpy as np
import pytest

import qem
from conftest import interruptible_python


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    """128 MiB of counts (128 x 128 scans of 64 x 64 uint16)."""
    d = tmp_path_factory.mktemp("large")
    rng = np.random.default_rng(5)

    def blocks():
        for _ in range(16):
            yield rng.poisson(2.0, (1024, 64, 64)).astype(np.uint16)

    qem.save(d / "large.qem", blocks(), shape=(128, 128, 64, 64), dtype=np.uint16)
    return d / "large.qem"


def test_other_threads_run_during_a_read(large):
    with qem.open(large, threads=1) as f:
        stamps, stop = [], threading.Event()

        def count():
            while not stop.is_set():
                stamps.append(time.perf_counter())

        t = threading.Thread(target=count)
        t.start()
        time.sleep(0.05)
        t0 = time.perf_counter()
        whole = f.read()  # one call into the library, ~128 MiB decoded
        t1 = time.perf_counter()
        stop.set()
        t.join()
    middle = [s for s in stamps if t0 + 0.25 * (t1 - t0) < s < t1 - 0.25 * (t1 - t0)]
    # With the GIL held through the call, no stamp could be taken inside it.
    assert len(middle) >= 3, (t1 - t0, len(stamps))
    assert whole.shape == (128, 128, 64, 64)


def test_two_threads_share_one_file(large):
    with qem.open(large, threads=1) as f:
        want = [f.read(scan_region=(r, r + 8, 0, 128)) for r in range(0, 128, 32)]
        errors, got = [], {}

        def reader(k):
            try:
                for r in range(0, 128, 32):
                    got[(k, r)] = f.read(scan_region=(r, r + 8, 0, 128))
                got[(k, "bf")] = f.virtual(np.ones((64, 64), bool))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=reader, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        for k in range(2):
            for i, r in enumerate(range(0, 128, 32)):
                np.testing.assert_array_equal(got[(k, r)], want[i])
        np.testing.assert_array_equal(got[(0, "bf")], got[(1, "bf")])


def test_ctrl_c_stops_a_long_read(large):
    script = textwrap.dedent(f"""
        import sys, qem
        f = qem.open({str(large)!r}, threads=1)
        print("open", flush=True)
        try:
            while True:
                f.read()
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(3)
    """)
    with interruptible_python(script) as p:
        assert p.stdout.readline() == "open\n"
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=60)
    assert p.returncode == 3 and "interrupted" in out


@pytest.fixture(scope="module")
def huge_sources(tmp_path_factory):
    """Sources of 64 GiB each whose bodies are holes (no disk used): hashing
    one takes tens of seconds, so a call that does not watch for Ctrl-C
    while hashing keeps going long after SIGINT."""
    h5py = pytest.importorskip("h5py")
    d = tmp_path_factory.mktemp("huge")
    shape = (512, 256, 512, 512)  # uint16: 64 GiB
    m = np.lib.format.open_memmap(d / "huge.npy", mode="w+", dtype=np.uint16, shape=shape)
    del m
    with h5py.File(d / "huge.h5", "w") as f:
        f.create_dataset("data", shape=shape, dtype=np.uint16)[-1, -1, -1, -1] = 1
    for name in ("huge.npy", "huge.h5"):
        st = (d / name).stat()
        assert st.st_size >= 64 << 30 and st.st_blocks * 512 < 64 << 20, name
    return d


HASHING_CALLS = {
    "pack.produce": "qem.pack.produce(d + '/huge.npy', out + '/p.h5')",
    "pack.inspect": "qem.pack.inspect(d + '/huge.npy')",
    "inspect": "qem.inspect(d + '/huge.npy')",
    "convert HDF5": "qem.convert(d + '/huge.h5', out + '/c.qem')",
}


@pytest.mark.parametrize("call", sorted(HASHING_CALLS))
def test_ctrl_c_stops_hashing_a_source(call, huge_sources, tmp_path):
    """The source is hashed before anything is read (pack inspection, the
    re-authentication before the first shard, HDF5 before a save): SIGINT
    there raises KeyboardInterrupt within seconds and leaves nothing."""
    script = textwrap.dedent(f"""
        import sys, time, qem
        d, out = {str(huge_sources)!r}, {str(tmp_path)!r}
        print("go", flush=True)
        try:
            {HASHING_CALLS[call]}
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(3)
    """)
    with interruptible_python(script) as p:
        assert p.stdout.readline() == "go\n"
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        t0 = time.perf_counter()
        try:
            out, _ = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{call} still running 10 s after SIGINT")
        waited = time.perf_counter() - t0
    assert p.returncode == 3 and "interrupted" in out
    assert waited < 5, waited
    assert list(tmp_path.iterdir()) == []


def test_opening_tells_progress_and_stops(large):
    """Opening hashes the file (expect_sha256, then every body block): the
    progress callable hears it, and an exception it raises (as Ctrl-C's
    KeyboardInterrupt does there) stops the open."""
    import hashlib
    digest = hashlib.sha256(large.read_bytes()).hexdigest()
    heard = []
    with qem.open(large, expect_sha256=digest, progress=lambda d, t: heard.append((d, t))) as f:
        assert f.shape == (128, 128, 64, 64)
    size = large.stat().st_size
    assert heard[0][1] == size and heard[-1][0] == heard[-1][1] < size

    def stop(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        qem.open(large, progress=stop)
    with pytest.raises(KeyboardInterrupt):
        qem.open(large, expect_sha256=digest, progress=stop)
