"""qem at scale (make bench-scale, issue 29): the 512 set (512 x 512 scans
of 192 x 192 uint16, 19.3 GB as .npy, dose 4, synthetic), as .qem and as
a u16-LZ4 pack, measured beside a plain C loop over the mapped .npy, with
warm page cache, on every core. Nothing here asserts; it prints the
conditions and a table against the targets, and replaces the marked "At
scale" section of doc/benchmarks.md.

  bench_scale.py --viewer BUILD/bench/qem-bench-viewer --qem BUILD/qem
                 [--workdir /var/tmp/qem-scale] [--shape 512,512,192,192]
                 [--runs 3] [--moves 200] [--patterns 300]
                 [--only save] [--save-dir DIR] [--save-timeout S]
                 [--markdown doc/benchmarks.md] [--command TEXT]

The set is generated once into --workdir by qem-bench-viewer (its .npy,
.qem, pack and calibrated copies, kept) and reused when present. Measured:

- qem view (qem-bench-viewer --more, loopback HTTP as the page): 1-pixel
  BF moves, an ADF ring resized one pixel at a time, a rectangle moved one
  pixel at a time (p50 / p95 / max); the pattern at the cursor at random
  positions and hovering along a row; the first image of the file as qem
  wrote it and of a copy that records its calibration; the server's peak
  RSS (VmHWM);
- the pack's load phases (qem info --json --timings);
- Python (this interpreter: the repository's venv): f[r, c] at random
  positions and a full BF virtual image, on .qem with qem.open(path) and
  with qem.open(path, resident=True) and resident="mapped", and on the
  pack, each in its own process;
- the same BF image by a plain C loop over the mapped .npy (qem-bench-viewer
  --dense); its sum is checked against qem's;
- writing the set (issue 31), last, one run each, one after the other, on 2
  threads: `qem save SRC.npy OUT.qem --threads 2`, `qem pack produce` (u16-LZ4;
  `--threads 2` where its --help lists it) and HDF5 bitshuffle/LZ4 by direct
  chunk writes, bitshuffle on 2 OpenMP threads (bench/h5_bitshuffle.py write-direct),
  into --save-dir (default: a folder in --workdir), each output deleted once
  measured. --only save runs these rows alone and only prints them;
  --save-timeout stops a writer that runs longer (the row says so).

Nothing allocates the dense cube: the .npy is only mapped.
"""
import argparse
import ctypes
import tempfile
import hashlib
import json
import mmap
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

BEGIN, END = "<!-- qem-bench-scale:begin -->", "<!-- qem-bench-scale:end -->"
HEADING = "At scale (`make bench-scale`, issue 29)"
MIB = 1 << 20
GIB = 1 << 30

# Targets (issue 29).
MOVE_P95_MS, MOVE_MAX_MS = 16.7, 33.0
PATTERN_P95_MS = {"qem": 10.0, "pack": 5.0}
HOVER_P95_MS = 2.0
FIRST_IMAGE_S = {"qem": 0.3, "pack": 1.2}
PACK_LOAD_S = 1.2
SECOND_OPEN_S = 0.3  # the second open of a file without prepared values
PY_PATTERN_P95_MS = 10.0
PY_BF_S = 0.5
LABEL = {"qem": ".qem", "pack": "pack"}


# --- conditions ----------------------------------------------------------------

def cpu_model():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def meminfo():
    out = {}
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                k, v = line.split(":", 1)
                out[k] = int(v.split()[0]) * 1024
    except OSError:
        pass
    return out


def loadavg():
    return os.getloadavg()


def resident_bytes(path):
    """Bytes of `path` in the page cache: fincore (util-linux) when
    present, else mmap + mincore through ctypes."""
    if shutil.which("fincore"):
        r = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "-o", "RES", path],
                           capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip().isdigit():
            return int(r.stdout.strip())
    size = os.path.getsize(path)
    if size == 0:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    page = mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        base = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if base in (None, ctypes.c_void_p(-1).value):
            return -1
        vec = (ctypes.c_ubyte * ((size + page - 1) // page))()
        rc = libc.mincore(base, size, vec)
        libc.munmap(base, size)
        return -1 if rc else sum(v & 1 for v in vec) * page
    finally:
        os.close(fd)


def cache_line(paths):
    parts = []
    for p in paths:
        if os.path.exists(p):
            size = os.path.getsize(p)
            res = resident_bytes(p)
            pct = 100.0 * res / size if size and res >= 0 else float("nan")
            parts.append(f"{os.path.basename(p)} {pct:.0f} % of {fmt_size(size)}")
    return "; ".join(parts)


def memory_monitor():
    """The kernel's DAMON monitors that run: each sample clears the accessed
    bits of pages across memory, which on this paravirtual guest costs the
    next touch of each a fault; moves show it as a stall each interval."""
    root = "/sys/kernel/mm/damon/admin/kdamonds"

    def read(path):
        try:
            with open(path) as fh:
                return fh.read().strip()
        except OSError:
            return ""
    try:
        names = sorted(n for n in os.listdir(root) if n.isdigit())
    except OSError:
        return "no DAMON monitor (kdamond) running"
    running = []
    for n in names:
        if read(f"{root}/{n}/state") != "on":
            continue
        ctx = f"{root}/{n}/contexts/0"
        sample = read(f"{ctx}/monitoring_attrs/intervals/sample_us")
        try:
            schemes = sorted(os.listdir(f"{ctx}/schemes"))
        except OSError:
            schemes = []
        actions = [read(f"{ctx}/schemes/{k}/action") for k in schemes if k.isdigit()]
        every = f"sampling every {int(sample) / 1000:g} ms" if sample.isdigit() else "sampling"
        running.append(f"kdamond {n} on ({read(f'{ctx}/operations') or '?'}, {every}"
                       + (f", {', '.join(a for a in actions if a)}" if any(actions) else "") + ")")
    return "DAMON: " + "; ".join(running) if running else "no DAMON monitor (kdamond) running"


def conditions(label, paths):
    m = meminfo()
    la = loadavg()
    text = (f"{label}: load average {la[0]:.2f} / {la[1]:.2f} / {la[2]:.2f} (1 / 5 / 15 min); "
            f"memory: {m.get('MemTotal', 0) / GIB:.1f} GiB total, "
            f"{m.get('MemAvailable', 0) / GIB:.1f} GiB available, "
            f"{m.get('MemFree', 0) / GIB:.1f} GiB free, {m.get('Cached', 0) / GIB:.1f} GiB page cache; "
            f"in the page cache: {cache_line(paths)}")
    print(text, flush=True)
    return text


def warm(path):
    """Reads `path` once so that its pages are cached."""
    with open(path, "rb", buffering=0) as fh:
        while fh.read(16 * MIB):
            pass


def other_generators(workdir):
    """qem-bench-viewer processes (other than ours) on the same workdir:
    a set still being generated must not be read, nor generated twice."""
    found = []
    real = os.path.realpath(workdir)
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if not argv or not argv[0].endswith(b"qem-bench-viewer"):
            continue
        args = [a.decode(errors="replace") for a in argv]
        if "--workdir" in args:
            i = args.index("--workdir")
            if i + 1 < len(args) and os.path.realpath(args[i + 1]) == real:
                found.append(int(pid))
    return found


# --- the Python measurements (one process each) ---------------------------------

def child(args):
    import resource

    import numpy as np

    import qem

    opts = json.loads(args.child_options)
    t0 = time.perf_counter()
    f = qem.open(args.child, **opts)
    open_s = time.perf_counter() - t0
    rows, cols = f.shape[0], f.shape[1]
    rng = np.random.default_rng(20261202)
    picks = rng.integers(0, [rows, cols], size=(args.patterns, 2))
    lat = []
    for r, c in picks:
        t = time.perf_counter()
        f[int(r), int(c)]
        lat.append(time.perf_counter() - t)
    mask, _ = f.detector_mask("bf", center=(args.bf[0], args.bf[1]), radius=args.bf[2])
    mask = np.ascontiguousarray(mask, dtype=np.uint8)
    if args.child_mask_out:
        mask.tofile(args.child_mask_out)
    bf, total = [], None
    for _ in range(args.runs):
        t = time.perf_counter()
        img = f.virtual(mask)
        bf.append(time.perf_counter() - t)
        total = int(img.sum(dtype=np.uint64))
    # The CoM over every pixel (what DPC starts from): once, it decodes all.
    t = time.perf_counter()
    com = f.com()
    com_s = time.perf_counter() - t
    com_origin = f.last_origin
    com_digest = hashlib.sha256(np.ascontiguousarray(com).tobytes()).hexdigest()
    f.close()
    lat_ms = sorted(x * 1e3 for x in lat)
    out = {"open_s": open_s,
           "pattern_p50_ms": statistics.median(lat_ms),
           "pattern_p95_ms": float(np.percentile(lat_ms, 95)),
           "pattern_max_ms": lat_ms[-1],
           "pattern_first_ms": lat[0] * 1e3,
           "bf_s": bf, "bf_sum": total, "mask_pixels": int(mask.sum()),
           "com_s": com_s, "com_origin": com_origin, "com_sha256": com_digest,
           "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    print(json.dumps(out))


def python_measure(args, path, options, bf, mask_out=None):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", path,
           "--child-options", json.dumps(options), "--patterns", str(args.patterns),
           "--runs", str(args.runs), "--bf", *(str(v) for v in bf)]
    if mask_out:
        cmd += ["--child-mask-out", mask_out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stderr, file=sys.stderr)
        return {"error": (r.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(r.stdout.strip().splitlines()[-1])


# --- writing the set (issue 31) --------------------------------------------------

SAVE_THREADS = 2


def timed_run(cmd, timeout, env=None):
    """Runs `cmd` (output captured); returns (wall seconds, stdout), or
    (None, why) when it failed or ran past `timeout` seconds (then it is
    killed)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None, f"stopped after {timeout:.0f} s (--save-timeout)"
    wall = time.perf_counter() - t0
    # communicate() reaped it: RUSAGE_CHILDREN now includes it.
    if proc.returncode != 0:
        return None, (err.strip().splitlines() or ["failed"])[-1]
    return wall, out


def cpu_mhz():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("cpu MHz"):
                    return float(line.split(":", 1)[1])
    except (OSError, ValueError):
        pass
    return 0.0


def save_rows(args, npy, shape):
    """The set written by qem save, qem pack produce and HDF5 bitshuffle/LZ4,
    on SAVE_THREADS threads, one run each; returns (conditions, rows)."""
    import resource

    counts = shape[0] * shape[1] * shape[2] * shape[3]
    source = os.path.getsize(npy)
    mhz = cpu_mhz()
    folder = tempfile.mkdtemp(prefix="bench-scale-save-", dir=args.save_dir or args.workdir)
    threads = str(SAVE_THREADS)
    produce_help = subprocess.run([args.qem, "pack", "produce", "--help"], capture_output=True,
                                  text=True).stdout
    produce_threads = ["--threads", threads] if "--threads" in produce_help else []
    script = os.path.join(HERE, "h5_bitshuffle.py")
    writers = [
        ("`qem save SRC.npy OUT.qem --threads 2`", "qem",
         [args.qem, "save", npy, os.path.join(folder, "set.qem"), "--threads", threads],
         [os.path.join(folder, "set.qem")]),
        ("`qem pack produce SRC.npy OUT.h5` (u16-LZ4" +
         (", `--threads 2`)" if produce_threads else "; no --threads in its --help)"), "pack",
         [args.qem, "pack", "produce", npy, os.path.join(folder, "set-pack.h5"),
          *produce_threads],
         [os.path.join(folder, "set-pack.h5"), os.path.join(folder, "set-pack.h5.receipt.json")]),
        ("HDF5 bitshuffle/LZ4 write, direct chunks, bitshuffle on 2 OpenMP threads (chunk = "
         "one scan row; h5py + hdf5plugin)", "h5",
         ["/usr/bin/python3", script, "write-direct", npy, os.path.join(folder, "set-bslz4.h5")],
         [os.path.join(folder, "set-bslz4.h5")]),
    ]
    env = dict(os.environ, OMP_NUM_THREADS=threads)
    results = {}
    try:
        for name, key, cmd, outputs in writers:
            cached = conditions(f"Before {key}", [npy])
            print(f"== {' '.join(cmd)}", flush=True)
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            wall, out = timed_run(cmd, args.save_timeout, env if key == "h5" else None)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            r = {"name": name, "cached": cached.split("cache: ")[-1]}
            if wall is None:
                r["error"] = out
            else:
                # HDF5: the script's own clock (file creation to close; the
                # interpreter, imports and pool start are outside it).
                r["seconds"] = json.loads(out.strip().splitlines()[-1])["seconds"] \
                    if key == "h5" else wall
                r["process_s"] = wall
                r["cpu_s"] = cpu
                r["bytes"] = os.path.getsize(outputs[0])
            for o in outputs:
                if os.path.exists(o):
                    os.unlink(o)
            results[key] = r
            print(json.dumps(r), flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    rows = []
    h5 = results.get("h5", {}).get("seconds")
    for key in ("qem", "pack", "h5"):
        r = results[key]
        if "error" in r:
            rows.append(f"| {r['name']} | not measured: {r['error']} | | | | | |")
            continue
        sec = r["seconds"]
        cycles = sec * SAVE_THREADS * mhz * 1e6 / counts
        cpu_cycles = r["cpu_s"] * mhz * 1e6 / counts
        vs = f"{h5 / sec:.2f}x" if h5 and key != "h5" else ("1.00x" if key == "h5" else "—")
        # The Python tree's CPU time counts its interpreter and imports: left out.
        by_cpu = f" ({cpu_cycles:.1f} by CPU time)" if key != "h5" else ""
        rows.append(f"| {r['name']} | {source / 1e6 / sec:.0f} | {sec:.1f} | {cycles:.1f}"
                    f"{by_cpu} | {vs} | {fmt_size(r['bytes'])} "
                    f"({source / r['bytes']:.1f}x) | {r['cached']} |")
    head = (f"Writing the set (issue 31): one run each, one after the other, on "
            f"{SAVE_THREADS} threads, from the .npy ({fmt_size(source)}; what of it is in the "
            f"page cache before each is in the last column). Cycles per count: seconds x "
            f"{SAVE_THREADS} threads x {mhz:.0f} MHz (/proc/cpuinfo) / {counts} counts; in "
            f"brackets from the CPU time the process used (user + system, every thread; not "
            f"for HDF5, whose process tree's CPU time "
            f"counts the interpreter and its imports). `qem save` and `qem pack produce` are "
            f"timed from start to exit; HDF5 from file creation to close (bitshuffle loaded "
            f"before); both qem commands fsync their file before publishing it, h5py does "
            f"not. HDF5 / writer: how many times faster than the HDF5 write.")
    table = ["| writer | MB/s of source | seconds | cycles per count | HDF5 / writer (time) "
             "| size (ratio) | .npy in the page cache before |",
             "|---|---|---|---|---|---|---|", *rows]
    return head, table


# --- the driver --------------------------------------------------------------------

def set_args(shape):
    named = {(512, 512, 192, 192): "512", (256, 256, 128, 128): "256"}
    if tuple(shape) in named:
        return ["--sets", named[tuple(shape)]]
    return ["--shape", ",".join(str(v) for v in shape)]


def fmt_size(n):
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def ms(v):
    return "—" if v is None else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def ratio(before, after):
    """How many times `after` is below `before` (a time), as text."""
    return f"{before / after:.2f}x" if before and after else "n/a"


def verdict(value, limit):
    if value is None:
        return "not measured"
    return "met" if value <= limit else "missed"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--viewer")
    ap.add_argument("--qem")
    ap.add_argument("--workdir", default="/var/tmp/qem-scale")
    ap.add_argument("--shape", default="512,512,192,192")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--moves", type=int, default=200)
    ap.add_argument("--patterns", type=int, default=300)
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--command", default=None, help="the command to print as run")
    ap.add_argument("--only", choices=["save"], default=None,
                    help="save: only the rows that write the set (printed, not written)")
    ap.add_argument("--save-dir", default=None,
                    help="where the writers' outputs go (default: a folder in --workdir)")
    ap.add_argument("--save-timeout", type=float, default=None,
                    help="seconds after which a writer is stopped (default: none)")
    # internal: one Python measurement in its own process
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-options", default="{}", help=argparse.SUPPRESS)
    ap.add_argument("--child-mask-out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--bf", type=float, nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    if not args.viewer or not args.qem:
        ap.error("--viewer and --qem are required")
    shape = [int(v) for v in args.shape.split(",")]
    if len(shape) != 4:
        ap.error("--shape is R,C,H,W")
    started = time.time()
    os.makedirs(args.workdir, exist_ok=True)
    busy = other_generators(args.workdir)
    if busy:
        sys.exit(f"bench_scale: qem-bench-viewer (pid {', '.join(map(str, busy))}) is using "
                 f"{args.workdir}; wait until it has finished")

    # 1. The set: generated once (every core), then reused.
    print(f"== the set {args.shape} in {args.workdir} (generated when missing, kept)", flush=True)
    prep = subprocess.run([args.viewer, *set_args(shape), "--workdir", args.workdir, "--keep",
                           "--prepare-only", "--qem", args.qem],
                          stdout=subprocess.PIPE, text=True, check=True)
    npy, qemf, pack, qem_cal, pack_cal, qem_bare, pack_bare = prep.stdout.split()
    files = [npy, qemf, pack, qem_cal, pack_cal, qem_bare, pack_bare]
    encoded = [qemf, pack, qem_cal, pack_cal, qem_bare, pack_bare]
    if args.only == "save":
        head, table = save_rows(args, npy, shape)
        print(f"\nCommand: {' '.join(['bench/bench_scale.py'] + sys.argv[1:])}; "
              f"{(time.time() - started) / 60:.1f} minutes.\n")
        print(head + "\n\n" + "\n".join(table))
        if args.markdown:
            print("(--only save prints only: the section of --markdown is left as it was)")
        return

    # 2. Conditions, then the encoded files into the page cache.
    m = meminfo()
    machine = (f"{cpu_model()}, {os.cpu_count()} cores online (nproc {len(os.sched_getaffinity(0))}), "
               f"{m.get('MemTotal', 0) / GIB:.1f} GiB memory; {platform.system()} "
               f"{platform.release()}, Python {platform.python_version()}; {memory_monitor()}")
    print("Machine: " + machine, flush=True)
    before = conditions("Before", files)
    for p in encoded:
        warm(p)
    warmed = conditions("After reading the encoded files once", files)

    # 3. qem view.
    print("== qem view (qem-bench-viewer --more)", flush=True)
    vjson = os.path.join(args.workdir, "bench-scale-viewer.json")
    vcmd = [args.viewer, *set_args(shape), "--workdir", args.workdir, "--keep", "--more",
            "--runs", str(args.runs), "--moves", str(args.moves), "--json", vjson,
            "--qem", args.qem]
    subprocess.run(vcmd, check=True)
    with open(vjson) as fh:
        viewer = {f["kind"]: f for f in json.load(fh)["files"]}
    q = viewer.get("qem")
    bf = (q["bf_row"], q["bf_col"], q["bf_radius"])

    # 4. Pack load.
    print("== pack load (qem info --json --timings)", flush=True)
    loads = []
    if "refused" not in viewer.get("pack", {}):
        for _ in range(args.runs):
            t0 = time.perf_counter()
            r = subprocess.run([args.qem, "info", "--json", "--timings", pack],
                               capture_output=True, text=True, check=True)
            wall = time.perf_counter() - t0
            t = json.loads(r.stdout)["timings_ms"]
            t["wall_ms"] = wall * 1e3
            loads.append(t)
    load = None
    if loads:
        load = {k: statistics.median(x[k] for x in loads)
                for k in loads[0] if all(isinstance(x[k], (int, float)) for x in loads)}
        print("pack load, ms (median of %d): %s" % (
            len(loads), ", ".join(f"{k} {v:.1f}" for k, v in load.items())), flush=True)

    # 5. Python, each configuration in its own process.
    print("== Python (%s)" % sys.executable, flush=True)
    mask_path = os.path.join(args.workdir, "bench-scale-bf-mask.u8")
    py = {}
    py["qem"] = python_measure(args, qemf, {}, bf, mask_out=mask_path)
    py["qem resident"] = python_measure(args, qemf, {"resident": True}, bf)
    py["qem mapped"] = python_measure(args, qemf, {"resident": "mapped"}, bf)
    if "refused" not in viewer.get("pack", {}):
        py["pack"] = python_measure(args, pack, {}, bf)
        py["pack prepared"] = python_measure(args, pack_cal, {}, bf)
    for k, v in py.items():
        print(f"{k}: {json.dumps(v)}", flush=True)

    # 6. The dense baseline over the mapped .npy (the first pass brings it
    # into the page cache as far as memory allows; not counted).
    print("== dense C loop over the mapped .npy", flush=True)
    npy_cache_before = conditions("Before the dense loop", [npy])
    dense = None
    if os.path.exists(mask_path):
        r = subprocess.run([args.viewer, "--dense", npy, "--mask", mask_path,
                            "--runs", str(args.runs + 1), "--threads", str(os.cpu_count())],
                           capture_output=True, text=True, check=True)
        dense = json.loads(r.stdout)
        print(json.dumps(dense), flush=True)
    npy_cache_after = conditions("After the dense loop", [npy])
    after = conditions("After", files)

    # 7. Writing the set, last: reading the .npy evicts the encoded files.
    print("== writing the set: qem save, qem pack produce, HDF5 (one run each)", flush=True)
    save_head, save_table = save_rows(args, npy, shape)

    # 8. The table.
    dense_s = statistics.median(dense["ms"][1:]) / 1e3 if dense else None
    sums = {k: v.get("bf_sum") for k, v in py.items()}
    if dense:
        sums["dense"] = dense["sum"]
    same = len(set(v for v in sums.values() if v is not None)) == 1
    rows = []

    def row(what, qv, pv, target, note=""):
        rows.append(f"| {what} | {qv} | {pv} | {target} | {note} |")

    kinds = [k for k in ("qem", "pack") if k in viewer and "refused" not in viewer[k]]

    def both(fn):
        return [fn(viewer[k], k) if k in kinds else "not produced" for k in ("qem", "pack")]

    for name, key in (("1-px BF move, a drag back and forth over 10 positions", "move"),
                      ("1-px BF move, every position new", "fresh"),
                      ("ADF ring resize, 1 px, back and forth", "adf"),
                      ("rectangle move, 1 px, back and forth", "rect")):
        cells = both(lambda v, k: f"{ms(v[key + '_p50'])} / {ms(v[key + '_p95'])} / "
                                  f"{ms(v[key + '_max_all'])}")
        marks = both(lambda v, k: f"{LABEL[k]}: p95 {verdict(v[key + '_p95'], MOVE_P95_MS)}, "
                                  f"max {verdict(v[key + '_max_all'], MOVE_MAX_MS)}")
        row(f"qem view: {name}, p50 / p95 / max, ms", *cells,
            f"p95 <= {MOVE_P95_MS} ms, never above {MOVE_MAX_MS:.0f} ms", "; ".join(marks))
    # In a back-and-forth series only the first pass computes; the rest
    # come from kept images. The computed ones, on their own:
    for name, key in (("BF drag", "move"), ("ADF ring resize", "adf"),
                      ("rectangle move", "rect")):
        cells = both(lambda v, k: f"{v[key + '_computed']:.0f}: {ms(v[key + '_cp50'])} / "
                                  f"{ms(v[key + '_cmax'])}")
        marks = both(lambda v, k: f"{LABEL[k]}: max {verdict(v[key + '_cmax'], MOVE_MAX_MS)}")
        row(f"qem view: {name}, back and forth: the moves computed (the rest came from kept "
            f"images), count: p50 / max, ms", *cells, f"never above {MOVE_MAX_MS:.0f} ms",
            "; ".join(marks))
    # The .qem moves again on a server without the packed copy (every
    # move decodes its pixels' rANS streams), side by side with the rows above.
    qv = viewer.get("qem")
    if qv and "refused" not in qv and qv.get("cc_fresh_p50"):
        row("qem view --packed-copy 0 (.qem, every move decodes its streams): 1-px BF move, "
            "every position new, p50 / p95 / max, ms; ADF ring resize, computed moves, p50 / "
            "max, ms; server peak RSS, MiB",
            f"{ms(qv['cc_fresh_p50'])} / {ms(qv['cc_fresh_p95'])} / {ms(qv['cc_fresh_max'])}; "
            f"{ms(qv['cc_adf_cp50'])} / {ms(qv['cc_adf_cmax'])}; {qv['cc_rss_peak_mib']:.0f}",
            "", f"p95 <= {MOVE_P95_MS} ms, never above {MOVE_MAX_MS:.0f} ms",
            f"against {ms(qv['fresh_p50'])} / {ms(qv['fresh_p95'])} / {ms(qv['fresh_max'])}; "
            f"{ms(qv['adf_cp50'])} / {ms(qv['adf_cmax'])}; {qv['rss_peak_mib']:.0f} with the "
            f"packed copy (default): "
            f"{ratio(qv['cc_fresh_p95'], qv['fresh_p95'])} lower p95, "
            f"{ratio(qv['cc_adf_cmax'], qv['adf_cmax'])} lower ADF maximum")
    # Each series after the first starts with a request that is not a
    # move (timed on its own, outside the series above).
    switches = "an 11-pixel BF jump / the switch to the ADF ring / to the rectangle"
    row(f"qem view: the request that starts a series, not a move ({switches}), ms (median)",
        *both(lambda v, k: f"{ms(v['fresh_switch'])} / {ms(v['adf_switch'])} / "
                           f"{ms(v['rect_switch'])}"), "", "a new detector's first image")
    # A tilt series of three 512 files (the .qem, its calibrated copy, the
    # pack): one detector, every image updated together, all or none.
    sv = viewer.get("series")
    if sv and "refused" not in sv:
        for name, key in (("1-px BF move, a drag back and forth", "move"),
                          ("1-px BF move, every position new", "fresh"),
                          ("ADF ring resize, 1 px, back and forth", "adf"),
                          ("rectangle move, 1 px, back and forth", "rect")):
            row(f"qem view, a series of three 512 files (.qem, its copy, the pack; three images "
                f"an update): {name}, p50 / p95 / max, ms", "",
                f"{ms(sv[key + '_p50'])} / {ms(sv[key + '_p95'])} / {ms(sv[key + '_max_all'])}",
                f"p95 <= {MOVE_P95_MS} ms, never above {MOVE_MAX_MS:.0f} ms",
                f"series: p95 {verdict(sv[key + '_p95'], MOVE_P95_MS)}, "
                f"max {verdict(sv[key + '_max_all'], MOVE_MAX_MS)}")
        row(f"qem view, the series of three: the request that starts a series ({switches}), ms",
            "", f"{ms(sv['fresh_switch'])} / {ms(sv['adf_switch'])} / {ms(sv['rect_switch'])}",
            "", "")
        # Encoded size of the three files; the images of recent detectors
        # each page keeps (--keep-masks, 128 MiB by default) come on top.
        q = viewer["qem"]
        encoded = sum(os.path.getsize(f) for f in (q["path"], q["calibrated_path"],
                                                    viewer["pack"]["path"])) / MIB
        row("qem view, the series of three: first image (all three), s / server peak RSS "
            "(VmHWM) once ready, before any move / at the end, with the kept images of recent "
            "detectors (--keep-masks 128 MiB a page), MiB",
            "", f"{sv['first_ms'] / 1e3:.2f} / {sv['rss_ready_mib']:.0f} / "
            f"{sv['rss_peak_mib']:.0f} (files {encoded:.0f})",
            "<= encoded size + 1 GiB",
            f"series: once ready {verdict(sv['rss_ready_mib'], encoded + 1024)}; at the end "
            f"{verdict(sv['rss_peak_mib'], encoded + 1024)}")
    row("qem view: pattern at a random position, p50 / p95 / max, ms",
        *both(lambda v, k: f"{ms(v['jump_p50'])} / {ms(v['jump_p95'])} / {ms(v['jump_max_all'])}"),
        f"p95 <= {PATTERN_P95_MS['qem']:.0f} ms (.qem), <= {PATTERN_P95_MS['pack']:.0f} ms (pack)",
        "; ".join(both(lambda v, k: f"{LABEL[k]}: {verdict(v['jump_p95'], PATTERN_P95_MS[k])}")))
    row("qem view: pattern hovering (neighbouring positions), p50 / p95 / max, ms",
        *both(lambda v, k: f"{ms(v['hover_p50'])} / {ms(v['hover_p95'])} / {ms(v['hover_max_all'])}"),
        f"p95 <= {HOVER_P95_MS:.0f} ms",
        "; ".join(both(lambda v, k: f"{LABEL[k]}: {verdict(v['hover_p95'], HOVER_P95_MS)}")))
    row("qem view: first image, file as qem wrote it, s (address / detector / image; every "
        "body authenticated at; .qem packed copy ready at)",
        *both(lambda v, k: f"{v['first_ms'] / 1e3:.2f} ({v['address_ms'] / 1e3:.2f} / "
                           f"{(v['detector_ms'] - v['address_ms']) / 1e3:.2f} / "
                           f"{(v['first_ms'] - v['detector_ms']) / 1e3:.2f}; "
                           f"{v.get('checked_ms', v['first_ms']) / 1e3:.2f}"
                           + (f"; {v['packed_ms'] / 1e3:.2f}" if k == 'qem' and v.get('packed_ms')
                              else "") + ")"),
        f"<= {FIRST_IMAGE_S['qem']} s (.qem), <= {FIRST_IMAGE_S['pack']} s (pack)",
        "; ".join(both(lambda v, k: f"{LABEL[k]}: {verdict(v['first_ms'] / 1e3, FIRST_IMAGE_S[k])}")))
    row("qem view: first image, copy recording its calibration, s",
        *both(lambda v, k: f"{v['calibrated_first_ms'] / 1e3:.2f}"), "", "for comparison")
    # A copy recording no prepared values (as upstream writers make them):
    # the first open computes what it shows and keeps it (--cache-dir).
    row("qem view: first image of a copy recording no prepared values, first open / second "
        "open (values kept in --cache-dir by the first), s",
        *both(lambda v, k: f"{v['bare_first_ms'] / 1e3:.2f} / {v['bare_second_ms'] / 1e3:.2f}"),
        f"second open <= {SECOND_OPEN_S} s",
        "; ".join(both(lambda v, k: f"{LABEL[k]}: {verdict(v['bare_second_ms'] / 1e3, SECOND_OPEN_S)}")))
    row("qem view: server peak RSS (VmHWM), MiB",
        *both(lambda v, k: f"{v['rss_peak_mib']:.0f} (file {v['bytes'] / MIB:.0f})"),
        "<= encoded size + 1 GiB",
        "; ".join(both(lambda v, k: f"{LABEL[k]}: {verdict(v['rss_peak_mib'], v['bytes'] / MIB + 1024)}")))
    if load:
        row("pack load: resident ready, s (qem info --timings; process wall)", "",
            f"{load['resident_ready'] / 1e3:.2f} ({load['wall_ms'] / 1e3:.2f})",
            f"<= {PACK_LOAD_S} s", f"pack: {verdict(load['resident_ready'] / 1e3, PACK_LOAD_S)}")

    def pycell(k, fn):
        v = py.get(k)
        if v is None:
            return "not produced"
        if "error" in v:
            return f"failed: {v['error']}"
        return fn(v)

    for label, k in (("qem.open(path)", "qem"),
                     ("qem.open(path, resident=True)", "qem resident"),
                     ('qem.open(path, resident="mapped")', "qem mapped")):
        pv = "" if k != "qem" else pycell("pack", lambda v: (
            f"{v['pattern_p50_ms']:.2f} / {v['pattern_p95_ms']:.2f} / {v['pattern_max_ms']:.1f}"))
        row(f"Python f[r, c] at random positions, p50 / p95 / max, ms: {label}",
            pycell(k, lambda v: f"{v['pattern_p50_ms']:.2f} / {v['pattern_p95_ms']:.2f} / "
                                f"{v['pattern_max_ms']:.1f}"), pv,
            f"p95 <= {PY_PATTERN_P95_MS:.0f} ms",
            "; ".join(f"{n}: {verdict(py[x]['pattern_p95_ms'], PY_PATTERN_P95_MS)}"
                      for n, x in ((".qem", k), ("pack", "pack" if k == "qem" else None))
                      if x in py and "error" not in py[x]))
    for label, k in (("qem.open(path)", "qem"),
                     ("qem.open(path, resident=True)", "qem resident"),
                     ('qem.open(path, resident="mapped")', "qem mapped")):
        def bfcell(v):
            t = statistics.median(v["bf_s"])
            ratio = f", {t / dense_s:.2f}x the dense loop" if dense_s else ""
            return f"{t:.3f}{ratio}"
        pv = "" if k != "qem" else pycell("pack", bfcell)
        row(f"Python full BF virtual image, s (median of {args.runs}): {label}",
            pycell(k, bfcell), pv, f"<= {PY_BF_S} s",
            "; ".join(f"{n}: {verdict(statistics.median(py[x]['bf_s']), PY_BF_S)}"
                      for n, x in ((".qem", k), ("pack", "pack" if k == "qem" else None))
                      if x in py and "error" not in py[x]))
    def comcell(v):
        return f"{v['com_s']:.3f} ({v['com_origin']})"
    coms = {k: v.get("com_sha256") for k, v in py.items() if "error" not in v}
    row("Python f.com() over every pixel (the CoM behind DPC), s: the file as saved",
        pycell("qem", comcell), pycell("pack", comcell), "", "a pass over every count")
    row("Python f.com(): the calibrated pack copy, which records the upstream's prepared DPC "
        "moments (qem calibrate -o)", "", pycell("pack prepared", comcell), "",
        "CoM images of .qem, pack and prepared copy: " +
        ("equal" if len(set(coms.values())) == 1 else "DIFFER: " + json.dumps(coms)))
    row("Python: open, s / process peak RSS, MiB: qem.open(path)",
        pycell("qem", lambda v: f"{v['open_s']:.2f} / {v['peak_rss_mib']:.0f}"),
        pycell("pack", lambda v: f"{v['open_s']:.2f} / {v['peak_rss_mib']:.0f}"), "", "")
    row("Python: open, s / process peak RSS, MiB: resident=True",
        pycell("qem resident", lambda v: f"{v['open_s']:.2f} / {v['peak_rss_mib']:.0f}"), "", "",
        "")
    row('Python: open, s / process peak RSS, MiB: resident="mapped" (RSS counts the mapped '
        'page cache)',
        pycell("qem mapped", lambda v: f"{v['open_s']:.2f} / {v['peak_rss_mib']:.0f}"), "", "",
        "")
    if dense:
        row(f"dense C loop over the mapped .npy, BF image, s (median of {args.runs} after a "
            f"first pass of {dense['ms'][0] / 1e3:.2f} s; {dense['threads']} threads)",
            f"{dense_s:.3f}", "", "baseline",
            f"in the page cache: {npy_cache_before.split('cache: ')[-1]} "
            f"before, {npy_cache_after.split('cache: ')[-1]} after")
    row("BF image sums: Python .qem, .qem resident (copied, mapped), pack, dense", "", "", "equal",
        ("equal" if same else "DIFFER: " + json.dumps(sums)))

    command = args.command or " ".join(
        ["bench/bench_scale.py"] + [a for a in sys.argv[1:]])
    elapsed = time.time() - started
    text = [f"Command: `{command}` (`bench/bench_scale.py`, `bench/bench_viewer.c`); "
            f"{elapsed / 60:.1f} minutes. Set: {shape[0]} x {shape[1]} scans of "
            f"{shape[2]} x {shape[3]} uint16 (synthetic, dose 4, seed 20261131), "
            f"{fmt_size(os.path.getsize(npy))} as .npy, {fmt_size(os.path.getsize(qemf))} "
            f"as .qem, " + (f"{fmt_size(os.path.getsize(pack))} as a u16-LZ4 pack."
                            if os.path.exists(pack) else "no pack."),
            "",
            f"Conditions. Machine: {machine}.",
            "",
            f"- {before}",
            f"- {warmed}",
            f"- {after}",
            "",
            f"qem view: {args.runs} runs (medians; max is the worst of the runs), {args.moves} "
            f"moves per series, {max(args.moves // 4, 1)} random patterns, over loopback HTTP. "
            f"Python: {args.patterns} random positions, each configuration in its own process. "
            f"BF: centre ({bf[0]:.2f}, {bf[1]:.2f}), radius {bf[2]:.2f} px, the file's default "
            f"detector, the same mask everywhere.",
            "",
            "| measure | .qem | pack (u16-LZ4) | target | verdict |",
            "|---|---|---|---|---|",
            *rows]
    if load:
        text += ["", "Pack load phases, ms (median of %d; phases summed over loading threads): "
                 % len(loads) + ", ".join(f"{k.replace('_', ' ')} {v:.1f}" for k, v in load.items())
                 + "."]
    text += ["", save_head, "", *save_table]
    section = "\n".join(text) + "\n"
    print()
    print(section)
    if args.markdown:
        from bench_markdown import replace_section
        replace_section(args.markdown, BEGIN, END, HEADING, section)
        print(f"wrote the \"At scale\" section of {args.markdown}")


if __name__ == "__main__":
    main()
