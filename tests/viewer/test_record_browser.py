"""`qem record --view` in a real headless Chromium, while a slow replay of
a real Merlin file (tests/live/sim_merlin.py) runs: the page says "live: N
of M frames" and the scan image (the canvas too) changes as frames arrive;
the detector is dragged and a scan position pinned before its frame came;
once the recording is published the page says "complete", stops asking,
and what it drew equals `qem virtual` and `qem dp` of the published file.
"""
import hashlib
import os
import re
import tempfile
import time

from test_browser import driver  # noqa: F401  (the Chromium fixture)
from test_browser import (click_scan, console_errors, detector_args, drag, js, page_array,
                          same_values, wait_idle)
from viewer_util import Recording, artifacts_dir, fixture, load_npy, qem_product

MIB = fixture("detectors/mib", "001_4x2_6bit.mib")  # 2 x 4 frames of 256 x 256, 6 bit
SCAN = (8, 10)  # the 8 frames 10 times over, 10 a second: 8 s


def snapshot(d):
    """(frames received as the page last heard, the scan values drawn, a
    digest of the scan canvas)."""
    received, values, canvas = js(
        d,
        "return [qemView.recording ? qemView.recording.received : null,"
        " qemView.values('scan'), document.getElementById('scan-image').toDataURL()];",
    )
    return received, tuple(values or ()), hashlib.sha256(canvas.encode()).hexdigest()


def test_live_page_fills_in_and_ends_equal_to_the_published_file(driver):  # noqa: F811
    from selenium.webdriver.support.ui import WebDriverWait

    tmp = tempfile.mkdtemp(prefix="qem-record-browser-")
    out = os.path.join(tmp, "live.qem")
    expected = SCAN[0] * SCAN[1]
    with Recording(out, MIB, "%d,%d" % SCAN, 10, 10) as rec:
        driver.get(rec.url)
        WebDriverWait(driver, 60, poll_frequency=0.05).until(
            lambda x: x.execute_script(
                "return window.qemView && qemView.ready && qemView.recording"),
            message="the page drew no live image",
        )
        live_texts = set()
        seen = []
        pinned = dragged = False
        deadline = time.monotonic() + 120
        while True:
            assert time.monotonic() < deadline, "the recording did not finish within 120 s"
            state = js(driver, "return qemView.recording;")
            if state["finished"]:
                break
            live_texts.add(driver.find_element("id", "recording").text)
            seen.append(snapshot(driver))
            if not pinned:
                # The last position, long before its frame arrives.
                click_scan(driver, SCAN[0] - 1, SCAN[1] - 1)
                pinned = True
            elif not dragged and state["received"] >= expected // 3:
                p = js(driver, "return qemView.detectorPoint();")
                step = max(1, int(round(p["scale"])))
                drag(driver, "dp-overlay", (p["x"], p["y"]), [(step, 0), (0, step)], step_ms=50)
                dragged = True
            time.sleep(0.2)
        assert dragged, "the recording ended before the drag"

        WebDriverWait(driver, 60, poll_frequency=0.05).until(
            lambda x: x.find_element("id", "recording").text == "complete",
            message="the page never said complete",
        )
        wait_idle(driver, "the page after the recording")
        # What the page shows when it knows the recording is finished.
        time.sleep(1.0)
        wait_idle(driver, "the page after the recording")

        pattern = [t for t in live_texts if re.fullmatch(r"live: \d+ of %d frames" % expected, t)]
        assert len(pattern) >= 3, "the page did not count the frames as they came: %s" % live_texts
        partial = [s for s in seen if s[0] is not None and 0 < s[0] < expected]
        assert len({s[1] for s in partial}) >= 3, "the scan image did not grow while recording"
        assert len({s[2] for s in partial}) >= 3, "the scan canvas did not change while recording"

        # Finished: the page's image and pattern are the published file's.
        det = js(driver, "return qemView.last.detector;")
        assert det["kind"] == "bf"
        want = load_npy(qem_product(tmp, "virtual", out, *detector_args(det)))
        assert want.ravel().all() and len(set(want.ravel().tolist())) > 1
        same_values(page_array(driver, "scan"), want)
        scan = js(driver, "return qemView.lastPattern.scan;")
        assert scan == [SCAN[0] - 1, SCAN[1] - 1], scan
        want_dp = load_npy(qem_product(tmp, "dp", out, "--scan", "%d,%d" % tuple(scan)))
        assert want_dp.any()
        same_values(page_array(driver, "pattern"), want_dp)

        # Polling stopped.
        polls = js(driver, "return qemView.counts.recordingPolls;")
        time.sleep(1.5)
        assert js(driver, "return qemView.counts.recordingPolls;") == polls
        driver.save_screenshot(os.path.join(artifacts_dir(), "record-view.png"))
        assert js(driver, "return qemView.errors;") == []
        assert console_errors(driver) == []
