"""The local review page (``citemon review serve``): one HTML file and a small JSON API.

The page (``review_page.html``, inline JS and CSS, no build step, nothing fetched from the
internet) asks for one label per cited claim. Its API:

- ``GET /api/state`` — the reviewer, the tasks (blind: no verdict) and which ones this reviewer
  has already labelled in the labels file, so a reload resumes at the first unlabelled claim;
- ``POST /api/reveal`` ``{trace_id, claim, label}`` — citemon's verdict, given only with a label;
- ``POST /api/label`` ``{trace_id, claim, label, checker}`` — appends the label to the labels file
  (flushed and fsynced) before it answers; the page moves on only after that answer.

It binds 127.0.0.1 unless told otherwise, answers only requests whose ``Host`` names the address
it serves (a web page elsewhere cannot reach it through DNS rebinding), takes JSON posts only
(a cross-site form cannot post one without a CORS preflight, which it does not grant), and sends a
Content-Security-Policy that allows its own inline script and style and nothing else.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import re
import sys
import threading
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any, Final

from citemon._core.errors import InputError
from citemon._review.model import CHECKER_CAUSES, LABELS, append_label, read_labels
from citemon._review.tasks import ReviewSet, TaskKey, disagrees

__all__ = ["MAX_BODY_BYTES", "ReviewPage", "ReviewServer", "page_html"]

log = logging.getLogger("citemon._review.page")

MAX_BODY_BYTES: Final = 64 * 1024
"""The largest request body the API reads (a label is a few hundred bytes)."""

_SCRIPT: Final = re.compile(r"<script>(.*?)</script>", re.DOTALL)
_STYLE: Final = re.compile(r"<style>(.*?)</style>", re.DOTALL)


def page_html() -> str:
    """The review page, as shipped in the package."""
    return resources.files("citemon._review").joinpath("review_page.html").read_text("utf-8")


def _csp(html: str) -> str:
    def hashes(pattern: re.Pattern[str]) -> str:
        return " ".join(
            "'sha256-"
            + base64.b64encode(hashlib.sha256(m.group(1).encode("utf-8")).digest()).decode()
            + "'"
            for m in pattern.finditer(html)
        )

    return (
        f"default-src 'none'; script-src {hashes(_SCRIPT)}; style-src {hashes(_STYLE)}; "
        "connect-src 'self'; img-src 'none'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )


class ReviewPage:
    """The review state one reviewer works on: the set, the labels file, what is labelled.

    Thread-safe: the server handles requests on several threads, and labels are appended one at
    a time under a lock."""

    def __init__(self, review_set: ReviewSet, labels: Path, reviewer: str) -> None:
        if not reviewer.strip():
            raise InputError("--reviewer must name the reviewer")
        self.review_set = review_set
        self.labels = labels
        self.reviewer = reviewer
        self._lock = threading.Lock()
        self._labelled: set[TaskKey] = set()
        try:  # fail now, not at the first label, if the labels file cannot be written
            with labels.open("a", encoding="utf-8"):
                pass
        except OSError as exc:
            raise InputError(
                f"cannot write the labels file {labels}: {exc.strerror or exc}"
            ) from exc
        if labels.stat().st_size:
            self._labelled = {
                label.key
                for label in read_labels(labels)
                if label.reviewer == reviewer and label.key in review_set.claims
            }

    @property
    def labelled(self) -> int:
        with self._lock:
            return len(self._labelled)

    def state(self) -> dict[str, object]:
        with self._lock:
            done = [list(key) for key in sorted(self._labelled)]
        return {
            "reviewer": self.reviewer,
            "total": len(self.review_set.tasks),
            "labels": list(LABELS),
            "checker_causes": list(CHECKER_CAUSES),
            "tasks": [task.to_json() for task in self.review_set.tasks],
            "labelled": done,
        }

    def reveal(self, body: Mapping[str, Any]) -> dict[str, object]:
        key, label, _ = _parse(body, need_checker=False)
        claim = self.review_set.verdict(key)
        return {
            "verdict": claim.verdict,
            "reason": claim.reason,
            "supported_by": claim.supported_by,
            "overlap": claim.overlap,
            "disagrees": disagrees(label, claim.verdict),
        }

    def give(self, body: Mapping[str, Any]) -> dict[str, object]:
        key, label, checker = _parse(body, need_checker=True)
        record = self.review_set.label(key, label, checker, self.reviewer)
        with self._lock:
            append_label(self.labels, record)
            self._labelled.add(key)
            done = len(self._labelled)
        log.info("labelled %s claim %d: %s (%s)", key[0], key[1], label, checker or "-")
        return {"labelled": done, "total": len(self.review_set.tasks), "verdict": record.verdict}


def _parse(body: Mapping[str, Any], *, need_checker: bool) -> tuple[TaskKey, Any, Any]:
    trace_id, claim, label = body.get("trace_id"), body.get("claim"), body.get("label")
    if not isinstance(trace_id, str) or not isinstance(claim, int) or isinstance(claim, bool):
        raise InputError("expected trace_id (a string) and claim (an integer)")
    if label not in LABELS:
        raise InputError(f"label must be one of {', '.join(LABELS)}")
    checker = body.get("checker")
    if need_checker and checker is not None and checker not in CHECKER_CAUSES:
        raise InputError(f"checker must be null or one of {', '.join(CHECKER_CAUSES)}")
    return (trace_id, claim), label, checker


class _Handler(BaseHTTPRequestHandler):
    server: ReviewServer
    server_version = "citemon-review"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        if content_type.startswith("text/html"):
            self.send_header("Content-Security-Policy", self.server.csp)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: HTTPStatus, payload: object) -> None:
        self._send(status, json.dumps(payload).encode("utf-8"), "application/json")

    def _host_ok(self) -> bool:
        hosts = self.server.hosts
        if hosts is None or self.headers.get("Host", "") in hosts:
            return True
        self._json(HTTPStatus.MISDIRECTED_REQUEST, {"error": "unexpected Host header"})
        return False

    def do_GET(self) -> None:
        if not self._host_ok():
            return
        if self.path in ("/", "/index.html"):
            self._send(HTTPStatus.OK, self.server.html, "text/html; charset=utf-8")
        elif self.path == "/api/state":
            self._json(HTTPStatus.OK, self.server.page.state())
        else:
            self._json(HTTPStatus.NOT_FOUND, {"error": "not found"})

    def do_POST(self) -> None:
        if not self._host_ok():
            return
        handlers = {"/api/reveal": self.server.page.reveal, "/api/label": self.server.page.give}
        handler = handlers.get(self.path)
        if handler is None:
            self._json(HTTPStatus.NOT_FOUND, {"error": "not found"})
            return
        if self.headers.get_content_type() != "application/json":
            self._json(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, {"error": "send application/json"})
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if not 0 < length <= MAX_BODY_BYTES:
            self._json(HTTPStatus.BAD_REQUEST, {"error": "bad Content-Length"})
            return
        try:
            body = json.loads(self.rfile.read(length))
            if not isinstance(body, dict):
                raise InputError("expected a JSON object")
            reply = handler(body)
        except (ValueError, InputError) as exc:  # JSONDecodeError is a ValueError
            self._json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
            return
        except OSError as exc:
            log.error("could not append the label: %s", exc)
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "could not write the label"})
            return
        self._json(HTTPStatus.OK, reply)


class ReviewServer(ThreadingHTTPServer):
    """The review page on ``host:port`` (port 0: any free port; see :attr:`url`)."""

    daemon_threads = True

    def __init__(self, page: ReviewPage, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__((host, port), _Handler)
        self.page = page
        html = page_html()
        self.html = html.encode("utf-8")
        self.csp = _csp(html)
        bound = self.server_address[1]
        names = {host, "127.0.0.1", "localhost"} if host in ("127.0.0.1", "localhost") else {host}
        self.hosts: frozenset[str] | None = frozenset(f"{name}:{bound}" for name in names)
        if host in ("0.0.0.0", "::", ""):
            self.hosts = None  # every address: the Host a reviewer uses cannot be known here
            log.warning("the review page listens on every interface (--host %s)", host or "''")

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A reviewer who closes the tab mid-reply is not an error worth a traceback."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            log.debug("client %s went away", client_address)
            return
        super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        host, port = str(self.server_address[0]), self.server_address[1]
        return f"http://{host if ':' not in host else f'[{host}]'}:{port}/"
