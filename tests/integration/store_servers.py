"""The real passage-store servers the tests start: PostgreSQL (Debian's server binaries) and
Chroma (``chroma run`` from its own venv, ``make chroma``), each on a loopback port, in a
directory of its own, one per test session (the fixtures are in ``conftest.py``).

``initdb`` refuses to run as root: as root the server runs as the ``postgres`` user on a
directory that user owns.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CHROMA_VERSION",
    "Chroma",
    "Postgres",
    "chroma_binary",
    "free_port",
    "postgres_bin",
    "running_chroma",
    "running_postgres",
]

CHROMA_VERSION = "1.5.9"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def postgres_bin() -> Path | None:
    """The server binaries: ``CITEMON_TEST_POSTGRES_BIN``, else Debian's newest."""
    named = os.environ.get("CITEMON_TEST_POSTGRES_BIN")
    if named:
        return Path(named) if (Path(named) / "initdb").exists() else None
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: p.split("/")[3])
    return Path(found[-1]).parent if found else None


def chroma_binary() -> Path | None:
    """``chroma`` from ``CITEMON_TEST_CHROMA``, else the venv ``make chroma`` makes."""
    default = Path.home() / ".cache" / "citemon" / f"chroma-{CHROMA_VERSION}" / "bin" / "chroma"
    path = Path(os.environ.get("CITEMON_TEST_CHROMA", default))
    return path if path.exists() else None


@dataclass
class Postgres:
    bin: Path
    data: Path
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _as_owner(self, *argv: str) -> None:
        cmd = [str(a) for a in argv]
        if os.geteuid() == 0:
            cmd = ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(_quote(c) for c in cmd)]
        subprocess.run(cmd, check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._as_owner(
            self.bin / "pg_ctl", "-D", self.data, "-o", options, "-l", self.log, "-w", "start"
        )

    def stop(self) -> None:
        self._as_owner(self.bin / "pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


@contextmanager
def running_postgres(bin_dir: Path) -> Iterator[Postgres]:
    """A fresh cluster (trust auth on loopback), started, stopped and removed at the end."""
    root = Path(tempfile.mkdtemp(prefix="citemon-pg-"))
    data = root / "data"
    data.mkdir()
    server = Postgres(bin_dir, data, free_port(), root / "server.log")
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(data, "postgres")
    try:
        server._as_owner(bin_dir / "initdb", "-D", data, "-U", "postgres", "-A", "trust")
        server.start()
        yield server
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):  # a test stopped it
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Chroma:
    process: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        return f"chroma://127.0.0.1:{self.port}"


def _heartbeat(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=1):
            return True
    except OSError:
        return False


@contextmanager
def running_chroma(binary: Path, timeout_s: float = 60.0) -> Iterator[Chroma]:
    """``chroma run`` on a loopback port with a data directory of its own."""
    root = Path(tempfile.mkdtemp(prefix="citemon-chroma-"))
    port = free_port()
    log = (root / "server.log").open("wb")
    argv = [str(binary), "run", "--path", str(root / "data"), "--host", "127.0.0.1"]
    argv += ["--port", str(port)]
    process = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "ANONYMIZED_TELEMETRY": "False"},
    )
    try:
        deadline = time.monotonic() + timeout_s
        while not _heartbeat(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"chroma run did not start: {(root / 'server.log').read_text()[-2000:]}"
                )
            time.sleep(0.1)
        yield Chroma(process, port)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        shutil.rmtree(root, ignore_errors=True)
