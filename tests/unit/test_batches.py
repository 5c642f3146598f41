"""The bad-batch scan of citemon._service.kafka, on batches built by aiokafka's own builder."""

from __future__ import annotations

import struct

import aiokafka.codec
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c
from aiokafka.structs import TopicPartition

from citemon._service.kafka import CODECS, split_batches, unpack_batches
from citemon._service.outputs import bad_batch_letter
from tests.kafka_faults import disable_codecs

TP = TopicPartition("t", 0)


def batch(base: int, codec: str, n: int, timestamp_ms: int = 1_700_000_000_000) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=CODECS.index(codec),
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i in range(n):
        builder.append(
            i, timestamp=timestamp_ms + i, key=b"k%d" % i, value=b"v%d" % (base + i), headers=[]
        )
    raw = bytearray(builder.build())
    struct.pack_into(">q", raw, 0, base)  # the base offset is outside the CRC, as on a broker
    return bytes(raw)


def test_split_batches_keeps_whole_batches_and_drops_a_cut_one() -> None:
    a, b, c = batch(0, "none", 2), batch(2, "gzip", 3), batch(5, "zstd", 1)
    assert split_batches(a + b + c) == [a, b, c]
    assert split_batches(a + b + c[:-1]) == [a, b]  # a fetch response may end inside a batch
    assert split_batches(b"") == []


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_unpacks(codec: str) -> None:
    scan = unpack_batches(TP, batch(10, codec, 4), None, 10)
    assert scan.bad is None
    assert [(r.offset, r.value) for r in scan.good] == [
        (10 + i, b"v%d" % (10 + i)) for i in range(4)
    ]


def test_unpack_stops_at_the_first_undecodable_batch_with_its_exact_offsets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bad = batch(3, "lz4", 5, timestamp_ms=1_234)
    raw = batch(0, "none", 3) + bad + batch(8, "gzip", 2)
    monkeypatch.setattr(aiokafka.codec, "has_lz4", aiokafka.codec.has_lz4)  # restored after
    disable_codecs("lz4")
    scan = unpack_batches(TP, raw, None, 1)  # from inside the first batch
    assert [r.offset for r in scan.good] == [1, 2]
    assert scan.bad is not None
    b = scan.bad
    assert (b.base_offset, b.next_offset, b.last_offset) == (3, 8, 7)
    assert (b.codec, b.reason, b.timestamp_ms, b.raw) == ("lz4", "unsupported_codec", 1_234, bad)
    assert b.error == "UnsupportedCodecError: Libraries for lz4 compression codec not found"
    assert str(b) == f"t/0 offsets 3-7 (lz4, {b.error})"
    message = bad_batch_letter(b, "t.dlq")
    assert message.topic == "t.dlq" and message.key is None and message.value == bad
    assert dict(message.headers) == {
        "citemon.error": b"unsupported_codec",
        "citemon.error.message": b.error.encode(),
        "citemon.source": b"t/0/3",
        "citemon.batch.offsets": b"3-7",
        "citemon.batch.codec": b"lz4",
    }
    # Past the bad batch everything decodes again.
    after = unpack_batches(TP, raw[len(batch(0, "none", 3)) + len(bad) :], None, 8)
    assert after.bad is None and [r.offset for r in after.good] == [8, 9]


def test_a_corrupt_crc_is_a_corrupt_batch() -> None:
    raw = bytearray(batch(0, "gzip", 2))
    raw[-1] ^= 0xFF
    scan = unpack_batches(TP, bytes(raw), None, 0)
    assert scan.good == []
    assert scan.bad is not None
    assert (scan.bad.reason, scan.bad.codec, scan.bad.next_offset) == ("corrupt_batch", "gzip", 2)
    assert "Invalid CRC" in scan.bad.error


def test_disable_codecs_checks_every_name_before_patching_any(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(aiokafka.codec, "has_zstd", aiokafka.codec.has_zstd)
    with pytest.raises(ValueError, match="unknown codec 'brotli'"):
        disable_codecs("zstd,brotli")
    assert aiokafka.codec.has_zstd() is True
    assert disable_codecs(" ZSTD ") == ["zstd"]
    assert aiokafka.codec.has_zstd() is False
    assert disable_codecs("") == []


def _recrc(raw: bytearray) -> bytes:
    """Fix the CRC up after an edit, as a broken producer would have written it."""
    struct.pack_into(">I", raw, 17, calc_crc32c(bytes(raw[21:])))
    return bytes(raw)


def test_an_unknown_codec_id_is_an_unsupported_codec() -> None:
    raw = bytearray(batch(0, "none", 2))
    (attributes,) = struct.unpack_from(">h", raw, 21)
    struct.pack_into(">h", raw, 21, attributes | 5)
    scan = unpack_batches(TP, _recrc(raw), None, 0)
    assert scan.bad is not None
    assert (scan.bad.reason, scan.bad.codec, scan.bad.next_offset) == (
        "unsupported_codec",
        "unknown(5)",
        2,
    )


def test_a_corrupt_payload_under_a_valid_crc_is_a_corrupt_batch() -> None:
    raw = bytearray(batch(0, "lz4", 3))
    raw[-3] ^= 0xFF
    scan = unpack_batches(TP, _recrc(raw), None, 0)
    assert scan.bad is not None
    assert (scan.bad.reason, scan.bad.codec, scan.bad.next_offset) == ("corrupt_batch", "lz4", 3)
