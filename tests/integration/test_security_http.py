"""The ``citemon`` process with an HTTP judge: no secret reaches stdout, stderr or the results.

The process runs at ``--log-level DEBUG`` (so httpx, httpcore and citemon's own retry logs are all
on) against the real loopback judge of ``tests/judge_server.py``, which answers some claims with
401 and others with 500, each echoing the request's headers back in its body — the worst a
careless proxy does. The key comes from ``CITEMON_JUDGE_API_KEY`` with a trailing newline (as
read from a mounted secret file) and a second credential sits in the base URL's userinfo.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.judge_server import Fault, JudgeServer

pytestmark = pytest.mark.integration

API_KEY = "sk-cli-8f2b6d0a4c9e7135"
URL_PASSWORD = "pw-cli-1e5c9a3f7b"
LEAKS = [
    API_KEY,
    URL_PASSWORD,
    base64.b64encode(f"judge-user:{URL_PASSWORD}".encode()).decode(),
]

ANSWER = {
    "id": "a-1",
    "answer": (
        "Audit logs are kept 90 days. [p-1] Access is denied to guests. [p-2] "
        "The export service is broken on Sundays. [p-3]"
    ),
    "passages": [
        {"id": "p-1", "text": "Audit logs are kept 90 days."},
        {"id": "p-2", "text": "Guests may read public pages."},
        {"id": "p-3", "text": "The export service is broken on Sundays."},
    ],
}


def _citemon(url: str, data: Path, key: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """``citemon --log-level DEBUG score DATA --judge http`` with ``key`` in the environment."""
    command = [sys.executable, "-m", "citemon.cli", "--log-level", "DEBUG", "score", str(data)]
    return subprocess.run(
        [*command, "--judge", "http", "--judge-base-url", url, "--judge-retries", "1", *extra],
        env={**os.environ, "CITEMON_JUDGE_API_KEY": key},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("protocol", ["v1", "v2"])
def test_score_with_401_and_500_echoing_judges_shows_no_secret(
    protocol: str, tmp_path: Path
) -> None:
    data = tmp_path / "answers.jsonl"
    data.write_text(json.dumps(ANSWER) + "\n")
    with JudgeServer().in_thread() as server:
        server.script(Fault.status(401, echo_headers=True), match="denied", forever=True)
        server.script(Fault.status(500, echo_headers=True), match="broken", forever=True)
        url = server.base_url.replace("http://", f"http://judge-user:{URL_PASSWORD}@")
        # The key as read from a mounted secret file: with its newline.
        proc = _citemon(url, data, API_KEY + "\n", "--format", "json", "--judge-protocol", protocol)
        seen = list(server.requests)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # The URL's credentials went out on every request (one Authorization header: they win
    # over the key) …
    token = base64.b64encode(f"judge-user:{URL_PASSWORD}".encode()).decode()
    assert seen and {r.headers.get("authorization") for r in seen} == {f"Basic {token}"}
    out = json.loads(proc.stdout)
    verdicts = [c["verdict"] for c in out["answers"][0]["claims"]]
    reasons = [c.get("reason") or "" for c in out["answers"][0]["claims"]]
    # The refused and the failing claim were never guessed; the judge's echo is in the reason.
    assert verdicts == ["correct", "unjudged", "unjudged"]
    assert "HTTP 401" in reasons[1] and "HTTP 500" in reasons[2]
    assert "Basic ***" in reasons[1] + reasons[2]
    assert "judge attempt" in proc.stderr or "judge batch attempt" in proc.stderr  # DEBUG on
    # … and neither appears anywhere the process wrote.
    written = proc.stdout + proc.stderr
    assert [s for s in LEAKS if s in written] == []


def test_score_with_a_key_no_header_can_carry_exits_2_without_echoing_it(tmp_path: Path) -> None:
    data = tmp_path / "answers.jsonl"
    data.write_text(json.dumps(ANSWER) + "\n")
    proc = _citemon("http://127.0.0.1:9/v1", data, f"{API_KEY}\r\nX-Injected: yes")
    assert proc.returncode == 2
    assert "CITEMON_JUDGE_API_KEY" in proc.stderr and "not shown" in proc.stderr
    assert API_KEY not in proc.stdout + proc.stderr
