"""qem.record against the replay simulator (tests/live/sim_merlin.py): the
recorded file equals qem.convert of the same .mib, progress is reported,
a stream cut short comes back incomplete and exact, a malformed message
raises FormatError naming the frame, and an exception in the progress
callable stops the recording with the frames received published."""
import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest

import qem

SIM = pathlib.Path(__file__).resolve().parents[1] / "live" / "sim_merlin.py"


@pytest.fixture
def mib(fixtures):
    return fixtures / "detectors" / "mib" / "001_4x2_6bit.mib"


def serve(tmp_path, *args):
    port_file = tmp_path / f"port{time.monotonic_ns()}"
    proc = subprocess.Popen([sys.executable, str(SIM), *map(str, args), "--port-file",
                             str(port_file)])
    for _ in range(200):
        if port_file.exists():
            return proc, int(port_file.read_text())
        time.sleep(0.02)
    proc.kill()
    raise RuntimeError("the simulator did not start")


def body(path):
    """The file's bytes after its header."""
    with qem.open(path) as f:
        body_bytes = f.summary["body_bytes"]
    data = pathlib.Path(path).read_bytes()
    return data[len(data) - body_bytes:]


def live_facts(path):
    with qem.open(path) as f:
        return f.metadata["source_metadata"]["live_acquisition"]


def test_record_equals_convert(tmp_path, mib):
    proc, port = serve(tmp_path, mib)
    reports = []
    result = qem.record(f"merlin://127.0.0.1:{port}", tmp_path / "rec.qem", scan_shape=(2, 4),
                        progress=reports.append)
    proc.wait(timeout=30)
    assert result["complete"] and result["published"]
    assert result["received"] == result["expected"] == 8
    assert result["shape"] == (2, 4, 256, 256)
    assert reports and reports[-1]["received"] == 8
    qem.convert(mib, tmp_path / "saved.qem", scan_shape=(2, 4))
    assert body(tmp_path / "rec.qem") == body(tmp_path / "saved.qem")
    ref = np.load(str(mib)[:-4] + ".file-order.npy")
    with qem.open(tmp_path / "rec.qem") as f:
        assert np.array_equal(f[:, :], ref)


def test_stream_cut_short(tmp_path, mib):
    proc, port = serve(tmp_path, mib, "--stop-after", 6)
    result = qem.record(f"merlin://127.0.0.1:{port}", tmp_path / "cut.qem", scan_shape=(2, 4))
    proc.wait(timeout=30)
    assert result["published"] and not result["complete"]
    assert result["received"] == 6
    facts = live_facts(tmp_path / "cut.qem")
    assert facts["complete"] is False and facts["frames_received"] == 6
    ref = np.load(str(mib)[:-4] + ".file-order.npy").reshape(8, 256, 256)
    with qem.open(tmp_path / "cut.qem") as f:
        got = f[:, :].reshape(8, 256, 256)
    assert np.array_equal(got[:6], ref[:6]) and not got[6:].any()


def test_malformed_message(tmp_path, mib):
    proc, port = serve(tmp_path, mib, "--corrupt", "repeat@5")
    with pytest.raises(qem.FormatError, match="frame 5"):
        qem.record(f"merlin://127.0.0.1:{port}", tmp_path / "bad.qem", scan_shape=(2, 4))
    proc.kill()
    proc.wait()
    assert live_facts(tmp_path / "bad.qem")["frames_received"] == 4


def test_progress_exception_stops_and_publishes(tmp_path, mib):
    proc, port = serve(tmp_path, mib, "--repeat", 40, "--fps", 40)

    class Enough(Exception):
        pass

    def stop_after_some(p):
        if p["received"] >= 10:
            raise Enough()

    with pytest.raises(Enough):
        qem.record(f"merlin://127.0.0.1:{port}", tmp_path / "stopped.qem", scan_shape=(8, 40),
                   progress=stop_after_some)
    proc.kill()
    proc.wait()
    facts = live_facts(tmp_path / "stopped.qem")
    assert facts["complete"] is False and 10 <= facts["frames_received"] < 320


def test_arguments_refused(tmp_path):
    with pytest.raises(qem.UsageError, match="merlin://HOST"):
        qem.record("http://127.0.0.1:1", tmp_path / "x.qem")
    with pytest.raises(TypeError):
        qem.record(b"merlin://127.0.0.1", tmp_path / "x.qem")
    with pytest.raises(ValueError):
        qem.record("merlin://127.0.0.1", tmp_path / "x.qem", idle_timeout=-1)
    with pytest.raises(qem.FileSystemError, match="cannot connect"):
        qem.record("merlin://127.0.0.1:9", tmp_path / "x.qem", connect_timeout=0.3)
    assert not (tmp_path / "x.qem").exists()
