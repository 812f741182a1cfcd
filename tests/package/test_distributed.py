"""qem.dask and qem.save(client=...) on a LocalCluster of two
single-threaded worker processes: products equal the single-process ones
(integers and per-scan products bit for bit, float pattern sums within
one float32 rounding), a distributed save writes the serial writer's
bytes, a killed worker never gives a wrong result, and a file changed
between tasks fails with the library's error."""
import os
import signal
import threading
import time

import numpy as np
import pytest

import qem
import qem.dask as qd
from conftest import counts_array

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None)
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


def all_files(generated, fixtures):
    files = [path for path, _ in generated.values()]
    files += [fixtures / "qem" / f"{n}.qem" for n in
              ("u8_sparse_lowdose", "u16_nonsquare_masked", "f32_special_bits",
               "scaled_u16_regions")]
    files += [fixtures / "pack" / f"{n}.h5" for n in
              ("v1_u16_excluded_retained", "v3_upstream_test_writer_notes_v3")]
    return files


def same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


def test_products_equal_single_process(generated, fixtures, client):
    for path in all_files(generated, fixtures):
        with qem.open(path) as f:
            integer = f.dtype != np.float32
            rows, cols = f.shape[:2]
            mask = np.zeros(f.shape[2:], bool)
            mask[1:-1:2, ::3] = True
            for partition in (None, 7):
                same(qd.virtual(path, mask, client=client, partition=partition), f.virtual(mask))
                same(qd.com(path, client=client, partition=partition), f.com())
                same(qd.com(path, subtract_mean=True, client=client, partition=partition),
                     f.com(subtract_mean=True))
                r = (0, max(1, rows - 1), min(1, cols - 1), cols)
                for reduce in ("sum", "max", "mean"):
                    got = qd.region(path, *r, reduce, client=client, partition=partition)
                    want = f.region(*r, reduce=reduce)
                    if integer or reduce == "max":
                        same(got, want)
                    else:
                        np.testing.assert_allclose(got, want, rtol=2e-7, atol=1e-30)
                got, want = qd.mean(path, client=client, partition=partition), f.mean()
                if integer or partition is None and len(f.chunks) == 1:
                    same(got, want)
                else:
                    np.testing.assert_allclose(got, want, rtol=2e-7, atol=1e-30)
            same(qd.virtual(path, detector="bf", client=client), f.virtual(detector="bf"))


def test_local_scheduler_without_a_client(generated):
    path, _ = generated["u16"]
    with qem.open(path) as f:
        same(qd.mean(path, partition=10), f.mean())


def test_series_of_three(generated, tmp_path, client):
    paths = []
    for k in range(3):
        a = counts_array((4, 5, 12, 10), 30 + k)
        paths.append(qem.save(tmp_path / f"t{k}.qem", a))
    images = qd.virtual_series(paths, detector="adf", center=(6, 5), radius=2, client=client)
    for p, im in zip(paths, images):
        with qem.open(p) as f:
            same(im, f.virtual(detector="adf", center=(6, 5), radius=2))
    with pytest.raises(ValueError, match="detector shape"):
        qd.virtual_series([paths[0], generated["u8"][0]], detector="bf", client=client)


def test_distributed_save_is_the_serial_bytes(tmp_path, client, cli):
    import dask.array as da

    for dtype in (np.uint16, np.uint8, np.float32):
        a = counts_array((16, 20, 12, 10), 40, np.uint16 if dtype == np.float32 else dtype,
                         dose=30).astype(dtype)
        if dtype == np.float32:
            a = a * np.float32(0.3) - np.float32(1.5)
        x = da.from_array(a, chunks=(3, 7, 12, 10))
        valid = np.ones((12, 10), bool)
        if dtype != np.float32:
            valid[3, 4] = False
        extra = {} if dtype == np.float32 else {"valid": valid}
        serial = qem.save(tmp_path / f"serial-{a.dtype}.qem", x, chunk_scans=48, **extra)
        spread = qem.save(tmp_path / f"spread-{a.dtype}.qem", x, chunk_scans=48, client=client,
                          max_in_flight=3, **extra)
        assert open(serial, "rb").read() == open(spread, "rb").read()
        cli("verify", spread)
    with pytest.raises(TypeError, match="Dask array"):
        qem.save(tmp_path / "n.qem", np.zeros((2, 2, 2, 2), np.uint16), client=client)
    assert not (tmp_path / "n.qem").exists()
    # A value that does not fit fails on the worker: nothing is written.
    bad = np.zeros((4, 4, 3, 3), np.int32)
    bad[3, 2, 1, 1] = 70000
    with pytest.raises(ValueError, match="holds 70000"):
        qem.save(tmp_path / "bad.qem", da.from_array(bad, chunks=(1, 4, 3, 3)), chunk_scans=4,
                 client=client)
    assert not (tmp_path / "bad.qem").exists()


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A file that takes the workers a few seconds: 64 MiB, 256 chunks."""
    d = tmp_path_factory.mktemp("big")
    rng = np.random.default_rng(2)

    def blocks():
        for _ in range(16):
            yield rng.poisson(1.0, (1024, 32, 64)).astype(np.uint16)

    return qem.save(d / "big.qem", blocks(), shape=(128, 128, 32, 64), dtype=np.uint16,
                    chunk_scans=64)


class Killer:
    """Kills one worker process `delay` seconds from now; afterwards says
    whether the kill fell inside the computation and that a new worker took
    its place (so the test cannot pass vacuously)."""

    def __init__(self, client, delay):
        self.client = client
        self.pids = set(client.run(os.getpid).values())
        self.killed_at = None
        self.thread = threading.Thread(target=self._kill, args=(delay,))
        self.thread.start()

    def _kill(self, delay):
        time.sleep(delay)
        self.killed_at = time.perf_counter()
        os.kill(sorted(self.pids)[0], signal.SIGKILL)

    def check(self, finished_at):
        self.thread.join()
        self.client.wait_for_workers(2, timeout=60)
        assert self.killed_at < finished_at, "the work ended before the kill: make it longer"
        assert set(self.client.run(os.getpid).values()) != self.pids


def test_killed_worker_during_a_product(big, client):
    with qem.open(big) as f:
        want = f.virtual(detector="bf")
    killer = Killer(client, 0.3)
    try:
        got = qd.virtual(big, detector="bf", client=client, partition=16)
        same(got, want)  # Dask ran the lost tasks again elsewhere
    except distributed.KilledWorker:  # or it says so; never a wrong image
        pass
    killer.check(time.perf_counter())


def test_killed_worker_during_a_save(big, tmp_path, client):
    import dask.array as da

    with qem.open(big) as f:
        x = f.to_dask()
        serial = qem.save(tmp_path / "serial.qem", x, chunk_scans=128)
        dense = da.from_array(np.asarray(f), chunks=(8, 128, 32, 64))
        killer = Killer(client, 0.3)
        dest = tmp_path / "spread.qem"
        try:
            qem.save(dest, dense, chunk_scans=128, client=client)
            assert open(serial, "rb").read() == open(dest, "rb").read()
        except distributed.KilledWorker:
            assert not dest.exists()
        killer.check(time.perf_counter())


def test_file_changed_between_tasks(tmp_path, client):
    a = counts_array((8, 8, 6, 6), 50)
    path = qem.save(tmp_path / "c.qem", a, chunk_scans=16)
    # A task of a graph made before the file was replaced names the old
    # stamp: it fails instead of reading the new file.
    mask = np.ones((6, 6), bool)
    same(qd.virtual(path, mask, client=client, partition=16),
         (a.astype(np.uint64) * mask).sum(axis=(2, 3)).astype(np.uint32))
    src = qd._Source(path)
    os.unlink(path)
    qem.save(path, a + 1, chunk_scans=16)
    from dask import delayed

    def task():  # a new key each time: the scheduler remembers erred ones
        return delayed(qd._part, pure=False)(src.path, src.options, src.stamp, "virtual", 0, 16,
                                             mask)

    with pytest.raises(qem.ChangedError, match="changed after the computation was set up"):
        client.compute(task()).result()
    os.unlink(path)
    with pytest.raises(qem.FileSystemError, match="cannot open"):
        client.compute(task()).result()
