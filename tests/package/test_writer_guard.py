"""The streaming writer (qem._qem.Writer, under qem.save) refuses, with
RuntimeError, every call from another thread while one is in flight
(append, append_encoded, finish, abort and starting it again), as a File
and a Session refuse close(): abort() there would free the writer the
library is encoding into.

Deterministic: the other thread's call is made from inside the append,
from the writer's progress callback (the library calls it, with the GIL,
after each chunk it encodes), and the callback waits for that thread. The
script runs in a child interpreter: without the guard it is a
use-after-free, which may crash."""
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(r"""
    import json, os, sys, threading
    import numpy as np
    import qem
    from qem import _qem

    dest = os.path.join(sys.argv[1], "out.qem")
    shape = (8, 8, 16, 16)
    data = np.random.default_rng(3).poisson(3.0, shape).astype(np.uint16)
    results, calls = {}, {}
    holder = {}

    def attempt(name, call):
        try:
            call()
            results[name] = "returned"
        except BaseException as exc:
            results[name] = type(exc).__name__ + ": " + str(exc)

    def progress(done, total):
        if calls or done >= total:
            return
        calls["first"] = (done, total)
        w = holder["w"]
        for name, call in [
                ("abort", w.abort),
                ("finish", w.finish),
                ("append", lambda: w.append(data[:1])),
                ("append_encoded", lambda: w.append_encoded(b"x", 1)),
                ("init", lambda: w.__init__(dest + ".2", "uint16", shape)),
        ]:
            t = threading.Thread(target=attempt, args=(name, call))
            t.start()
            t.join()

    w = holder["w"] = _qem.Writer(dest, "uint16", shape, chunk_scans=8, threads=1,
                                  progress=progress)
    w.append(data)   # 8 chunks of 8 scans: the callback runs after the first
    appended = w.appended
    w.finish()
    with qem.open(dest) as f:
        exact = bool(np.array_equal(np.asarray(f), data))
    print(json.dumps({"results": results, "calls": calls, "appended": appended,
                      "exact": exact, "second": os.path.exists(dest + ".2")}))
""")


def test_calls_from_another_thread_during_an_append_are_refused(tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    import json
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["calls"] == {"first": [8, 64]}, out
    for name in ("abort", "finish", "append", "append_encoded", "init"):
        got = out["results"].get(name)
        assert got is not None and got.startswith(
            "RuntimeError: the writer is in use by another thread"), (name, got)
    assert "abort it when that call ends" in out["results"]["abort"]
    # The refused calls changed nothing: the append went on, the file is exact.
    assert out["appended"] == 64 and out["exact"] and not out["second"], out
