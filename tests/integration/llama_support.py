"""llama.cpp's OpenAI-compatible server (llama-cpp-python) on 127.0.0.1, serving a tiny model.

``make llama`` installs it (from a cached wheel; the first build compiles llama.cpp). Where it
is missing the tests that need it skip, and fail under ``CI=true``
(:func:`tests.conftest.need_server`).
The model is written by :func:`tests.llama_model.write_tiny_llama`; random weights, so tests
assert the protocol, never accuracy.

llama-cpp-python 0.3.36's server runs one request at a time (one model, one lock: a single
slot); requests beyond it wait in the server.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx

from tests.conftest import REPO, need_server
from tests.llama_model import write_tiny_llama

__all__ = ["SLOTS", "LlamaServer", "llama_server"]

PYTHON = str(REPO / ".venv" / "bin" / "python")
SLOTS = 1
"""Requests llama-cpp-python's server works on at once (its parallel slots)."""


@dataclass
class LlamaServer:
    base_url: str
    process: subprocess.Popen[bytes]
    log: Path
    model: Path

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _require() -> None:
    missing = [m for m in ("llama_cpp", "gguf") if importlib.util.find_spec(m) is None]
    if missing:
        need_server("llama-cpp-python's server", f"{', '.join(missing)} not installed (make llama)")


@contextlib.contextmanager
def llama_server(
    workdir: Path, *, head: Literal["json", "yes_no"] = "json", n_ctx: int = 16384
) -> Iterator[LlamaServer]:
    """``python -m llama_cpp.server`` serving a fresh tiny model, until the block ends."""
    _require()
    model = write_tiny_llama(workdir / f"tiny-{head}.gguf", head=head, n_ctx=n_ctx)
    port = _free_port()
    log = workdir / f"llama-{head}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                PYTHON, "-m", "llama_cpp.server", "--model", str(model),
                "--host", "127.0.0.1", "--port", str(port),
                "--n_ctx", str(n_ctx), "--n_threads", "1", "--n_threads_batch", "1",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    server = LlamaServer(f"http://127.0.0.1:{port}/v1", process, log, model)
    try:
        deadline = time.monotonic() + 90
        while True:
            if process.poll() is not None:
                need_server("llama-cpp-python's server", f"exited: {server.log_text()[-2000:]}")
            try:
                if httpx.get(f"{server.base_url}/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"llama server not up in 90 s: {server.log_text()[-2000:]}")
            time.sleep(0.1)
        yield server
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)
