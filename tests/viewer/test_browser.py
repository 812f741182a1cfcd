"""The page in a real headless Chromium (Debian's chromium, chromium-driver
and python3-selenium, installed by scripts/install-deps): drag the detector,
resize it, change its kind, click and step through scan positions, pick a
file of a series; every image and pattern the page drew is read back from
the page (window.qemView) and compared exactly with what `qem virtual` and
`qem dp` write for the same detector and position. A screenshot of each
page is kept under QEM_VIEWER_ARTIFACTS, and the browser console must stay
free of errors. A missing browser fails the test: it is a dependency.
"""
import json
import os
import shutil
import subprocess
import tempfile
import time

import numpy as np
import pytest

from viewer_util import QEM, Server, artifacts_dir, fixture, load_npy, qem_product, saved_disk_file

QEM_FIXTURE = fixture("qem", "u16_dense_highdose.qem")
PACK_FIXTURE = fixture("pack", "v1_u16_4x32_16x16.h5")
PACK_U8_FIXTURE = fixture("pack", "v3_upstream_test_writer_notes_v3.h5")

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1700,1300",
]


def find(program, fallback):
    path = shutil.which(program) or fallback
    assert os.path.exists(path), (
        "%s is missing: the viewer tests need Debian's chromium and chromium-driver "
        "(run scripts/install-deps)" % program
    )
    return path


@pytest.fixture(scope="module")
def driver():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as error:  # a dependency, so a failure, not a skip
        raise AssertionError("python3-selenium is missing (run scripts/install-deps): %s" % error)
    chromium = find("chromium", "/usr/bin/chromium")
    chromedriver = find("chromedriver", "/usr/bin/chromedriver")
    profile = tempfile.mkdtemp(prefix="qem-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument("--user-data-dir=" + profile)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    d.set_script_timeout(60)
    yield d
    d.quit()
    shutil.rmtree(profile, ignore_errors=True)


def wait_idle(d, what="the page"):
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(d, 120, poll_frequency=0.05).until(
        lambda x: x.execute_script("return window.qemView && qemView.ready && !qemView.busy()"),
        message="%s did not settle" % what,
    )


def js(d, code, *args):
    return d.execute_script(code, *args)


def console_errors(d):
    return [e for e in d.get_log("browser") if e.get("level") == "SEVERE"]


def detector_args(det):
    if det["kind"] == "rect":
        return None
    args = ["--detector", det["kind"], "--center", "%r,%r" % tuple(det["center"])]
    if det["kind"] == "annulus":
        args += ["--inner", repr(det["inner"]), "--outer", repr(det["outer"])]
    else:
        args += ["--radius", repr(det["radius"])]
    return args


def page_array(d, which, k=0):
    """What the page drew, read back from the page: dtype and values."""
    if which == "scan":
        meta = js(d, "const i = qemView.last.images[arguments[0]]; return [i.dtype, i.shape];", k)
    else:
        meta = js(d, "const p = qemView.lastPattern; return [p.dtype, p.shape];")
    values = js(d, "return qemView.values(arguments[0], arguments[1]);", which, k)
    return meta[0], tuple(meta[1]), values


def same_values(got, want):
    dtype, shape, values = got
    assert dtype == want.dtype.name, (dtype, want.dtype)
    assert shape == want.shape, (shape, want.shape)
    if want.dtype == np.uint64:
        assert [int(v) for v in values] == [int(v) for v in want.ravel()]
    elif want.dtype.kind == "f":
        assert np.array_equal(np.array(values, dtype=np.float64), want.ravel().astype(np.float64), equal_nan=True)
    else:
        assert [int(v) for v in values] == want.ravel().tolist()


def check_scan_images(d, tmp, paths):
    """Every file's scan image on the page equals `qem virtual` (or `qem
    virtual --mask` of the same rectangle) for the detector it was drawn for."""
    det = js(d, "return qemView.last.detector;")
    assert det == js(d, "return qemView.state.det;"), "the image drawn is not the detector's latest"
    for k, path in enumerate(paths):
        args = detector_args(det)
        if args is None:
            rows, cols = js(d, "return qemView.state.detShape;")
            mask = np.zeros((rows, cols), dtype=np.uint8)
            r0, r1, c0, c1 = det["rect"]
            mask[r0:r1, c0:c1] = 1
            mask_path = os.path.join(tmp, "rect-mask.npy")
            np.save(mask_path, mask)
            args = ["--mask", mask_path]
        want = load_npy(qem_product(tmp, "virtual", path, *args))
        same_values(page_array(d, "scan", k), want)
    return det


def drag(d, element_id, start, moves, step_ms=250):
    """Presses at `start` (CSS pixels from the element's centre) and moves
    by each offset in turn, each move taking `step_ms`, as a person
    dragging would."""
    from selenium.webdriver.common.action_chains import ActionChains

    element = d.find_element("id", element_id)
    chain = ActionChains(d, duration=step_ms)
    chain.move_to_element_with_offset(element, int(round(start[0])), int(round(start[1])))
    chain.click_and_hold()
    for dx, dy in moves:
        chain.move_by_offset(dx, dy)
    chain.release().perform()


def click_scan(d, row, col):
    from selenium.webdriver.common.action_chains import ActionChains

    p = js(d, "return qemView.scanPoint(arguments[0], arguments[1]);", row, col)
    element = d.find_element("id", "scan-overlay")
    ActionChains(d).move_to_element_with_offset(element, int(round(p["x"])), int(round(p["y"]))).click().perform()


def check_pattern(d, tmp, path, row, col):
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(d, 60, poll_frequency=0.05).until(
        lambda x: x.execute_script(
            "const p = qemView.lastPattern; return !qemView.busy() && p && p.scan && "
            "p.scan[0] === arguments[0] && p.scan[1] === arguments[1];",
            row,
            col,
        ),
        message="the pattern at (%d, %d) was not shown" % (row, col),
    )
    want = load_npy(qem_product(tmp, "dp", path, "--scan", "%d,%d" % (row, col)))
    same_values(page_array(d, "pattern"), want)


def open_page(d, server):
    d.get(server.url)
    wait_idle(d)
    assert js(d, "return qemView.errors;") == []


def exercise_detector(d, tmp, paths):
    """Move, resize, change kind: the image follows each time, exactly."""
    first = check_scan_images(d, tmp, paths)
    sent_before = js(d, "return qemView.counts.liveSent;")
    p = js(d, "return qemView.detectorPoint();")
    scale = p["scale"]
    # Drag the body by about two detector pixels, in several small moves
    # (faster than the server answers: they must not queue).
    step = max(1, int(round(scale / 2)))
    drag(d, "dp-overlay", (p["x"], p["y"]), [(step, 0)] * 3 + [(0, step)] * 2)
    wait_idle(d, "the page after a drag")
    moved = check_scan_images(d, tmp, paths)
    assert moved["center"] != first["center"], "the drag did not move the detector"
    assert js(d, "return qemView.counts.liveSent;") > sent_before
    # Drag the edge outwards: the radius grows.
    p = js(d, "return qemView.detectorPoint();")
    edge = (p["x"] + moved["radius"] * scale, p["y"])
    drag(d, "dp-overlay", edge, [(step, 0), (step, 0)])
    wait_idle(d, "the page after a resize")
    resized = check_scan_images(d, tmp, paths)
    assert resized["radius"] > moved["radius"], (moved, resized)
    assert resized["center"] == moved["center"]
    # Other kinds, chosen from the menu.
    from selenium.webdriver.support.ui import Select

    for kind in ("annulus", "adf", "rect", "bf"):
        Select(d.find_element("id", "det-kind")).select_by_value(kind)
        wait_idle(d, "the page after choosing " + kind)
        assert check_scan_images(d, tmp, paths)["kind"] == kind
    latency = d.find_element("id", "latency").text
    assert "server" in latency and "ms" in latency, latency


def exercise_patterns(d, tmp, path):
    """Click a scan position, then step with the keyboard."""
    rows, cols = js(d, "return [qemView.state.files[qemView.state.selected].shape[0], "
                       "qemView.state.files[qemView.state.selected].shape[1]];")
    row, col = rows - 1, min(2, cols - 1)
    click_scan(d, row, col)
    check_pattern(d, tmp, path, row, col)
    from selenium.webdriver.common.keys import Keys

    d.find_element("tag name", "body").send_keys(Keys.ARROW_UP)
    check_pattern(d, tmp, path, row - 1, col)
    d.find_element("tag name", "body").send_keys("d")
    check_pattern(d, tmp, path, row - 1, min(col + 1, cols - 1))


def finish(d, server, name):
    """Screenshot and the server's request log (token hidden) as artifacts;
    no console errors."""
    d.save_screenshot(os.path.join(artifacts_dir(), name + ".png"))
    errors = console_errors(d)
    assert errors == [], json.dumps(errors, indent=1)
    assert js(d, "return qemView.errors;") == []
    d.get("about:blank")  # the page lets go of its connections
    log = server.stop()
    with open(os.path.join(artifacts_dir(), name + "-requests.log"), "w") as f:
        f.write(log)
    assert "-> 5" not in log, "the server failed a request:\n" + log


def test_qem_file(driver, tmp_path):
    with Server([QEM_FIXTURE], "--verbose") as server:
        open_page(driver, server)
        exercise_detector(driver, str(tmp_path), [QEM_FIXTURE])
        exercise_patterns(driver, str(tmp_path), QEM_FIXTURE)
        # The mean pattern is back on the right after "show mean".
        driver.find_element("id", "show-mean").click()
        wait_idle(driver)
        same_values(page_array(driver, "pattern"), load_npy(qem_product(str(tmp_path), "mean", QEM_FIXTURE)))
        finish(driver, server, "viewer-qem")


def test_pack_file(driver, tmp_path):
    with Server([PACK_FIXTURE], "--verbose") as server:
        open_page(driver, server)
        exercise_detector(driver, str(tmp_path), [PACK_FIXTURE])
        exercise_patterns(driver, str(tmp_path), PACK_FIXTURE)
        finish(driver, server, "viewer-pack")


def test_prepared_values_said(driver, tmp_path):
    """A pack carrying prepared values: the first BF image at its
    calibration and the CoM/DPC come from them, and the page says so."""
    copy = str(tmp_path / "prepared.h5")
    subprocess.run([QEM, "calibrate", PACK_U8_FIXTURE, "-o", copy, "-q"], check=True)
    with Server([copy], "--verbose") as server:
        open_page(driver, server)
        wait_idle(driver, "the first image")
        latency = driver.find_element("id", "latency").text
        assert "prepared values the file records" in latency, latency
        deadline = time.monotonic() + 20
        readout = ""
        while time.monotonic() < deadline and "moments the file records" not in readout:
            time.sleep(0.1)
            readout = driver.find_element("id", "dpc-readout").text
        assert "from the moments the file records" in readout, readout
        finish(driver, server, "viewer-prepared")


def test_recorded_first_image_said(driver, tmp_path):
    """A .qem file qem wrote: the first image is the one its header records
    (the default detector sent exactly as resolved), the page says so, and
    it equals `qem virtual` of that detector; once dragged, the detector is
    computed, still exactly."""
    path = saved_disk_file(tmp_path)
    with Server([path], "--verbose") as server:
        open_page(driver, server)
        wait_idle(driver, "the first image")
        latency = driver.find_element("id", "latency").text
        assert "prepared values the file records" in latency, latency
        first = check_scan_images(driver, str(tmp_path), [path])
        assert first.get("fileDefault") is True, first
        p = js(driver, "return qemView.detectorPoint();")
        step = max(1, int(round(p["scale"])))
        drag(driver, "dp-overlay", (p["x"], p["y"]), [(step, 0)] * 2)
        wait_idle(driver, "the page after a drag")
        moved = check_scan_images(driver, str(tmp_path), [path])
        assert not moved.get("fileDefault") and moved["center"] != first["center"], moved
        assert "prepared values" not in driver.find_element("id", "latency").text
        finish(driver, server, "viewer-recorded")


def test_kept_first_image_said(driver, tmp_path):
    """A file that records no detector image (an upstream .qem file): the
    first open computes the default detector's image and keeps it in
    --cache-dir; the second opens on that image, the page says so, and it
    equals `qem virtual` of the detector the page holds."""
    path = QEM_FIXTURE
    cache = str(tmp_path / "cache")
    for kept in (False, True):
        with Server([path], "--cache-dir", cache) as server:
            open_page(driver, server)
            wait_idle(driver, "the first image")
            latency = driver.find_element("id", "latency").text
            assert ("kept from an earlier open" in latency) == kept, latency
            check_scan_images(driver, str(tmp_path), [path])
            finish(driver, server, "viewer-kept-%d" % kept)


SLOW_LIVE = """
const original = window.fetch;
window.fetch = (url, options) => String(url).startsWith('/api/live')
  ? new Promise((resolve) => setTimeout(resolve, arguments[0])).then(() => original(url, options))
  : original(url, options);
"""


def test_slow_work_shows_progress(driver, tmp_path):
    """Work over a second says so with the seconds elapsed (a live answer
    held back 2.5 s in the page), and the line clears when it is drawn;
    where the detector and the mean pattern came from stays on the page."""
    with Server([QEM_FIXTURE]) as server:
        open_page(driver, server)
        origin = driver.find_element("id", "origin").text
        assert origin.startswith("detector from the ") and "mean pattern" in origin, origin
        js(driver, SLOW_LIVE, 2500)
        p = js(driver, "return qemView.detectorPoint();")
        drag(driver, "dp-overlay", (p["x"], p["y"]), [(max(1, int(round(p["scale"]))), 0)])
        deadline = time.monotonic() + 10
        status = ""
        while time.monotonic() < deadline and "computing the scan image" not in status:
            time.sleep(0.1)
            status = driver.find_element("id", "status").text
        assert "computing the scan image (" in status and " s)" in status, status
        wait_idle(driver, "the page after a slow update")
        assert "computing" not in driver.find_element("id", "status").text
        finish(driver, server, "viewer-progress")


def test_moves_never_queue(driver, tmp_path):
    """A server slower than the moves (each live answer held back 1 s in
    the page, moves 20 ms apart): a drag of 12 steps sends only a few
    updates, the latest detector wins, and images are drawn in increasing
    order only."""
    with Server([QEM_FIXTURE], "--verbose") as server:
        open_page(driver, server)
        js(driver, SLOW_LIVE, 1000)
        moves = js(driver, "return qemView.counts.moves;")
        sent = js(driver, "return qemView.counts.liveSent;")
        drawn = js(driver, "return qemView.drawnSeqs.length;")
        p = js(driver, "return qemView.detectorPoint();")
        step = max(1, int(round(p["scale"] / 3)))
        drag(driver, "dp-overlay", (p["x"], p["y"]), [(step, 0)] * 6 + [(0, step)] * 6, step_ms=20)
        wait_idle(driver, "the page after a slow drag")
        moved = js(driver, "return qemView.counts.moves;") - moves
        moves_sent = js(driver, "return qemView.counts.liveSent;") - sent
        assert moved >= 8, moved
        assert 1 <= moves_sent <= 3, (moved, moves_sent)
        seqs = js(driver, "return qemView.drawnSeqs;")
        assert seqs == sorted(set(seqs)), seqs
        assert len(seqs) - drawn == moves_sent
        # What is drawn last is the last place the detector was dragged to.
        check_scan_images(driver, str(tmp_path), [QEM_FIXTURE])
        finish(driver, server, "viewer-slow")


def test_series(driver, tmp_path):
    """Two files, one detector: both images follow every move, and the
    thumbnails select which file the panels show."""
    paths = [QEM_FIXTURE, PACK_FIXTURE]
    with Server(paths, "--verbose") as server:
        open_page(driver, server)
        assert js(driver, "return document.querySelectorAll('#thumbs canvas').length;") == 2
        exercise_detector(driver, str(tmp_path), paths)
        driver.find_elements("css selector", "#thumbs canvas")[1].click()
        wait_idle(driver)
        assert js(driver, "return qemView.state.selected;") == 1
        exercise_patterns(driver, str(tmp_path), PACK_FIXTURE)
        finish(driver, server, "viewer-series")
