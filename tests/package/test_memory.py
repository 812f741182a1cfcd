"""Saving from a 512 MiB memmap holds one block, not the array: the saving
process peaks under 256 MiB of resident memory, and the file holds the
array exactly."""
import subprocess
import sys
import textwrap

import numpy as np

import qem


def test_save_from_memmap_peak_rss(tmp_path):
    src = tmp_path / "big.npy"
    shape = (128, 128, 128, 128)  # 512 MiB of uint16
    a = np.lib.format.open_memmap(src, mode="w+", dtype=np.uint16, shape=shape)
    rng = np.random.default_rng(9)
    for r in range(0, 128, 8):
        a[r:r + 8] = rng.poisson(0.5, (8, 128, 128, 128)).astype(np.uint16)
    a.flush()
    del a
    # The saving process reports its own peak, VmHWM of its address space
    # (ru_maxrss would carry this process's size over fork and exec).
    script = textwrap.dedent(f"""
        import numpy as np, qem
        qem.save({str(tmp_path / 'big.qem')!r}, np.load({str(src)!r}, mmap_mode="r"))
        print([l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM")][0])
    """)
    done = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                          text=True)
    peak_kib = int(done.stdout.split()[-1])
    print(f"peak RSS saving a 512 MiB memmap: {peak_kib / 1024:.0f} MiB")
    assert peak_kib < 256 * 1024
    source = np.load(src, mmap_mode="r")
    with qem.open(tmp_path / "big.qem") as f:
        for r in range(0, 128, 16):
            np.testing.assert_array_equal(f[r:r + 16], source[r:r + 16])
