"""Faults the tests inject into a real monitor: Kafka clients that fail on cue, missing codecs.

The monitor takes its Kafka clients from a :class:`~citemon._service.kafka.KafkaClients`;
:class:`FaultyClients` hands it aiokafka's own consumer with one call made to fail, so a test
sees what a bug in that path does (a supervised loop dies) without a hook in the runtime code.
:func:`disable_codecs` makes aiokafka believe a codec's library is missing, which is how a test
gets a real, broker-accepted batch the monitor cannot decode (the broker validates batches on
produce, so a corrupt one never reaches a log). Without a broker, :class:`RereadClients` hands
intake and the re-key stage a :class:`Rereads`: the re-read past such a batch answered with the
scans a test gives it.

Run as a module, it is ``citemon`` with those faults, for the tests that need a process of its
own (to kill it, or to watch it exit): ``python -m tests.kafka_faults [--disable-codecs lz4]
[--fail-commit] [--fail-lag] --log-level INFO run …``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any, Final

from aiokafka import AIOKafkaConsumer

from citemon._commands import run
from citemon._core.errors import CitemonError
from citemon._service.kafka import KafkaClients, Rereader, Scan
from citemon._service.settings import Settings
from citemon.cli import build_parser

__all__ = [
    "CODEC_NAMES",
    "FaultyClients",
    "InjectedFault",
    "RereadClients",
    "Rereads",
    "disable_codecs",
]

CODEC_NAMES: Final = ("gzip", "snappy", "lz4", "zstd")
"""The codecs :func:`disable_codecs` knows (``aiokafka.codec.has_<name>``)."""


def disable_codecs(names: str) -> list[str]:
    """Make aiokafka's batch decoders believe the named codecs' libraries are missing
    (comma-separated, any case); every name is checked before any is patched."""
    import aiokafka.codec as codec

    wanted = [n.strip().lower() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in CODEC_NAMES]
    if unknown:
        raise ValueError(f"unknown codec {unknown[0]!r} (one of {CODEC_NAMES})")
    for name in wanted:
        setattr(codec, f"has_{name}", lambda: False)
    return wanted


class InjectedFault(BaseException):
    """What a failing call raises: a ``BaseException``, so no ``except Exception`` on the way
    takes it for a Kafka error to retry (as a bug's error would not be)."""


class _Consumer(AIOKafkaConsumer):  # type: ignore[misc]
    def __init__(self, *, fail_commit: bool, fail_lag: bool, **options: Any) -> None:
        super().__init__(**options)
        self._fail_commit = fail_commit
        self._fail_lag = fail_lag

    async def commit(self, offsets: Any = None) -> None:
        if self._fail_commit:
            self._fail_commit = False  # once: the final commit at shutdown goes through
            raise InjectedFault("the test refused the first commit")
        await super().commit(offsets)

    async def end_offsets(self, partitions: Any) -> Any:
        if self._fail_lag:
            raise RuntimeError("the test refused the log ends")
        return await super().end_offsets(partitions)


class FaultyClients(KafkaClients):
    """aiokafka's clients, but the consumer's first ``commit`` (``fail_commit``: the commit
    loop's path without a results topic) or every ``end_offsets`` (``fail_lag``: the lag
    loop's) fails."""

    def __init__(self, *, fail_commit: bool = False, fail_lag: bool = False) -> None:
        self.fail_commit = fail_commit
        self.fail_lag = fail_lag

    def consumer(self, **options: Any) -> Any:
        return _Consumer(fail_commit=self.fail_commit, fail_lag=self.fail_lag, **options)


class Rereads(Rereader):
    """The re-read past an undecodable batch answered with ``scans`` (no broker; a partition
    not in it has no bad batch), each re-read recorded in ``read`` as (partition, offset);
    ``meanwhile`` runs while a fetch is out (a rebalance there, say)."""

    def __init__(self, scans: dict[Any, Scan]) -> None:
        super().__init__({}, "rereads", max_bytes=1)
        self.scans = scans
        self.read: list[tuple[Any, int]] = []
        self.meanwhile: Callable[[], None] = lambda: None

    async def scan(self, tp: Any, offset: int) -> Scan:
        self.read.append((tp, offset))
        self.meanwhile()
        return self.scans.get(tp, Scan())


class RereadClients(KafkaClients):
    """aiokafka's clients, but the re-read past an undecodable batch is ``rereads``."""

    def __init__(self, rereads: Rereads) -> None:
        self.rereads = rereads

    def rereader(self, settings: Settings, *, client_id: str) -> Rereader:
        return self.rereads


def main(argv: Sequence[str] | None = None) -> int:
    """``citemon run`` with the faults asked for, then the rest of the command line."""
    faults = argparse.ArgumentParser(add_help=False)
    faults.add_argument("--disable-codecs", default="")
    faults.add_argument("--fail-commit", action="store_true")
    faults.add_argument("--fail-lag", action="store_true")
    ours, rest = faults.parse_known_args(argv)
    disable_codecs(ours.disable_codecs)
    args = build_parser().parse_args(rest)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    clients = FaultyClients(fail_commit=ours.fail_commit, fail_lag=ours.fail_lag)
    try:
        return run.main(args, clients=clients)
    except CitemonError as exc:  # as citemon.cli.main reports it
        print(f"citemon: error: {exc}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 2))


if __name__ == "__main__":
    raise SystemExit(main())
