#!/usr/bin/python3
"""`make bench-record` (issue 32): live recording, sustained.

A replay simulator (tests/live/) sends a synthetic acquisition over
loopback as fast as the receiver takes it (TCP or ZeroMQ back-pressure
sets the pace) while `qem record` stores it; beside it, `qem save` of the
same frames from a file. Printed and written to doc/benchmarks.md:
frames/s received (the sender's rate), frames/s end to end (connect to
publication), how long after the last frame the file was published, the
frames that waited on disk, the recorder's peak RSS, and that the body is
the one `qem save` writes (no frame lost or changed)."""
import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_markdown import replace_section  # noqa: E402

LIVE = os.path.join(HERE, "..", "tests", "live")
BEGIN = "<!-- qem-bench-record:begin -->"
END = "<!-- qem-bench-record:end -->"


def body(qem, path):
    info = json.loads(subprocess.check_output([qem, "info", path, "--json"]))
    with open(path, "rb") as f:
        data = f.read()
    return data[len(data) - info["body_bytes"]:]


def start_sim(args, port_file):
    if os.path.exists(port_file):
        os.unlink(port_file)
    proc = subprocess.Popen([sys.executable] + args + ["--port-file", port_file])
    for _ in range(6000):
        if os.path.exists(port_file):
            with open(port_file) as f:
                return proc, int(f.read())
        time.sleep(0.01)
    proc.kill()
    raise SystemExit("the simulator did not start: " + " ".join(args))


def timed(argv):
    """Runs argv; (seconds, stdout)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate()
    seconds = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {err.decode()}")
    return seconds, out.decode()


def peak_rss_mib(argv):
    """Runs argv under wait4 for its peak RSS; (rss MiB, stdout, exit)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {err.decode()}")
    return usage.ru_maxrss / 1024.0, out.decode()


def measure(a, stream):
    """One stream: runs of record and save, medians."""
    work = a.workdir
    name, shape, sim, url, save_src, save_extra = stream
    frames = shape[0] * shape[1]
    rows = []
    for run in range(a.runs):
        out = os.path.join(work, f"{name}-rec{run}.qem")
        for p in (out,):
            if os.path.exists(p):
                os.unlink(p)
        report = os.path.join(work, f"{name}.report.json")
        proc, port = start_sim(sim + ["--report", report], os.path.join(work, f"{name}.port"))
        rss, text = peak_rss_mib([a.qem, "record", url.format(port=port), out, "--threads",
                                  str(a.threads), "--scan-shape", f"{shape[0]},{shape[1]}"])
        proc.wait(timeout=60)
        with open(report) as f:
            sent = json.load(f)
        m = re.search(r"(\d+) of (\d+) frames.*?(\d+) waited on disk; ([0-9.]+) s, published "
                      r"([0-9.]+) s after", text)
        if not m:
            raise SystemExit("unexpected qem record output: " + text)
        received, spilled = int(m.group(1)), int(m.group(3))
        total, publish = float(m.group(4)), float(m.group(5))
        rows.append(dict(received=received, spilled=spilled, rss=rss,
                         sender_fps=sent["frames"] / sent["seconds"], total=total,
                         end_fps=received / total, publish=publish, out=out))
    save_out = os.path.join(work, f"{name}-save.qem")
    save_times = []
    for run in range(a.runs):
        if os.path.exists(save_out):
            os.unlink(save_out)
        seconds, _ = timed([a.qem, "save", save_src, save_out, "--threads", str(a.threads), "-q"]
                           + save_extra)
        save_times.append(seconds)
    same = all(body(a.qem, r["out"]) == body(a.qem, save_out) for r in rows)
    for r in rows:
        os.unlink(r["out"])
    med = lambda key: sorted(r[key] for r in rows)[len(rows) // 2]  # noqa: E731
    save_s = sorted(save_times)[len(save_times) // 2]
    return dict(frames=frames, received=min(r["received"] for r in rows),
                sender_fps=med("sender_fps"), end_fps=med("end_fps"), total=med("total"),
                publish=max(r["publish"] for r in rows), spilled=max(r["spilled"] for r in rows),
                rss=max(r["rss"] for r in rows), save_s=save_s, save_fps=frames / save_s,
                same=same)


def streams(a):
    work = a.workdir
    ms = [int(v) for v in a.merlin_shape.split(",")]
    mib = os.path.join(work, "merlin-%s.mib" % "x".join(map(str, ms)))
    if not os.path.exists(mib):
        subprocess.check_call([sys.executable, os.path.join(LIVE, "sim_merlin.py"), "--synthetic",
                               a.merlin_shape, "--save", mib])
    out = [("merlin", ms, [os.path.join(LIVE, "sim_merlin.py"), "--synthetic", a.merlin_shape],
            "merlin://127.0.0.1:{port}", mib, [])]
    sim_dectris = os.path.join(LIVE, "sim_dectris.py")
    if a.dectris_shape and os.path.exists(sim_dectris):
        ds = [int(v) for v in a.dectris_shape.split(",")]
        npy = os.path.join(work, "dectris-%s.npy" % "x".join(map(str, ds)))
        if not os.path.exists(npy):
            subprocess.check_call([sys.executable, sim_dectris, "--synthetic", a.dectris_shape,
                                   "--save-npy", npy])
        out.append(("dectris", ds, [sim_dectris, "--synthetic", a.dectris_shape, "--encoding",
                                    "bs32-lz4", "--header-detail", "basic"],
                    "dectris://127.0.0.1:{port}", npy, []))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--qem", required=True)
    ap.add_argument("--workdir", default="/var/tmp/qem-record")
    ap.add_argument("--merlin-shape", default="64,64,256,256")
    ap.add_argument("--dectris-shape", default="64,64,192,192")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--markdown")
    ap.add_argument("--command", default="make bench-record")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    load_before = os.getloadavg()
    t0 = time.monotonic()
    results = [(s[0], s[1], measure(a, s)) for s in streams(a)]
    load_after = os.getloadavg()
    what = {"merlin": "Merlin, 12-bit counts (U16, big-endian), TCP",
            "dectris": "DECTRIS stream V1, uint32, bitshuffle/LZ4 (`bs32-lz4<`), ZeroMQ"}
    lines = [
        f"Command: `{a.command}` (`bench/bench_record.py`); {time.monotonic() - t0:.0f} s. "
        f"Machine: {platform.machine()}, {os.cpu_count()} cores online; load average "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after. Each stream: a synthetic "
        f"acquisition sent by the project's replay simulator (tests/live/, Python) over "
        f"loopback as fast as the receiver takes it, recorded by `qem record --threads "
        f"{a.threads}` into a .qem; {a.runs} runs, medians (publication: the worst run). "
        f"`qem save` of the same frames from a file on the same threads beside it.",
        "",
        "| stream | frames | received, frames/s (sender's rate) | end to end, frames/s "
        "(connect to publication) | published after the last frame, s | frames that waited "
        "on disk | recorder peak RSS, MiB | `qem save` of the file, frames/s | record / save "
        "| body equal to `qem save`'s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, shape, r in results:
        lines.append(
            f"| {what[name]}; {shape[0]} x {shape[1]} scans of {shape[2]} x {shape[3]} | "
            f"{r['received']} of {r['frames']} | {r['sender_fps']:.0f} | {r['end_fps']:.0f} | "
            f"{r['publish']:.3f} | {r['spilled']} | {r['rss']:.0f} | {r['save_fps']:.0f} | "
            f"{r['end_fps'] / r['save_fps']:.2f}x | {'yes' if r['same'] else 'NO'} |")
    section = "\n".join(lines) + "\n"
    print(section)
    if a.markdown:
        replace_section(a.markdown, BEGIN, END, "Live recording (`make bench-record`, issue 32)",
                        section)


if __name__ == "__main__":
    main()
