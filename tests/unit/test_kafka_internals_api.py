"""The aiokafka internals :mod:`citemon._service.kafka` relies on exist on the installed
aiokafka, with the arguments it passes (``tests/integration/test_kafka_internals.py`` checks how
they behave against the broker). A failure here names the assumption an upgrade broke."""

from __future__ import annotations

import inspect
import re
import tomllib
from importlib.metadata import version

from tests.conftest import REPO


def _params(func: object) -> list[str]:
    return list(inspect.signature(func).parameters)  # type: ignore[arg-type]


def test_the_installed_aiokafka_is_inside_the_pin() -> None:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (pin,) = [d for d in deps if d.startswith("aiokafka")]
    low, high = re.fullmatch(r"aiokafka>=(\d+\.\d+),<(\d+\.\d+)", pin.split(";")[0]).groups()  # type: ignore[union-attr]
    installed = tuple(int(x) for x in version("aiokafka").split(".")[:2])
    assert (
        tuple(int(x) for x in low.split(".")) <= installed < tuple(int(x) for x in high.split("."))
    ), (pin, version("aiokafka"))


def test_the_group_coordinator_can_be_asked_to_rejoin() -> None:
    from aiokafka.consumer.group_coordinator import GroupCoordinator

    assert _params(GroupCoordinator.request_rejoin) == ["self"]


def test_a_transactional_producer_says_whether_it_is_fatal() -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.producer.transaction_manager import TransactionManager

    assert _params(TransactionManager.is_fatal_error) == ["self"]
    assert "self._txn_manager = TransactionManager(" in inspect.getsource(AIOKafkaProducer)


def test_the_low_level_client_has_what_the_re_read_and_inspect_use() -> None:
    from aiokafka.client import AIOKafkaClient

    for name in ("bootstrap", "close", "fetch_all_metadata", "force_metadata_update", "add_topic"):
        assert callable(getattr(AIOKafkaClient, name)), name
    assert _params(AIOKafkaClient.send)[:3] == ["self", "node_id", "request"]
    assert "client_id" in _params(AIOKafkaClient.__init__)


def test_fetch_request_and_the_consumers_unpacking_take_these_arguments() -> None:
    from aiokafka.consumer.fetcher import PartitionRecords
    from aiokafka.protocol.fetch import FetchRequest
    from aiokafka.record.memory_records import MemoryRecords

    assert _params(PartitionRecords.__init__) == [
        "self",
        "tp",
        "records",
        "aborted_transactions",
        "fetch_offset",
        "key_deserializer",
        "value_deserializer",
        "check_crcs",
        "isolation_level",
    ]
    assert callable(MemoryRecords.next_batch)
    FetchRequest(0, 1, 1024, 1, [("t", [(0, 0, 1024)])])  # the arguments scan_partition passes


def test_every_codec_has_the_probe_the_tests_replace() -> None:
    import aiokafka.codec as codec

    from tests.kafka_faults import CODEC_NAMES

    for name in CODEC_NAMES:
        assert callable(getattr(codec, f"has_{name}")), name
