"""Shared by the viewer tests: start `qem view` on files, talk to it over
HTTP, run the same product through the qem command, load .npy files.

Environment (set by ctest): QEM_CLI (the qem executable), QEM_SHARED_DIR
(the fixtures), QEM_VIEWER_ARTIFACTS (where screenshots go).
"""
import http.client
import io
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

import numpy as np

QEM = os.environ.get("QEM_CLI", "qem")
CACHE_HOME = tempfile.mkdtemp(prefix="qem-viewer-cache-")


def shared_dir():
    for candidate in (os.environ.get("QEM_SHARED_DIR"), "../shared", "/work/shared"):
        if candidate and os.path.isfile(os.path.join(candidate, "fixtures", "qem", "INDEX.json")):
            return candidate
    raise AssertionError("shared fixtures not found: set QEM_SHARED_DIR")


def fixture(kind, name):
    path = os.path.join(shared_dir(), "fixtures", kind, name)
    assert os.path.isfile(path), path
    return path


def artifacts_dir():
    path = os.environ.get("QEM_VIEWER_ARTIFACTS") or os.path.join(tempfile.gettempdir(), "qem-viewer-artifacts")
    os.makedirs(path, exist_ok=True)
    return path


def uses_asan():
    """The qem executable is an AddressSanitizer build (make test-asan)."""
    done = subprocess.run(["ldd", QEM], capture_output=True, text=True)
    return "libasan" in done.stdout


class Server:
    """`qem view --no-open --port 0 FILES...`, stopped by SIGTERM."""

    def __init__(self, files, *extra, env=None):
        # Mean patterns kept between opens go to a folder of the tests' own.
        self.proc = subprocess.Popen(
            [QEM, "view", "--no-open", "--port", "0", *extra, *files],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**(os.environ if env is None else env), "XDG_CACHE_HOME": CACHE_HOME},
        )
        ready, _, _ = select.select([self.proc.stdout], [], [], 120)
        assert ready, "qem view printed no address within 120 s"
        line = self.proc.stdout.readline().strip()
        match = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/\?token=([0-9a-f]{32})", line)
        assert match, "unexpected first line from qem view: %r (stderr: %s)" % (
            line,
            self.proc.stderr.read() if self.proc.poll() is not None else "",
        )
        self.url = line
        self.port = int(match.group(1))
        self.token = match.group(2)

    def connection(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)

    def request(self, target, token="query", method="GET", headers=None, conn=None):
        """(status, headers dict, body bytes). token: 'query', 'header',
        None, or a string used as a wrong token in the query."""
        headers = dict(headers or {})
        if token == "query":
            target += ("&" if "?" in target else "?") + "token=" + self.token
        elif token == "header":
            headers["X-Qem-Token"] = self.token
        elif token:
            target += ("&" if "?" in target else "?") + "token=" + token
        own = conn is None
        conn = conn or self.connection()
        conn.request(method, target, headers=headers)
        response = conn.getresponse()
        body = response.read()
        result = (response.status, {k.lower(): v for k, v in response.getheaders()}, body)
        if own:
            conn.close()
        return result

    def get(self, path, **params):
        target = path + ("?" + urllib.parse.urlencode(params) if params else "")
        status, headers, body = self.request(target, token="header")
        assert status == 200, "%s -> %d: %s" % (target, status, body[:300])
        return headers, body

    def rss_kib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def stop(self):
        """SIGTERM: a clean shutdown exits 128 + SIGTERM, as every qem
        command stopped by a signal does, through its own shutdown (not
        the one-second watchdog, which says "qem: interrupted"), so under
        ASan the leak check runs. Returns what the server wrote on stderr."""
        if getattr(self, "stderr_text", None) is not None:
            return self.stderr_text
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("qem view did not stop within 60 s of SIGTERM")
        err = self.proc.stderr.read()
        self.proc.stdout.close()
        self.proc.stderr.close()
        self.stderr_text = err
        assert self.proc.returncode == 128 + signal.SIGTERM, "qem view exited %d: %s" % (self.proc.returncode, err)
        assert "qem: interrupted" not in err, "the shutdown took the watchdog's exit: %s" % err
        return err

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.stop()
        elif self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def qem_product(tmp, *args):
    """Runs `qem ARGS -o OUT.npy` and returns OUT's bytes."""
    out = os.path.join(tmp, "cli-%d.npy" % time.monotonic_ns())
    done = subprocess.run([QEM, *map(str, args), "-o", out, "--quiet"], capture_output=True, text=True)
    assert done.returncode == 0, "qem %s: %s" % (" ".join(map(str, args)), done.stderr)
    with open(out, "rb") as f:
        data = f.read()
    os.unlink(out)
    return data


def load_npy(data):
    return np.load(io.BytesIO(data), allow_pickle=False)


def split_npy(data):
    """Arrays of a body holding several .npy back to back."""
    out = []
    at = 0
    while at < len(data):
        assert data[at:at + 6] == b"\x93NUMPY"
        header_len = int.from_bytes(data[at + 8:at + 10], "little")
        header = data[at + 10:at + 10 + header_len].decode("latin1")
        descr = re.search(r"'descr': '([^']+)'", header).group(1)
        shape = tuple(int(x) for x in re.search(r"'shape': \(([^)]*)\)", header).group(1).split(",") if x.strip())
        n = int(np.prod(shape)) * np.dtype(descr).itemsize
        end = at + 10 + header_len + n
        out.append(data[at:end])
        at = end
    return out


SIM_MERLIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "live", "sim_merlin.py")


class Recording(Server):
    """`qem record merlin://127.0.0.1:PORT OUT --view --no-open --port 0`
    against the replay simulator (tests/live/sim_merlin.py) serving `mib`
    at `fps` frames a second, `repeat` times over; the API as Server's."""

    def __init__(self, out, mib, scan_shape, fps, repeat, *extra):
        folder = tempfile.mkdtemp(prefix="qem-record-view-")
        port_file = os.path.join(folder, "port")
        self.sim = subprocess.Popen(
            [sys.executable, SIM_MERLIN, mib, "--fps", str(fps), "--repeat", str(repeat),
             "--port-file", port_file],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 30
        while not os.path.exists(port_file):
            assert self.sim.poll() is None, "the simulator ended: %s" % self.sim.stderr.read()
            assert time.monotonic() < deadline, "the simulator wrote no port within 30 s"
            time.sleep(0.02)
        with open(port_file) as f:
            sim_port = int(f.read())
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [QEM, "record", "merlin://127.0.0.1:%d" % sim_port, out, "--scan-shape", scan_shape,
             "--view", "--no-open", "--port", "0", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        ready, _, _ = select.select([self.proc.stdout], [], [], 120)
        assert ready, "qem record --view printed no address within 120 s"
        line = self.proc.stdout.readline().strip()
        match = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/\?token=([0-9a-f]{32})", line)
        assert match, "unexpected first line from qem record --view: %r (stderr: %s)" % (
            line,
            self.proc.stderr.read() if self.proc.poll() is not None else "",
        )
        self.url = line
        self.port = int(match.group(1))
        self.token = match.group(2)
        # The rest of stdout, line by line, as it comes.
        self.lines = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self.reader.start()

    def recording(self):
        return json.loads(self.get("/api/recording")[1])

    def wait_line(self, text, timeout=120):
        """Waits for a line of stdout containing `text`; returns it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if text in line:
                    return line
            if not self.reader.is_alive() and self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise AssertionError("qem record --view never printed %r (stdout: %r)" % (text, self.lines))

    def end(self, sig=signal.SIGTERM, timeout=60):
        """Sends `sig` (None: none) and waits: (exit status, stdout after
        the address, stderr)."""
        if sig is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("qem record --view did not end within %d s" % timeout)
        self.reader.join(timeout=10)
        err = self.proc.stderr.read()
        self.proc.stderr.close()
        self.sim.wait(timeout=60)
        self.sim.stderr.close()
        self.stderr_text = err
        return self.proc.returncode, "".join(self.lines), err

    def stop(self):
        if getattr(self, "stderr_text", None) is not None:
            return self.stderr_text
        code, _, err = self.end()
        assert code == 128 + signal.SIGTERM, "qem record --view exited %d: %s" % (code, err)
        return err

    def __exit__(self, *exc):
        if exc[0] is None:
            self.stop()
        else:
            for p in (self.proc, self.sim):
                if p.poll() is None:
                    p.kill()
                    p.wait()


def saved_disk_file(tmp, name="disk", seed=11):
    """A file `qem save` wrote, large enough to record its pixel sums and
    its default detector's image: 96 x 96 scans of a 48 x 48 detector, a
    bright disk over a faint background. Returns its path."""
    rng = np.random.default_rng(seed)
    rows, cols = np.mgrid[0:48, 0:48]
    disk = (rows - 23.3) ** 2 + (cols - 24.6) ** 2 <= 81
    counts = rng.poisson(np.where(disk, 20.0, 0.5), (96, 96, 48, 48)).astype(np.uint16)
    npy = os.path.join(str(tmp), name + ".npy")
    path = os.path.join(str(tmp), name + ".qem")
    np.save(npy, counts)
    subprocess.run([QEM, "save", npy, path, "-q"], check=True)
    os.unlink(npy)
    return path
