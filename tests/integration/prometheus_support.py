"""A real Prometheus (Debian's package) for integration tests, on 127.0.0.1 (1 s intervals by
default; the time-to-detect benchmark passes a user's 15 s)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.conftest import need_server

__all__ = ["free_port", "query", "run_prometheus"]

READY_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def run_prometheus(
    workdir: Path, rules: Path, target_port: int, *, interval: str = "1s"
) -> AsyncIterator[str]:
    """Start Prometheus scraping ``127.0.0.1:target_port`` with ``rules``; yields its base URL.

    ``interval`` is both the scrape and the rule evaluation interval.

    A missing binary or a server that does not become ready fails under CI=true, else skips.
    """
    binary = shutil.which("prometheus")
    if binary is None:
        need_server("prometheus", "install Debian's prometheus package (`make tools`)")
        raise AssertionError  # unreachable
    web_port = free_port()
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {
                "job_name": "citemon",
                "honor_labels": True,
                "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}],
            }
        ],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = (workdir / "prometheus.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        binary,
        f"--config.file={workdir / 'prometheus.yml'}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{web_port}",
        "--enable-feature=exemplar-storage",
        stdout=log,
        stderr=log,
    )
    url = f"http://127.0.0.1:{web_port}"
    try:
        async with httpx.AsyncClient() as client:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while True:
                try:
                    if (await client.get(f"{url}/-/ready")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if proc.returncode is not None or time.monotonic() > deadline:
                    log.flush()
                    tail = (workdir / "prometheus.log").read_text()[-2000:]
                    need_server("prometheus", f"did not become ready:\n{tail}")
                await asyncio.sleep(0.2)
        yield url
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        log.close()


async def query(
    client: httpx.AsyncClient, url: str, expr: str, at: float | None = None
) -> list[dict[str, Any]]:
    """An instant query, evaluated now or at the Unix time ``at`` (so that several queries read
    the same samples while the monitor and Prometheus go on)."""
    params: dict[str, str | float] = {"query": expr}
    if at is not None:
        params["time"] = at
    reply = await client.get(f"{url}/api/v1/query", params=params)
    body = reply.json()
    assert reply.status_code == 200 and body["status"] == "success", (expr, body)
    result: list[dict[str, Any]] = body["data"]["result"]
    return result
