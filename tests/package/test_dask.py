"""to_dask(): lazy arrays whose tasks open the file by path in their own
process; results equal the dense array; the graph pickles; a file that
changed after the graph was made fails the task instead of giving stale
data."""
import pickle

import dask
import numpy as np
import pytest

import qem


def test_to_dask_equals_dense(generated):
    for name, (path, dense) in sorted(generated.items()):
        with qem.open(path) as f:
            arr = f.to_dask()
            assert arr.shape == dense.shape and arr.dtype == dense.dtype
            assert arr.chunks[1:] == ((dense.shape[1],), (dense.shape[2],), (dense.shape[3],))
            np.testing.assert_array_equal(arr.compute(scheduler="sync"), dense)
            flat = f.to_dask(flat=True)
            assert flat.chunks[0] == tuple(e - s for s, e in f.chunks)
            np.testing.assert_array_equal(flat.compute(scheduler="sync"),
                                          dense.reshape(-1, *dense.shape[2:]))


def test_graph_pickles_and_runs_in_other_processes(generated):
    path, dense = generated["pack16"]
    with qem.open(path) as f:
        arr = pickle.loads(pickle.dumps(f.to_dask()))
    with dask.config.set(scheduler="processes", num_workers=2):
        np.testing.assert_array_equal(arr.compute(), dense)
        np.testing.assert_array_equal(arr[2:5, 1, 3].compute(), dense[2:5, 1, 3])
    g = pickle.loads(pickle.dumps(qem.open(path)))  # a File travels as its path
    np.testing.assert_array_equal(np.asarray(g), dense)


def test_changed_file_fails_the_task(tmp_path):
    a = np.arange(2 * 3 * 4 * 5, dtype=np.uint16).reshape(2, 3, 4, 5)
    qem.save(tmp_path / "x.qem", a)
    with qem.open(tmp_path / "x.qem") as f:
        arr = f.to_dask()
    (tmp_path / "x.qem").unlink()
    qem.save(tmp_path / "x.qem", a + 1)
    with pytest.raises(qem.ChangedError, match="changed after the computation was set up"):
        arr.compute(scheduler="sync")
    (tmp_path / "x.qem").unlink()
    with pytest.raises(qem.FileSystemError, match="cannot open"):
        arr.compute(scheduler="sync")
