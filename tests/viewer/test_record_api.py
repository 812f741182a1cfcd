"""`qem record --view` over HTTP: the viewer served on a recording while a
slow replay of a real Merlin file (tests/live/sim_merlin.py) runs. While
frames arrive, /api/recording counts them and every image is of the frames
received so far: the scan positions received before a request are exactly
the final image's, those not yet received are zero, and nothing computed
while live is kept (the mean, the page's detector session). Once the
recording is published, every image equals what the qem command writes
from the published file, byte for byte. Ctrl-C while recording publishes
the frames received and ends the viewer at once.
"""
import json
import os
import signal
import tempfile
import time

import numpy as np

from viewer_util import Recording, fixture, load_npy, qem_product, split_npy

MIB = fixture("detectors/mib", "001_4x2_6bit.mib")  # 2 x 4 frames of 256 x 256, 6 bit
SCAN = (8, 10)  # the 8 frames 10 times over
DETECTOR = {"detector": "bf", "center": "127.5,120", "radius": "40"}
CLI_DETECTOR = ["--detector", "bf", "--center", "127.5,120", "--radius", "40"]
CLIENT = "0123456789abcdef"


def test_live_images_grow_and_end_equal_to_the_published_file():
    tmp = tempfile.mkdtemp(prefix="qem-record-api-")
    out = os.path.join(tmp, "live.qem")
    expected = SCAN[0] * SCAN[1]
    with Recording(out, MIB, "%d,%d" % SCAN, 20, 10) as rec:
        info = json.loads(rec.get("/api/info")[1])
        assert info["live"] is True and info["files"][0]["live"] is True
        assert info["files"][0]["shape"] == [SCAN[0], SCAN[1], 256, 256]
        samples = []  # (received before, received after, virtual image, /api/live image)
        mean_while_live = None
        seq = 0
        deadline = time.monotonic() + 120
        while True:
            assert time.monotonic() < deadline, "the recording did not finish within 120 s"
            before = rec.recording()
            assert before["live"] is True and before["expected"] in (0, expected)
            if before["finished"]:
                break
            _, body = rec.get("/api/virtual.npy", **DETECTOR)
            virtual = load_npy(body)
            seq += 1
            _, body = rec.get("/api/live", client=CLIENT, seq=seq, **DETECTOR)
            (live_image,) = [load_npy(b) for b in split_npy(body)]
            if mean_while_live is None and 0 < before["received"] < expected // 2:
                mean_while_live = load_npy(rec.get("/api/mean.npy")[1])
            after = rec.recording()
            samples.append((before["received"], after["received"], virtual, live_image))
            time.sleep(0.1)
        assert before["complete"] is True and before["received"] == expected

        # Published: the server's images equal the command's on the file.
        final_virtual = rec.get("/api/virtual.npy", **DETECTOR)[1]
        assert final_virtual == qem_product(tmp, "virtual", out, *CLI_DETECTOR)
        seq += 1
        # The same page's session after the recording ended: not a stale one.
        final_live = split_npy(rec.get("/api/live", client=CLIENT, seq=seq, **DETECTOR)[1])
        assert final_live == [final_virtual]
        final_mean = rec.get("/api/mean.npy")[1]
        assert final_mean == qem_product(tmp, "mean", out)
        assert mean_while_live is not None, "no mean was asked while live: the replay ran too fast"
        assert not np.array_equal(mean_while_live, load_npy(final_mean))
        for row, col in ((0, 0), (SCAN[0] - 1, SCAN[1] - 1)):
            got = rec.get("/api/dp.npy", scan="%d,%d" % (row, col))[1]
            assert got == qem_product(tmp, "dp", out, "--scan", "%d,%d" % (row, col))

        final = load_npy(final_virtual).ravel()
        assert final.all(), "the detector must see counts at every position for this test"
        partial = [s for s in samples if 0 < s[0] and s[1] < expected]
        assert len(partial) >= 3, "too few images while recording: %s" % [s[:2] for s in samples]
        assert len({s[0] for s in partial}) >= 3, "the received count did not grow"
        received = [s[0] for s in samples]
        assert received == sorted(received)
        for got_before, got_after, virtual, live_image in samples:
            for image in (virtual, live_image):
                flat = image.ravel()
                assert image.shape == SCAN
                # Positions received before the request are final; those
                # not yet received by its end read zero.
                assert np.array_equal(flat[:got_before], final[:got_before]), (got_before,
                                                                               got_after)
                assert not flat[got_after:].any(), (got_before, got_after)
        # A partly received image differs from the final one.
        assert any(not np.array_equal(s[2].ravel(), final) for s in partial)

        code, stdout, _ = rec.end(signal.SIGTERM)
        assert code == 128 + signal.SIGTERM
        assert "recorded %s: %d of %d frames" % (out, expected, expected) in stdout, stdout
        assert "recording published; the viewer stays open until Ctrl-C" in stdout, stdout


def test_ctrl_c_while_recording_publishes_and_ends_the_viewer():
    tmp = tempfile.mkdtemp(prefix="qem-record-api-")
    out = os.path.join(tmp, "stopped.qem")
    with Recording(out, MIB, "%d,%d" % SCAN, 10, 10) as rec:
        deadline = time.monotonic() + 60
        while rec.recording()["received"] < 10:
            assert time.monotonic() < deadline, "no frames arrived within 60 s"
            time.sleep(0.05)
        stopped = time.monotonic()
        code, stdout, err = rec.end(signal.SIGINT)
        assert time.monotonic() - stopped < 20, "the viewer did not end at once"
        assert code == 128 + signal.SIGINT, (code, err)
        assert "INCOMPLETE" in stdout, stdout
        assert "the viewer stays open" not in stdout, stdout
        assert "interrupted after" in err, err
        assert "qem: interrupted" not in err, err
    assert os.path.isfile(out)


def test_viewer_options_go_with_view():
    import subprocess

    from viewer_util import QEM

    tmp = tempfile.mkdtemp(prefix="qem-record-api-")
    for extra, message in (
        (["--port", "5"], "--port, --bind and --no-open go with --view"),
        (["--no-open"], "--port, --bind and --no-open go with --view"),
        (["--view", "--bind", "nowhere"], "--bind needs an IPv4 address"),
    ):
        done = subprocess.run([QEM, "record", "merlin://127.0.0.1:1", os.path.join(tmp, "x.qem"),
                               *extra], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and message in done.stderr, (extra, done.returncode,
                                                                 done.stderr)
        assert not os.path.exists(os.path.join(tmp, "x.qem"))
