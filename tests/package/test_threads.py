"""The GIL is released while the library decodes: another Python thread
runs during a long read; two threads share one File and read exactly;
Ctrl-C stops a long read with KeyboardInterrupt."""
import signal
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
