"""qem.dask on a LocalCluster: one against two single-threaded worker
processes for virtual BF, CoM and a distributed save, and the Dask path
against the single-process C path on the same data (make
bench-distributed). Nothing asserts; prints a table and replaces the
marked section of doc/benchmarks.md.

  bench_distributed.py --qem BUILD/qem --synth BUILD/bench/qem-synth
                       [--sets A,B] [--runs N] [--workdir DIR] [--markdown FILE]
"""
import argparse
import os
import platform
import statistics
import subprocess
import tempfile
import time

import qem
import qem.dask as qd

from bench_markdown import replace_section

BEGIN, END = "<!-- qem-bench-distributed:begin -->", "<!-- qem-bench-distributed:end -->"
SETS = {"A": ("128,128,128,128", "0.3"), "B": ("256,256,128,128", "4")}


def timed(fn, runs):
    t = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return min(t), statistics.median(t)


def save_and_remove(dest, f, client):
    qem.save(dest, f.to_dask(), client=client)
    os.unlink(dest)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--qem", required=True)
    ap.add_argument("--synth", required=True)
    ap.add_argument("--sets", default="A")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--markdown", default=None)
    args = ap.parse_args()
    from distributed import Client, LocalCluster

    rows = []
    load = os.getloadavg()[0]
    for name in args.sets.split(","):
        shape, dose = SETS[name]
        with tempfile.TemporaryDirectory(dir=args.workdir) as d:
            npy, path = os.path.join(d, "a.npy"), os.path.join(d, "a.qem")
            subprocess.run([args.synth, npy, "--shape", shape, "--dose", dose], check=True)
            subprocess.run([args.qem, "save", "--quiet", npy, path], check=True)
            os.unlink(npy)
            f = qem.open(path, threads=1)
            mb = f.nbytes / 1e6
            # The BF detector resolved once: an estimate without geometry is
            # a pass over the file on the client, not the product measured.
            bf = f.detector_mask("bf")[0]
            c_bf = timed(lambda: f.virtual(bf), args.runs)
            c_com = timed(lambda: f.com(), args.runs)
            res = {}
            for workers in (1, 2):
                with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, Client(cluster) as client:
                    qd.virtual(path, bf, client=client)  # warm the workers' files
                    res[workers] = (
                        timed(lambda: qd.virtual(path, bf, client=client), args.runs),
                        timed(lambda: qd.com(path, client=client), args.runs),
                        timed(lambda: save_and_remove(os.path.join(d, "out.qem"), f, client), 1))
            f.close()
            for k, label in enumerate(("virtual BF (detector resolved once)", "CoM",
                                      "save (Dask array of the file)")):
                one, two = res[1][k], res[2][k]
                note = f"2 workers {one[0] / two[0]:.2f}x 1 (target >= 1.7x)"
                if k < 2:
                    c = (c_bf, c_com)[k]
                    note += (f"; 1 worker vs the C path (threads=1, {c[0]:.3f} s): "
                             f"{100 * (one[0] / c[0] - 1):+.0f} % (target <= 15 %)")
                rows.append((f"set {name} ({mb:.0f} MB): {label}", one[0], two[0],
                             mb / two[0], note))
    text = [f"Machine: {platform.machine()}, {os.cpu_count()} cores, load {load:.1f} at the "
            f"start; qem {qem.__version__}; LocalCluster(processes=True, threads_per_worker=1). "
            f"Seconds, min of {args.runs} runs (saves: 1 run).", "",
            "| measurement | 1 worker s | 2 workers s | MB/s (2 workers) | note |",
            "|---|---:|---:|---:|---|"]
    for label, one, two, rate, note in rows:
        text.append(f"| {label} | {one:.3f} | {two:.3f} | {rate:.0f} | {note} |")
    section = "\n".join(text) + "\n"
    print(section)
    if args.markdown:
        replace_section(args.markdown, BEGIN, END, "Distributed (`make bench-distributed`)", section)


if __name__ == "__main__":
    main()
