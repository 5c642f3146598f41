"""A small synthetic help centre: passages, questions, and answers with known citation faults.

Written for citemon (no third-party text). ``make demo`` scores it, the Kafka demo's fake RAG
service answers from it, and tests use it as data whose right verdicts are known by construction.
Each generated record carries ``labels``: the verdict its construction intends for each claim.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from citemon._core.records import AnswerRecord, Passage

__all__ = ["FAULTS", "PASSAGES", "QUESTIONS", "Question", "answer", "sample_records", "specimen"]

PASSAGES: dict[str, tuple[str, str]] = {
    "p-3310": (
        "security/audit-logs.md",
        "Audit log retention is 90 days on the Business plan and 365 days on Enterprise.",
    ),
    "p-3311": (
        "security/audit-logs.md",
        "Retention cannot be configured from the dashboard. Contact your account manager to "
        "discuss extensions.",
    ),
    "p-3312": (
        "legal/enterprise.md",
        "Enterprise agreements may include custom data retention terms negotiated at "
        "contract signing.",
    ),
    "p-1201": (
        "account/sso.md",
        "Single sign-on supports SAML 2.0 and OpenID Connect identity providers such as "
        "Okta and Azure AD.",
    ),
    "p-1202": (
        "account/sso.md",
        "Enforcing single sign-on for a workspace requires the Enterprise plan and a "
        "verified email domain.",
    ),
    "p-1203": (
        "account/scim.md",
        "SCIM provisioning creates and deactivates user accounts automatically when they "
        "change in the identity provider.",
    ),
    "p-2101": (
        "billing/invoices.md",
        "Invoices are issued on the first day of each billing month and sent to the "
        "billing contact by email.",
    ),
    "p-2102": (
        "billing/payment.md",
        "Payment by bank transfer is available for annual plans above 5,000 dollars.",
    ),
    "p-2103": (
        "billing/refunds.md",
        "Refunds for unused seats are prorated and credited to the next invoice within 14 days.",
    ),
    "p-4401": (
        "api/rate-limits.md",
        "The REST API allows 600 requests per minute per token; bursts above the limit "
        "receive HTTP 429 responses.",
    ),
    "p-4402": (
        "api/rate-limits.md",
        "Responses include a Retry-After header that states how many seconds a client "
        "should wait before retrying.",
    ),
    "p-4403": (
        "api/tokens.md",
        "Personal access tokens expire after 90 days unless an administrator sets a "
        "shorter lifetime.",
    ),
    "p-5501": (
        "data/backups.md",
        "Workspace backups run daily at 02:00 UTC and are kept for 35 days.",
    ),
    "p-5502": (
        "data/export.md",
        "Administrators can export workspace data as JSON from the settings page at any time.",
    ),
    "p-5503": (
        "data/regions.md",
        "Customer data is stored in the region chosen at signup: Frankfurt, Virginia or Sydney.",
    ),
    "p-6601": (
        "account/2fa.md",
        "Two-factor authentication can be required for every member by a workspace owner.",
    ),
    "p-6602": (
        "account/2fa.md",
        "Supported second factors are authenticator apps and hardware security keys; SMS "
        "codes are being retired this year.",
    ),
    "p-6603": (
        "account/recovery.md",
        "Members who lose their second factor can recover access with one of ten backup codes.",
    ),
    "p-7701": (
        "integrations/webhooks.md",
        "Webhooks are signed with an HMAC SHA-256 signature in the X-Signature header.",
    ),
    "p-7702": (
        "integrations/webhooks.md",
        "Failed webhook deliveries are retried with exponential backoff for up to 24 hours.",
    ),
    "p-7703": (
        "integrations/slack.md",
        "The Slack integration posts ticket updates to a channel chosen by an administrator.",
    ),
    "p-8801": (
        "support/sla.md",
        "Enterprise customers receive a first response to urgent tickets within one hour, "
        "around the clock.",
    ),
    "p-8802": ("support/sla.md", "Business plan tickets are answered within eight business hours."),
    "p-8803": (
        "support/status.md",
        "Incidents and planned maintenance are announced on the public status page.",
    ),
}


@dataclass(frozen=True, slots=True)
class Question:
    """A question, the passages retrieved for it, and claims with the passage each comes from."""

    text: str
    retrieved: tuple[str, ...]
    facts: tuple[tuple[str, str], ...]
    hallucination: str


QUESTIONS: tuple[Question, ...] = (
    Question(
        "How long are audit logs kept?",
        ("p-3310", "p-3311", "p-3312"),
        (
            ("Audit log retention is 90 days on the Business plan.", "p-3310"),
            ("Retention cannot be configured from the dashboard.", "p-3311"),
            ("Enterprise agreements may include custom retention terms.", "p-3312"),
        ),
        "Audit logs are exported to cold storage for seven years.",
    ),
    Question(
        "Which identity providers does SSO support?",
        ("p-1201", "p-1202", "p-1203"),
        (
            ("Single sign-on supports SAML 2.0 and OpenID Connect providers like Okta.", "p-1201"),
            (
                "Enforcing single sign-on requires the Enterprise plan and a verified domain.",
                "p-1202",
            ),
            ("SCIM provisioning deactivates user accounts automatically.", "p-1203"),
        ),
        "Google Workspace logins are synchronised every fifteen minutes.",
    ),
    Question(
        "When do I get invoiced and can I pay by transfer?",
        ("p-2101", "p-2102", "p-2103"),
        (
            ("Invoices are issued on the first day of each billing month.", "p-2101"),
            ("Bank transfer payment is available for annual plans above 5,000 dollars.", "p-2102"),
            ("Refunds for unused seats are prorated and credited within 14 days.", "p-2103"),
        ),
        "Cheques are accepted from customers in Canada.",
    ),
    Question(
        "What are the API rate limits?",
        ("p-4401", "p-4402", "p-4403"),
        (
            ("The REST API allows 600 requests per minute per token.", "p-4401"),
            ("Responses include a Retry-After header stating how many seconds to wait.", "p-4402"),
            ("Personal access tokens expire after 90 days.", "p-4403"),
        ),
        "GraphQL queries are billed by complexity points.",
    ),
    Question(
        "How are workspace backups handled?",
        ("p-5501", "p-5502", "p-5503"),
        (
            ("Workspace backups run daily at 02:00 UTC and are kept for 35 days.", "p-5501"),
            ("Administrators can export workspace data as JSON from the settings page.", "p-5502"),
            ("Customer data is stored in the region chosen at signup.", "p-5503"),
        ),
        "Backups are replicated to a second continent every hour.",
    ),
    Question(
        "How does two-factor authentication work?",
        ("p-6601", "p-6602", "p-6603"),
        (
            ("A workspace owner can require two-factor authentication for every member.", "p-6601"),
            (
                "Authenticator apps and hardware security keys are supported second factors.",
                "p-6602",
            ),
            (
                "Members who lose their second factor can recover access with backup codes.",
                "p-6603",
            ),
        ),
        "Biometric passkeys replace passwords for mobile users.",
    ),
    Question(
        "How do webhooks work?",
        ("p-7701", "p-7702", "p-7703"),
        (
            (
                "Webhooks are signed with an HMAC SHA-256 signature in the X-Signature header.",
                "p-7701",
            ),
            (
                "Failed webhook deliveries are retried with exponential backoff for up to 24 hours"
                ".",
                "p-7702",
            ),
            ("The Slack integration posts ticket updates to a chosen channel.", "p-7703"),
        ),
        "Webhook payloads are compressed with gzip above one megabyte.",
    ),
    Question(
        "How fast does support respond?",
        ("p-8801", "p-8802", "p-8803"),
        (
            (
                "Enterprise customers receive a first response to urgent tickets within one hour.",
                "p-8801",
            ),
            ("Business plan tickets are answered within eight business hours.", "p-8802"),
            ("Planned maintenance is announced on the public status page.", "p-8803"),
        ),
        "Phone support is staffed by engineers in Lisbon.",
    ),
)

FAULTS = ("correct", "misattributed", "unsupported", "uncited", "over_broad", "dangling")
"""The fault each generated answer carries (``correct`` has none)."""


def _record(
    rid: str, question: Question, sentences: list[tuple[str, list[str], str]], **extra: str
) -> AnswerRecord:
    answer = " ".join(
        f"{text[:-1]} [{', '.join(ids)}]{text[-1]}" if ids else text for text, ids, _ in sentences
    )
    return AnswerRecord(
        id=rid,
        question=question.text,
        answer=answer,
        passages=[
            Passage(id=p, text=PASSAGES[p][1], source=PASSAGES[p][0]) for p in question.retrieved
        ],
        labels=[{"claim": t, "cited_ids": ids, "verdict": v} for t, ids, v in sentences],
        **extra,
    )


def answer(
    question: Question, fault: str, rid: str, *, first_passage_bug: bool = False, **extra: str
) -> AnswerRecord:
    """One answer to ``question`` carrying ``fault`` (one of :data:`FAULTS`).

    ``first_passage_bug`` makes every claim cite the first retrieved passage: the attribution bug
    the Kafka demo "deploys" as version v2.
    """
    first = question.retrieved[0]
    sentences: list[tuple[str, list[str], str]] = []
    for i, (text, source) in enumerate(question.facts):
        ids, verdict = [source], "correct"
        if first_passage_bug and source != first:
            ids, verdict = [first], "misattributed"
        elif i == 1 and fault == "misattributed":
            ids, verdict = [question.retrieved[2]], "misattributed"
        elif i == 1 and fault == "uncited":
            ids, verdict = [], "uncited"
        elif i == 1 and fault == "over_broad":
            ids = [source, question.retrieved[2]]
        elif i == 1 and fault == "dangling":
            ids, verdict = ["p-9999"], "dangling"
        sentences.append((text, ids, verdict))
    if fault == "unsupported":
        sentences.insert(2, (question.hallucination, [question.retrieved[0]], "unsupported"))
    return _record(rid, question, sentences, **extra)


def specimen() -> AnswerRecord:
    """The specimen of docs/design.md: accuracy 0.33, coverage 1.00, faithfulness 1.00."""
    return AnswerRecord(
        id="a-1",
        question="How long do we keep audit logs, and can I extend it?",
        answer=(
            "Audit logs are retained for 90 days on the Business plan. [p-3310] "
            "Retention can be extended through a custom term in an Enterprise agreement. [p-3310] "
            "Changing it is not possible from the dashboard. [p-3312]"
        ),
        passages=[
            Passage(id=p, text=PASSAGES[p][1], source=PASSAGES[p][0])
            for p in ("p-3310", "p-3311", "p-3312")
        ],
        service="support-bot",
        version="2026.11.3",
        environment="prod",
        labels=[
            {
                "claim": "Audit logs are retained for 90 days on the Business plan.",
                "cited_ids": ["p-3310"],
                "verdict": "correct",
            },
            {
                "claim": (
                    "Retention can be extended through a custom term in an Enterprise agreement."
                ),
                "cited_ids": ["p-3310"],
                "verdict": "misattributed",
                "supported_by": ["p-3312"],
            },
            {
                "claim": "Changing it is not possible from the dashboard.",
                "cited_ids": ["p-3312"],
                "verdict": "misattributed",
                "supported_by": ["p-3311"],
            },
        ],
    )


def sample_records(*, seed: int = 7) -> list[AnswerRecord]:
    """The specimen plus one answer per (question, fault): 49 answers, deterministic order."""
    rng = random.Random(seed)
    records = [specimen()]
    for qi, question in enumerate(QUESTIONS):
        for fault in FAULTS:
            records.append(
                answer(
                    question,
                    fault,
                    f"hc-{qi + 1}-{fault}",
                    service="support-bot",
                    version="2026.11.3",
                    environment="prod",
                )
            )
    head, rest = records[:1], records[1:]
    rng.shuffle(rest)
    return head + rest
