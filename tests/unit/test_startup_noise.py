"""aiokafka's transient coordinator messages are DEBUG while the monitor starts; real errors,
and the same messages once it has joined (or after the grace period), keep their level."""

from __future__ import annotations

import logging

import pytest
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    GroupCoordinatorNotAvailableError,
    GroupLoadInProgressError,
    KafkaConnectionError,
)

from citemon.service.lifecycle import COORDINATOR_LOGGER, StartupNoise, quiet_startup

coordinator = logging.getLogger(COORDINATOR_LOGGER)


def _aiokafka_logs_the_startup_noise() -> None:
    # What aiokafka 0.14's GroupCoordinator logs while the coordinator is not there yet.
    coordinator.error("Group Coordinator Request failed: %s", GroupCoordinatorNotAvailableError())
    coordinator.error("Group Coordinator Request failed: %s", GroupLoadInProgressError())
    coordinator.warning("Marking the coordinator dead (node %s)for group %s.", 1, "citemon")


def _levels(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == COORDINATOR_LOGGER]


def test_startup_noise_is_hidden_at_the_default_level(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    with quiet_startup(lambda: False):
        _aiokafka_logs_the_startup_noise()
    assert _levels(caplog) == []


def test_startup_noise_shows_at_debug_level(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with quiet_startup(lambda: False):
        _aiokafka_logs_the_startup_noise()
    assert _levels(caplog) == [
        ("DEBUG", "Group Coordinator Request failed: [Error 15] GroupCoordinatorNotAvailableError"),
        ("DEBUG", "Group Coordinator Request failed: [Error 14] GroupLoadInProgressError"),
        ("DEBUG", "Marking the coordinator dead (node 1)for group citemon."),
    ]


def test_a_real_error_during_startup_still_shows(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    with quiet_startup(lambda: False):
        coordinator.error("Group Coordinator Request failed: %s", KafkaConnectionError("refused"))
        coordinator.error("Group Coordinator Request failed: %s", GroupAuthorizationFailedError())
        coordinator.error("Error sending JoinGroupRequest_v5 to node 1 [%s] -- marking dead", "x")
    assert [level for level, _ in _levels(caplog)] == ["ERROR", "ERROR", "ERROR"]


def test_the_same_messages_show_once_joined(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    joined = False
    with quiet_startup(lambda: joined):
        _aiokafka_logs_the_startup_noise()
        joined = True
        _aiokafka_logs_the_startup_noise()
        joined = False  # a rebalance later: start-up is over for good
        coordinator.warning("Marking the coordinator dead (node %s)for group %s.", 1, "citemon")
    assert [level for level, _ in _levels(caplog)] == ["ERROR", "ERROR", "WARNING", "WARNING"]


def test_a_coordinator_missing_past_the_grace_period_is_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    now = [100.0]
    noise = StartupNoise(lambda: False, grace_s=60.0, clock=lambda: now[0])
    coordinator.addFilter(noise)
    try:
        now[0] = 159.9
        _aiokafka_logs_the_startup_noise()
        assert _levels(caplog) == []
        now[0] = 160.0
        _aiokafka_logs_the_startup_noise()
    finally:
        coordinator.removeFilter(noise)
    assert [level for level, _ in _levels(caplog)] == ["ERROR", "ERROR", "WARNING"]


def test_the_filter_is_removed_after_the_block(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    with quiet_startup(lambda: False):
        pass
    _aiokafka_logs_the_startup_noise()
    assert [level for level, _ in _levels(caplog)] == ["ERROR", "ERROR", "WARNING"]
