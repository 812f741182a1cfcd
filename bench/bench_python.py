"""The Python package side by side with the C path, h5py, numpy and Dask,
in one run (make bench-python). Nothing here asserts; it prints a table
and replaces the marked section of doc/benchmarks.md.

  bench_python.py --qem BUILD/qem --synth BUILD/bench/qem-synth
                  --libqem BUILD/libqem.so [--runs N] [--workdir DIR]
                  [--markdown doc/benchmarks.md]

Data: set A (128 x 128 scans of 128 x 128 uint16, dose 0.3, 512 MiB),
as .qem, as a dense .npy (memmapped) and as HDF5 bitshuffle/LZ4 with one
frame per chunk (Debian's h5py + hdf5plugin).
"""
import argparse
import ctypes
import os
import platform
import statistics
import subprocess
import tempfile
import threading
import time

import numpy as np

import qem

from bench_markdown import replace_section

BEGIN, END = "<!-- qem-bench-python:begin -->", "<!-- qem-bench-python:end -->"


def timed(fn, runs):
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


class CPath:
    """qem_products_virtual through ctypes on libqem.so: the C path the
    package wraps, without the package."""

    class Image(ctypes.Structure):
        _fields_ = [("dtype", ctypes.c_int), ("ndim", ctypes.c_uint),
                    ("shape", ctypes.c_uint64 * 3), ("data", ctypes.c_void_p)]

    def __init__(self, lib, path):
        self.lib = ctypes.CDLL(lib)
        self.c = ctypes.c_void_p()
        self.p = ctypes.c_void_p()
        if self.lib.qem_container_open(path.encode(), None, ctypes.byref(self.c), None) != 0:
            raise RuntimeError("qem_container_open failed")
        if self.lib.qem_products_open(self.c, None, ctypes.byref(self.p), None) != 0:
            raise RuntimeError("qem_products_open failed")

    def virtual(self, mask):
        image = self.Image()
        m = np.ascontiguousarray(mask, dtype=np.uint8)
        if self.lib.qem_products_virtual(self.p, m.ctypes.data_as(ctypes.c_void_p),
                                         ctypes.byref(image), None) != 0:
            raise RuntimeError("qem_products_virtual failed")
        self.lib.qem_image_free(ctypes.byref(image))

    def close(self):
        self.lib.qem_products_close(self.p)
        self.lib.qem_container_close(self.c)


def make_data(args, d):
    npy, qf, h5, pk = (os.path.join(d, n) for n in ("a.npy", "a.qem", "a.h5", "a.pack.h5"))
    subprocess.run([args.synth, npy, "--shape", "128,128,128,128", "--dose", "0.3",
                    "--seed", "20261129"], check=True)
    subprocess.run([args.qem, "save", "--quiet", npy, qf], check=True)
    subprocess.run([args.qem, "pack", "produce", "--quiet", npy, pk], check=True)
    import h5py
    import hdf5plugin

    a = np.load(npy, mmap_mode="r")
    with h5py.File(h5, "w") as f:
        ds = f.create_dataset("data", shape=a.shape, dtype=a.dtype,
                              chunks=(1, 1) + a.shape[2:], **hdf5plugin.Bitshuffle(cname="lz4"))
        for r in range(a.shape[0]):
            ds[r] = a[r]
    return npy, qf, h5, pk


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--qem", required=True)
    ap.add_argument("--synth", required=True)
    ap.add_argument("--libqem", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--markdown", default=None)
    args = ap.parse_args()
    import dask.array as da
    import h5py
    import hdf5plugin  # registers the filter for h5py

    assert hdf5plugin
    rows = []
    with tempfile.TemporaryDirectory(dir=args.workdir) as d:
        npy, qf, h5, pk = make_data(args, d)
        mm = np.load(npy, mmap_mode="r")
        S, P = mm.shape[0] * mm.shape[1], mm.shape[2] * mm.shape[3]
        yy, xx = np.indices(mm.shape[2:])
        mask = (yy - 64) ** 2 + (xx - 64) ** 2 <= 20 ** 2
        idx = np.flatnonzero(mask)
        runs = args.runs

        # 1. Whole-scan product: the package against the C path, same call.
        c = CPath(args.libqem, qf)
        f = qem.open(qf)
        # Interleaved, more runs: the difference is small beside the noise.
        c_times, py_times = [], []
        for _ in range(max(7, runs)):
            c_times.append(timed(lambda: c.virtual(mask), 1)[0])
            py_times.append(timed(lambda: f.virtual(mask), 1)[0])
        c.close()
        c_min, c_med = min(c_times), statistics.median(c_times)
        py_min, py_med = min(py_times), statistics.median(py_times)
        rows.append(("virtual BF, .qem: C (ctypes on libqem.so)", c_min, c_med, ""))
        rows.append(("virtual BF, .qem: qem package", py_min, py_med,
                     f"overhead {100 * (py_med / c_med - 1):+.1f} % of the median (target <= 5 %)"))

        # 2. Virtual BF against numpy on the memmap and Dask over HDF5.
        def numpy_bf():
            out = np.empty(S, np.uint64)
            flat = mm.reshape(S, P)
            for k in range(0, S, 1024):
                out[k:k + 1024] = flat[k:k + 1024][:, idx].sum(axis=1, dtype=np.uint64)
            return out

        np_min, np_med = timed(numpy_bf, runs)
        rows.append(("virtual BF: numpy on the dense .npy memmap", np_min, np_med,
                     f"qem {np_min / py_min:.2f}x faster"))
        with h5py.File(h5, "r") as hf:
            x = da.from_array(hf["data"], chunks=(8, 128, 128, 128))
            dask_bf = lambda: (x.reshape(S, P)[:, idx].sum(axis=1, dtype=np.uint64)  # noqa: E731
                               ).compute(scheduler="threads")
            dk_min, dk_med = timed(dask_bf, 1)
        rows.append(("virtual BF: Dask over HDF5 bitshuffle/LZ4 (1 run)", dk_min, dk_med,
                     f"qem {dk_min / py_min:.2f}x faster"))

        # 3. Random single patterns: qem against h5py, one-frame chunks.
        rng = np.random.default_rng(1)
        picks = rng.integers(0, 128, size=(300, 2))
        lat_q, lat_p, lat_h = [], [], []
        for r, cc in picks:
            t0 = time.perf_counter()
            f[int(r), int(cc)]
            lat_q.append(time.perf_counter() - t0)
        with qem.open(pk) as pf:
            for r, cc in picks:
                t0 = time.perf_counter()
                pf[int(r), int(cc)]
                lat_p.append(time.perf_counter() - t0)
        with h5py.File(h5, "r") as hf:
            ds = hf["data"]
            for r, cc in picks:
                t0 = time.perf_counter()
                ds[int(r), int(cc)]
                lat_h.append(time.perf_counter() - t0)
        for name, lat in (("random pattern, qem f[r, c] on .qem", lat_q),
                          ("random pattern, qem f[r, c] on the pack (resident)", lat_p),
                          ("random pattern, h5py ds[r, c] (bitshuffle/LZ4)", lat_h)):
            rows.append((name, statistics.median(lat), float(np.percentile(lat, 95)),
                         "latency: the two columns are median / p95 of 300"))

        # 4. Two Python threads reading at once (threads=1 each): the GIL is
        # released, so the second thread adds a core.
        g = qem.open(qf, threads=1)

        def read_rows(r0, r1):
            for r in range(r0, r1, 8):
                g.read(scan_region=(r, min(r + 8, r1), 0, 128))

        one_min, one_med = timed(lambda: read_rows(0, 64), runs)

        def two():
            ts = [threading.Thread(target=read_rows, args=(0, 64)),
                  threading.Thread(target=read_rows, args=(64, 128))]
            for t in ts:
                t.start()
            for t in ts:
                t.join()

        two_min, two_med = timed(two, runs)
        rows.append(("read 64 scan rows, 1 thread (threads=1)", one_min, one_med, ""))
        rows.append(("read 128 scan rows, 2 threads (threads=1 each)", two_min, two_med,
                     f"throughput {2 * one_min / two_min:.2f}x one thread (target >= 1.7x)"))
        g.close()
        f.close()

    load = os.getloadavg()
    text = [f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
            f"load {load[0]:.1f} at the start of the table; Python {platform.python_version()}, "
            f"numpy {np.__version__}, qem {qem.__version__}. Set A (512 MiB of uint16); "
            f"times in seconds, min / median of {args.runs} runs.", "",
            "| measurement | min | median | note |", "|---|---:|---:|---|"]
    for name, lo, med, note in rows:
        text.append(f"| {name} | {lo:.4f} | {med:.4f} | {note} |")
    section = "\n".join(text) + "\n"
    print(section)
    if args.markdown:
        replace_section(args.markdown, BEGIN, END, "The Python package (`make bench-python`)", section)


if __name__ == "__main__":
    main()
