"""Records that fit: a results record over its topic's limit is cut in the documented order
(excerpts, then claims summarised by verdict, then all but the identity), marked ``cut``."""

from __future__ import annotations

import json

from citemon._service.kafka import RECORD_OVERHEAD_BYTES, RecordLimits
from citemon._service.outputs import OutMessage, fit_dead_letter, fit_result


def _body(claims: int, excerpt_chars: int = 200) -> dict[str, object]:
    verdicts = ["correct", "misattributed", "unsupported"]
    return {
        "id": "a-1",
        "service": "bot",
        "version": "v1",
        "trace_id": "ab" * 16,
        "span_id": "cd" * 8,
        "claims": [
            {"sentence": i, "text": f"Claim number {i} of the answer.", "verdict": verdicts[i % 3]}
            for i in range(claims)
        ],
        "excerpts": {"p-1": "x" * excerpt_chars, "p-2": "y" * excerpt_chars},
    }


def test_a_record_that_fits_is_left_as_it_is() -> None:
    body = _body(3)
    value, cut = fit_result(body, 10_000)
    assert cut == () and json.loads(value) == body


def test_excerpts_go_first() -> None:
    body = _body(3, excerpt_chars=2000)
    value, cut = fit_result(body, 2000)
    out = json.loads(value)
    assert cut == ("excerpts",) and out["excerpts"] == {} and len(out["claims"]) == 3
    assert out["cut"]["excerpts"] == 2 and out["cut"]["claims"] == 0 and len(value) <= 2000


def test_then_the_claims_beyond_what_fits_summarised_by_verdict() -> None:
    body = _body(300)
    value, cut = fit_result(body, 5000)
    out = json.loads(value)
    kept = len(out["claims"])
    assert cut == ("excerpts", "claims") and 0 < kept < 300 and len(value) <= 5000
    assert out["claims"] == body["claims"][:kept]  # type: ignore[index]
    assert out["cut"]["claims"] == 300 - kept
    dropped = body["claims"][kept:]  # type: ignore[index]
    expected: dict[str, int] = {}
    for c in dropped:
        expected[c["verdict"]] = expected.get(c["verdict"], 0) + 1
    assert out["cut"]["verdicts"] == expected
    # The most claims that fit: one more would not.
    assert len(json.dumps({**out, "claims": body["claims"][: kept + 1]})) > 5000  # type: ignore[index]


def test_at_last_only_the_identity() -> None:
    body = {**_body(2), "question": "q" * 10_000}
    value, cut = fit_result(body, 600)
    out = json.loads(value)
    assert cut[-1] == "identity_only" and len(value) <= 600
    assert (out["trace_id"], out["span_id"], out["claims"]) == ("ab" * 16, "cd" * 8, [])
    assert out["cut"]["claims"] == 2 and "question" not in out


def test_limits_are_the_smaller_of_the_topic_and_the_producer() -> None:
    limits = RecordLimits({"small": 20_000, "big": 5_000_000})
    assert limits.max_bytes("small") == 20_000 and limits.max_bytes("big") == 1_048_576
    assert limits.value_budget("small", b"k" * 32) == 20_000 - RECORD_OVERHEAD_BYTES - 32


def test_a_dead_letter_too_large_keeps_its_key_and_headers_without_the_value() -> None:
    limits = RecordLimits({"dlq": 10_000})
    small = OutMessage("dlq", b"key", b"v" * 100, (("citemon.error", b"bad"),))
    assert fit_dead_letter(small, limits) is small
    big = OutMessage("dlq", b"key", b"v" * 50_000, (("citemon.error", b"bad"),))
    out = fit_dead_letter(big, limits)
    assert out.value == b"" and out.key == b"key" and out.cut == (("dead_letter", "value"),)
    assert dict(out.headers) == {"citemon.error": b"bad", "citemon.cut.omitted_bytes": b"50000"}
