"""A multiprocessing Pool forks its workers on Linux: a worker forked
after the parent read on several threads reads, computes products and
saves exactly (on one thread: GNU OpenMP cannot start threads in such a
child) instead of hanging. Run in a child Python with a time limit, so
that a hang fails the test instead of stopping the suite."""
import subprocess
import sys
import textwrap


SCRIPT = textwrap.dedent("""
    import multiprocessing, sys
    import numpy as np
    import qem

    path = sys.argv[1]
    rng = np.random.default_rng(3)
    data = rng.poisson(3.0, (8, 16, 24, 20)).astype(np.uint16)
    qem.save(path + "/src.qem", data, chunk_scans=16, threads=2)

    def work(k):
        with qem.open(path + "/src.qem", threads=2) as f:
            whole = f[...]
            mean = f.mean()
        qem.save(path + f"/child{k}.qem", whole, chunk_scans=16, threads=2)
        with qem.open(path + f"/child{k}.qem", threads=2) as g:
            again = g[...]
        return bool(np.array_equal(whole, data) and np.array_equal(again, data)), mean.tobytes()

    # The parent decodes on two threads first: its OpenMP pool exists.
    with qem.open(path + "/src.qem", threads=2) as f:
        assert np.array_equal(f[...], data)
        want_mean = f.mean().tobytes()
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(2) as pool:
        results = pool.map(work, range(4))
    assert all(exact for exact, _ in results), results
    assert all(mean == want_mean for _, mean in results)
    print("forked workers read exactly")
""")


def test_forked_pool_workers_read_after_parent_threads(tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "forked workers read exactly" in done.stdout
