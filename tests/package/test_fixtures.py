"""Every upstream .qem and pack fixture reads bit for bit through
np.asarray, slicing and read(); every corrupted copy raises its qem.Error
subclass."""
import json

import numpy as np
import pytest

import qem


def qem_fixtures(fixtures):
    index = json.loads((fixtures / "qem" / "INDEX.json").read_text())
    return [f["name"] for f in index["fixtures"]]


def same_bits(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype
    assert got.tobytes() == np.ascontiguousarray(want).tobytes()


def test_every_qem_fixture(fixtures):
    names = qem_fixtures(fixtures)
    assert len(names) == 5
    for name in names:
        want = np.load(fixtures / "qem" / f"{name}.npy")
        facts = json.loads((fixtures / "qem" / f"{name}.json").read_text())
        with qem.open(fixtures / "qem" / f"{name}.qem") as f:
            assert f.format == "qem" and f.codec == facts["codec"]
            assert f.shape == tuple(facts["shape"])
            same_bits(np.asarray(f), want.astype(f.dtype))
            same_bits(f[1, 2], want[1, 2].astype(f.dtype))
            same_bits(f[-1, ::2, 1:-1, ::-2], want[-1, ::2, 1:-1, ::-2].astype(f.dtype))
            same_bits(f.read(scan_region=(0, 2, 1, 3), detector_region=(1, 4, 0, 3)),
                      want[0:2, 1:3, 1:4, 0:3].astype(f.dtype))
            flat = want.reshape(-1, *want.shape[2:])
            same_bits(f.read(scan_indices=[5, 0, 5, 3]), flat[[5, 0, 5, 3]].astype(f.dtype))
            if f.codec == "runtime-column-rans-spatial-v2":
                valid = bytes.fromhex(facts["header"]["valid"]) if "valid" in facts["header"] \
                    else None
                if valid is not None:
                    bits = np.unpackbits(np.frombuffer(valid, np.uint8), bitorder="big")
                    np.testing.assert_array_equal(
                        f.valid.ravel(), bits[:f.shape[2] * f.shape[3]].astype(bool))


def test_scaled_fixture_values_and_codes(fixtures):
    with qem.open(fixtures / "qem" / "scaled_u16_regions.qem") as f:
        assert f.dtype == np.float32
        same_bits(np.asarray(f), np.load(fixtures / "qem" / "scaled_u16_regions.npy"))
    with qem.open(fixtures / "qem" / "scaled_u16_regions.qem", raw=True) as f:
        assert f.dtype == np.uint16
        same_bits(np.asarray(f), np.load(fixtures / "qem" / "scaled_u16_regions.codes.npy"))


PACKS = ["v1_u16_4x32_16x16", "v1_u16_excluded_retained", "v3_upstream_test_writer_notes_v3",
         "v3_upstream_test_writer_legacy_nonportable"]


def test_every_pack_fixture(fixtures):
    for name in PACKS:
        facts = json.loads((fixtures / "pack" / f"{name}.json").read_text())
        source = np.load(fixtures / "pack" / facts["source_array"])
        excluded = facts["excluded"]["flat_row_major"]
        working = source.reshape(source.shape[0], source.shape[1], -1).copy()
        working[:, :, excluded] = 0
        working = working.reshape(source.shape).astype(facts["working_dtype"])
        with qem.open(fixtures / "pack" / f"{name}.h5") as f:
            assert f.format == "pack" and f.shape == tuple(facts["shape"])
            same_bits(np.asarray(f), working)
            same_bits(f[0, -1], working[0, -1])
            same_bits(f[1::3, ::5, 2:, :3], working[1::3, ::5, 2:, :3])
            assert not f.valid.ravel()[excluded].any()
            assert f.valid.sum() == f.shape[2] * f.shape[3] - len(excluded)
        if facts["raw_reconstruction_available"]:
            with qem.open(fixtures / "pack" / f"{name}.h5", raw=True) as f:
                assert f.dtype == np.uint16
                same_bits(np.asarray(f), source.astype(np.uint16))
        else:
            with pytest.raises(qem.UnsupportedError):
                qem.open(fixtures / "pack" / f"{name}.h5", raw=True)


QEM_CORRUPT = {
    "truncated.qem": (qem.FormatError, "length disagrees"),
    "flipped_header_byte.qem": (qem.ChecksumError, "header checksum mismatch"),
    "flipped_body_byte.qem": (qem.ChecksumError, "body checksum mismatch in block 0"),
    "unknown_codec_rehashed.qem": (qem.UnsupportedError, "update qem"),
    "bad_rans_stream_rehashed.qem": (qem.FormatError, "invalid final state"),
}


def test_corrupted_qem_raise_their_class(fixtures):
    cases = json.loads((fixtures / "qem" / "corrupt" / "corrupt.json").read_text())["cases"]
    assert sorted(c["file"] for c in cases) == sorted(QEM_CORRUPT)
    for name, (cls, words) in QEM_CORRUPT.items():
        with pytest.raises(cls) as info:
            with qem.open(fixtures / "qem" / "corrupt" / name) as f:
                np.asarray(f)
        assert words in str(info.value), str(info.value)
        assert type(info.value) is cls, (name, type(info.value))
        assert info.value.status and info.value.group


def test_body_checked_on_read_when_not_verified(fixtures):
    path = fixtures / "qem" / "corrupt" / "flipped_body_byte.qem"
    f = qem.open(path, verify=False)  # opening does not hash the body
    with pytest.raises(qem.ChecksumError):
        f[0, 0]
    f.close()


PACK_CORRUPT = {
    "v1_json_byte_flipped.h5": (qem.ChecksumError, "CRC-32"),
    "v1_payload_byte_flipped_compressed_rehashed.h5": (qem.ChecksumError,
                                                       "shard 1 decoded payload"),
    "v1_truncated_in_last_range.h5": (qem.FormatError, "outside"),
    "v1_index_trailing_byte.h5": (qem.FormatError, "trailing bytes"),
    "v1_overlapping_ranges.h5": (qem.FormatError, "overlap"),
    "v1_width_17.h5": (qem.FormatError, "17 bits per sample"),
    "v3_payload_byte_flipped.h5": (qem.ChecksumError, "shard 1 direct payload"),
    "v3_json_byte_flipped.h5": (qem.ChecksumError, "CRC-32"),
    "v3_excluded_pixel_has_width.h5": (qem.FormatError, "excluded detector pixel"),
}


def test_corrupted_packs_raise_their_class(fixtures):
    listed = json.loads((fixtures / "pack" / "corrupt" / "corrupt.json").read_text())
    assert sorted(c["file"] for c in listed["corruptions"]) == sorted(PACK_CORRUPT)
    for name, (cls, words) in PACK_CORRUPT.items():
        with pytest.raises(cls) as info:
            qem.open(fixtures / "pack" / "corrupt" / name)
        assert type(info.value) is cls, (name, type(info.value), str(info.value))
        assert words in str(info.value)


def test_expected_digest(fixtures):
    name = "u8_sparse_lowdose"
    facts = json.loads((fixtures / "qem" / f"{name}.json").read_text())
    with qem.open(fixtures / "qem" / f"{name}.qem", expect_sha256=facts["file_sha256"]):
        pass
    with pytest.raises(qem.ChecksumError):
        qem.open(fixtures / "qem" / f"{name}.qem", expect_sha256="0" * 64)
