#!/usr/bin/python3
"""Opens a pack with h5py, as a user would, and checks that it is a genuine
HDF5 file with the expected user block (65536 unless a second argument
names the size the plan chose) whose index names exactly the bytes of the
shard datasets. Usage: check_pack_h5.py PACK.h5 [USER_BLOCK]; exit 0 when
all hold."""
import json
import struct
import sys

import h5py
import numpy as np


def main(path, user_block=65536):
    with open(path, "rb") as f:
        data = f.read()
    magic, jlen, _crc, ix_off, ix_len = struct.unpack_from("<8sIIII", data, 0)
    assert magic == b"QGPUH5\x00\x01", "prelude signature"
    manifest = json.loads(data[24:24 + jlen])
    index = data[ix_off:ix_off + ix_len]
    v3 = index[:8] == b"QGIX\x00\x00\x00\x03"
    head = 44 if v3 else 36
    (shards,) = struct.unpack_from("<I", index, 8)
    (excluded,) = struct.unpack_from("<I", index, head)
    at = head + 4 + 4 * excluded + 32
    records = [struct.unpack_from("<7Q2I32s", index, at + 96 * k) for k in range(shards)]
    names = (["payload_u32", None, "compact_headers_u32"] if v3 else
             ["payload_lz4", "payload_lengths_minus_one", "descriptor_widths_u8"])
    with h5py.File(path, "r") as h5:
        assert h5.userblock_size == user_block, "user block %d" % h5.userblock_size
        assert ix_off + ix_len <= user_block, "metadata past the user block"
        group = h5["quantem_gpu"]
        assert group.attrs["schema"].decode() == manifest["schema"], "schema attribute"
        for k, r in enumerate(records):
            shard = h5["quantem_gpu/shards/%03d" % k]
            for name, (offset, size) in zip(names, ((r[0], r[1]), (r[2], r[3]), (r[4], r[5]))):
                if name is None:
                    assert size == 0
                    continue
                ds = shard[name]
                assert ds.id.get_offset() == offset, "%s offset" % name
                raw = ds[()].astype("<u4" if v3 else "u1").tobytes()
                assert raw == data[offset:offset + size], "%s bytes" % name
    print("h5py: %s opens, user block %d, %d shards match their index ranges" % (path, user_block, shards))


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:3]))
