"""The Python package's tests. They run against the *installed* package
(make test-python installs it into a fresh venv first): importing qem from
the source tree would test files that were never packaged.

Environment: QEM_CLI (the qem command, for comparisons with the CLI) and
QEM_SHARED_DIR (the shared fixtures; default ../shared beside the
repository)."""
import contextlib
import os
import pathlib
import signal
import subprocess
import sys

import numpy as np
import pytest

import qem

REPO = pathlib.Path(__file__).resolve().parents[2]


def pytest_configure(config):
    where = pathlib.Path(qem.__file__).resolve()
    if REPO / "python" in where.parents:
        raise pytest.UsageError(f"qem was imported from the source tree ({where}); run the "
                                "tests against the installed package (make test-python)")


def shared_dir():
    for candidate in (os.environ.get("QEM_SHARED_DIR"), REPO.parent / "shared", "/work/shared"):
        if candidate and (pathlib.Path(candidate) / "fixtures" / "qem" / "INDEX.json").exists():
            return pathlib.Path(candidate)
    raise RuntimeError("the shared fixtures are not found; set QEM_SHARED_DIR")


@pytest.fixture(scope="session")
def fixtures():
    return shared_dir() / "fixtures"


@pytest.fixture(scope="session")
def cli():
    """Runs the qem command; returns the completed process (must succeed)."""
    exe = os.environ.get("QEM_CLI", "qem")

    def run(*args):
        done = subprocess.run([exe, *map(str, args)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done

    return run


def counts_array(shape, seed, dtype=np.uint16, dose=300):
    """Poisson counts with a bright-field disk and a little background."""
    rng = np.random.default_rng(seed)
    rows, cols = np.indices(shape[2:])
    disk = (rows - shape[2] / 2 + 0.3) ** 2 + (cols - shape[3] / 2 - 0.4) ** 2 <= \
        (min(shape[2:]) / 4) ** 2
    a = rng.poisson(0.4, size=shape).astype(np.int64)
    a[:, :, disk] += rng.poisson(dose, size=(shape[0], shape[1], int(disk.sum())))
    return np.minimum(a, np.iinfo(dtype).max).astype(dtype)


@pytest.fixture(scope="session")
def generated(tmp_path_factory):
    """Files of every codec and both pack profiles, with their dense arrays:
    {name: (path, array as read)}."""
    d = tmp_path_factory.mktemp("generated")
    out = {}
    u16 = counts_array((6, 9, 12, 10), 1)
    qem.save(d / "u16.qem", u16, chunk_scans=16)
    out["u16"] = (d / "u16.qem", u16)
    u8 = counts_array((5, 7, 8, 11), 2, np.uint8, dose=40)
    qem.save(d / "u8.qem", u8, chunk_scans=8)
    out["u8"] = (d / "u8.qem", u8)
    rng = np.random.default_rng(3)
    f32 = (u16.astype(np.float32) * np.float32(0.37) +
           rng.normal(0, 1, u16.shape).astype(np.float32))
    qem.save(d / "f32.qem", f32)
    out["f32"] = (d / "f32.qem", f32)
    # Packs: 64 scans (the uint8 profile needs a multiple of 32).
    p16 = counts_array((8, 8, 9, 7), 4)
    np.save(d / "p16.npy", p16)
    qem.pack.produce(d / "p16.npy", d / "p16.h5")
    out["pack16"] = (d / "p16.h5", p16)
    p8 = counts_array((4, 16, 6, 5), 5, np.uint8, dose=30)
    np.save(d / "p8.npy", p8)
    qem.pack.produce(d / "p8.npy", d / "p8.h5", profile="u8-bitpacked")
    out["pack8"] = (d / "p8.h5", p8)
    return out


@contextlib.contextmanager
def interruptible_python(script):
    """A Python child running `script` with its stdout piped, SIGINT at its
    default so that Python turns it into KeyboardInterrupt (a test started
    in the background inherits SIGINT ignored, and Python then installs no
    handler); killed on leaving, so a failed test leaves no process."""
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        yield p
    finally:
        if p.poll() is None:
            p.kill()
        p.communicate()
