"""A real Label Studio server on loopback (SQLite), from the venv ``make label-studio`` builds.

A fresh Label Studio spends most of its start-up applying database migrations (about 30 s on an
idle 2-core machine, over 3 minutes under load). The first start therefore runs on a template
data directory kept beside the venv; every later start copies that migrated template into a
temporary directory and only boots (about 25 s under load).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.conftest import need_server

__all__ = ["LABEL_STUDIO_VERSION", "LabelStudio", "label_studio_server"]

LABEL_STUDIO_VERSION = "1.23.2"
#: The Label Studio venv; ``make label-studio`` makes it (default under ~/.cache/citemon).
ENV_VENV = "CITEMON_TEST_LABEL_STUDIO"
DEFAULT_VENV = Path.home() / ".cache" / "citemon" / f"label-studio-{LABEL_STUDIO_VERSION}"
START_TIMEOUT_S = 400.0
USER = "reviewer@example.com"
PASSWORD = "review-Pass-2026"  # a throwaway account on a loopback server the test owns
TOKEN = "c17e0a6e5c0f4b1f9d2a7c3e8b6d4f1a2c3e5b70"


@dataclass(frozen=True)
class LabelStudio:
    url: str
    client: httpx.Client
    """Authenticated with the user's legacy API token, as the SDK and scripts use it."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def _running(executable: Path, data_dir: Path) -> Iterator[LabelStudio]:
    port = _free_port()
    env = {
        **os.environ,
        "COLLECT_ANALYTICS": "false",
        "LABEL_STUDIO_BASE_DATA_DIR": str(data_dir),
    }
    log = (data_dir / "server.log").open("wb")
    proc = subprocess.Popen(
        [str(executable), "start", "--no-browser", "--internal-host", "127.0.0.1",
         "--port", str(port), "--data-dir", str(data_dir), "--username", USER,
         "--password", PASSWORD, "--user-token", TOKEN, "--enable-legacy-api-token"],
        env=env, stdout=log, stderr=subprocess.STDOUT, cwd=data_dir,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    client = httpx.Client(base_url=url, headers={"Authorization": f"Token {TOKEN}"}, timeout=60)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:  # readiness: the API answers once migrations and start-up are done
            if proc.poll() is not None:
                raise AssertionError(
                    f"Label Studio exited ({proc.returncode}): "
                    + (data_dir / "server.log").read_text(errors="replace")[-3000:]
                )
            try:
                reply = client.get("/api/projects/")
                if reply.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"Label Studio did not answer within {START_TIMEOUT_S} s")
            time.sleep(0.5)  # polling for readiness, not waiting for a result
        yield LabelStudio(url=url, client=client)
    finally:
        client.close()
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@contextmanager
def label_studio_server(workdir: Path) -> Iterator[LabelStudio]:
    """A Label Studio server with a fresh copy of the migrated template as its data."""
    venv = Path(os.environ.get(ENV_VENV, DEFAULT_VENV))
    executable = venv / "bin" / "label-studio"
    if not executable.exists():
        need_server("Label Studio", f"{executable} is missing (make label-studio installs it)")
    template = venv / "citemon-test-template"
    if not (template / "label_studio.sqlite3").exists():
        building = workdir / "template"
        building.mkdir()
        with _running(executable, building):
            pass  # migrated, the user and token made
        (building / "server.log").unlink()
        staged = venv / "citemon-test-template.tmp"
        shutil.rmtree(staged, ignore_errors=True)
        shutil.copytree(building, staged)
        staged.rename(template)
    data_dir = workdir / "data"
    shutil.copytree(template, data_dir)
    with _running(executable, data_dir) as server:
        yield server
