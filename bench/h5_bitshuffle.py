"""The HDF5 layout 4D-STEM users get today, for qem-bench to compare with:
bitshuffle/LZ4 (Debian's python3-h5py and python3-hdf5plugin), one scan
row per chunk. Prints one JSON object of timings.

  h5_bitshuffle.py write SRC.npy DEST.h5          write through the filter (ds[r] = row),
                                                  memory bounded (a row); one thread: the
                                                  filter Debian's HDF5 loads has no OpenMP
  h5_bitshuffle.py write-direct SRC.npy DEST.h5   the same file, each row bitshuffled and
                                                  LZ4'd as the filter does (bitshuffle's
                                                  compress_lz4, on OMP_NUM_THREADS threads)
                                                  and written in row order with
                                                  write_direct_chunk
  h5_bitshuffle.py check SRC.npy DIR              whether write-direct writes the very
                                                  file write does, byte for byte
  h5_bitshuffle.py decode SRC.h5 RUNS [PROCS]     full decode, chunk by chunk; with
                                                  PROCS > 1, the rows split over that
                                                  many processes (h5py runs one thread
                                                  at a time in a process)
  h5_bitshuffle.py virtual SRC.h5 MASK.npy RUNS   decode + masked sum per scan
  h5_bitshuffle.py arina SRC.npy DIR              a Dectris Arina-style family in DIR:
                                                  bench_master.h5 linking
                                                  bench_data_000001.h5, uint32 frames,
                                                  one frame per bitshuffle/LZ4 chunk
  h5_bitshuffle.py emd SRC.npy DEST.emd           an EMD 1.0 file (the py4DSTEM layout):
                                                  one 4D array group, uncompressed,
                                                  chunks of one scan row
"""
import json
import os
import struct
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import h5py
import hdf5plugin
import numpy as np


def write(src, dest):
    data = np.load(src, mmap_mode="r")
    t0 = time.perf_counter()
    with h5py.File(dest, "w") as f:
        ds = f.create_dataset("data", shape=data.shape, dtype=data.dtype,
                              chunks=(1,) + data.shape[1:],
                              **hdf5plugin.Bitshuffle(cname="lz4"))
        for r in range(data.shape[0]):
            ds[r] = data[r]
    return {"seconds": time.perf_counter() - t0}


def _chunk(rows, r):
    """Row r as the bitshuffle filter stores it: the uncompressed size
    (8 bytes) and block size in bytes (4, both big-endian), then
    bshuf_compress_lz4 with the filter's default block (8 KiB)."""
    import bitshuffle
    row = np.ascontiguousarray(rows[r])
    block = 8192 // row.dtype.itemsize
    body = bitshuffle.compress_lz4(row, block)
    return struct.pack(">QI", row.nbytes, block * row.dtype.itemsize) + body.tobytes()


def write_direct(src, dest):
    """The file write() writes, each row compressed here by bitshuffle's
    own extension, whose OpenMP loop over the row's blocks runs on
    OMP_NUM_THREADS threads (the caller sets it), and written in row order
    with write_direct_chunk. Two worker processes, one thread each, were
    slower on the 2-core hosts (the compressed rows cross a pipe)."""
    data = np.load(src, mmap_mode="r")
    offset = (0,) * (data.ndim - 1)
    _chunk(data, 0)  # bitshuffle and its OpenMP team started before the clock
    t0 = time.perf_counter()
    with h5py.File(dest, "w") as f:
        ds = f.create_dataset("data", shape=data.shape, dtype=data.dtype,
                              chunks=(1,) + data.shape[1:],
                              **hdf5plugin.Bitshuffle(cname="lz4"))
        for r in range(data.shape[0]):
            ds.id.write_direct_chunk((r,) + offset, _chunk(data, r))
    return {"seconds": time.perf_counter() - t0}


def check(src, folder):
    """Whether the PROCS=2 path writes the very file the filter does."""
    one, two = folder + "/check_1.h5", folder + "/check_2.h5"
    write(src, one)
    write_direct(src, two)
    with open(one, "rb") as a, open(two, "rb") as b:
        same = a.read() == b.read()
    os.unlink(one)
    os.unlink(two)
    return {"identical": same}


def decode_rows(path, first, end):
    with h5py.File(path, "r") as f:
        ds = f["data"]
        for r in range(first, end):
            ds[r]
    return end - first


def decode(path, runs, processes=1):
    with h5py.File(path, "r") as f:
        shape = f["data"].shape
    best = float("inf")
    if processes <= 1:
        for _ in range(runs):
            t0 = time.perf_counter()
            decode_rows(path, 0, shape[0])
            best = min(best, time.perf_counter() - t0)
    else:
        bounds = [shape[0] * k // processes for k in range(processes + 1)]
        with ProcessPoolExecutor(processes) as pool:
            # Start the workers (and their imports) before any clock.
            list(pool.map(decode_rows, [path] * processes, [0] * processes, [0] * processes))
            for _ in range(runs):
                t0 = time.perf_counter()
                done = sum(pool.map(decode_rows, [path] * processes, bounds[:-1], bounds[1:]))
                best = min(best, time.perf_counter() - t0)
                assert done == shape[0]
    return {"seconds": best, "counts": int(np.prod(shape))}


def virtual(path, mask_path, runs):
    idx = np.nonzero(np.load(mask_path).astype(bool).ravel())[0]
    best, total = float("inf"), 0
    with h5py.File(path, "r") as f:
        ds = f["data"]
        for _ in range(runs):
            t0 = time.perf_counter()
            image = np.empty(ds.shape[:2], dtype=np.uint64)
            for r in range(ds.shape[0]):
                row = ds[r].reshape(ds.shape[1], -1)
                image[r] = row[:, idx].sum(axis=1, dtype=np.uint64)
            best = min(best, time.perf_counter() - t0)
            total = int(image.sum())
    return {"seconds": best, "total": total}


def arina(src, folder):
    data = np.load(src, mmap_mode="r")
    frames = data.reshape((-1,) + data.shape[2:])
    t0 = time.perf_counter()
    with h5py.File(folder + "/bench_data_000001.h5", "w") as f:
        ds = f.create_dataset("entry/data/data", shape=frames.shape, dtype="<u4",
                              chunks=(1,) + frames.shape[1:],
                              **hdf5plugin.Bitshuffle(cname="lz4"))
        step = data.shape[1]
        for k in range(0, frames.shape[0], step):
            ds[k:k + step] = frames[k:k + step].astype("<u4")
    with h5py.File(folder + "/bench_master.h5", "w") as f:
        group = f.create_group("entry/data")
        group["data_000001"] = h5py.ExternalLink("bench_data_000001.h5", "/entry/data/data")
        group.attrs["scan_shape"] = np.array(data.shape[:2], dtype=np.int64)
        f["entry/instrument/detector/bit_depth_image"] = np.uint32(32)
    return {"seconds": time.perf_counter() - t0}


def emd(src, dest):
    data = np.load(src, mmap_mode="r")
    t0 = time.perf_counter()
    with h5py.File(dest, "w") as f:
        f.attrs["version_major"] = 1
        f.attrs["version_minor"] = 0
        root = f.create_group("datacube_root")
        root.attrs["emd_group_type"] = "root"
        group = root.create_group("datacube")
        group.attrs["emd_group_type"] = "array"
        ds = group.create_dataset("data", shape=data.shape, dtype=data.dtype,
                                  chunks=(1,) + data.shape[1:])
        for r in range(data.shape[0]):
            ds[r] = data[r]
        for k, (name, units) in enumerate((("Rx", "pixels"), ("Ry", "pixels"),
                                           ("Qx", "pixels"), ("Qy", "pixels"))):
            dim = group.create_dataset("dim%d" % k, data=np.arange(data.shape[k]))
            dim.attrs["name"] = name
            dim.attrs["units"] = units
    return {"seconds": time.perf_counter() - t0}


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "write":
        result = write(sys.argv[2], sys.argv[3])
    elif command == "write-direct":
        result = write_direct(sys.argv[2], sys.argv[3])
    elif command == "check":
        result = check(sys.argv[2], sys.argv[3])
    elif command == "decode":
        result = decode(sys.argv[2], int(sys.argv[3]),
                        int(sys.argv[4]) if len(sys.argv) > 4 else 1)
    elif command == "arina":
        result = arina(sys.argv[2], sys.argv[3])
    elif command == "emd":
        result = emd(sys.argv[2], sys.argv[3])
    elif command == "virtual":
        result = virtual(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(__doc__)
    print(json.dumps(result))
