"""Which passage a citation names (docs/design.md, "Passage identity"): by document ID, else
by a metadata ID under the configured keys (a document-level ID names every chunk carrying it),
else by position; and claims citing only passages without text are ``unjudged``
(``no_passage_text``)."""

from __future__ import annotations

from citemon._core.records import AnswerRecord, Passage
from citemon._core.text import CitationSyntax
from citemon._engine.claims import extract_claims, resolve_marker
from citemon._engine.scoring import Scorer
from tests.oracles import OracleJudge


def chunk(pid: str, text: str, **meta: str) -> Passage:
    return Passage(id=pid, text=text, metadata=meta or None)


RECORD = AnswerRecord(
    answer="Kept 90 days. [kb-7] Extend by contract. [u-2] Ask support. [2] Nope. [kb-9]",
    passages=[
        chunk("u-1", "Audit logs are kept 90 days", passage_id="kb-7"),
        chunk("u-2", "on the Business plan.", passage_id="kb-7"),
        chunk("u-3", "Contracts may extend retention.", doc_id="kb-8"),
    ],
)


def test_markers_resolve_by_id_then_metadata_then_position() -> None:
    claims = extract_claims(RECORD)
    assert [(c.cited_ids, c.resolved_ids, c.dangling_ids) for c in claims] == [
        (["kb-7"], ["u-1", "u-2"], []),  # a document-level ID names both of its chunks
        (["u-2"], ["u-2"], []),  # a document ID wins
        (["u-2"], ["u-2"], []),  # position 2
        (["kb-9"], [], ["kb-9"]),  # nothing: dangling, as before
    ]
    assert resolve_marker(RECORD, "kb-8") == ("kb-8", ["u-3"], "metadata")
    assert resolve_marker(RECORD, "3") == ("u-3", ["u-3"], "position")


def test_the_keys_are_configurable() -> None:
    only_doc_id = CitationSyntax(passage_id_keys=("doc_id",))
    assert resolve_marker(RECORD, "kb-7", only_doc_id) == ("kb-7", [], "dangling")
    assert resolve_marker(RECORD, "kb-8", only_doc_id) == ("kb-8", ["u-3"], "metadata")


async def test_the_judge_sees_the_union_of_the_named_chunks() -> None:
    record = AnswerRecord(answer="Kept 90 days on Business. [kb-7]", passages=RECORD.passages)
    judge = OracleJudge({}, joint={"Kept 90 days on Business.": {"u-1", "u-2"}})
    score = await Scorer(judge).score(record)
    (claim,) = score.claims
    assert (claim.verdict, claim.cited_ids, claim.resolved_ids) == (
        "correct",
        ["kb-7"],
        ["u-1", "u-2"],
    )
    assert judge.calls[0] == ("Kept 90 days on Business.", ("u-1", "u-2"))


async def test_claims_citing_only_textless_passages_are_unjudged_without_a_judge_call() -> None:
    record = AnswerRecord(
        answer="Kept 90 days. [d-1] Extend by contract. [d-2]",
        passages=[Passage(id="d-1", text=""), Passage(id="d-2", text="Contracts extend it.")],
    )
    judge = OracleJudge({"Extend by contract.": {"d-2"}})
    score = await Scorer(judge).score(record)
    first, second = score.claims
    assert (first.verdict, first.unjudged_cause, first.faithful) == (
        "unjudged",
        "no_passage_text",
        None,
    )
    assert (second.verdict, second.faithful) == ("correct", True)
    assert all(claim != "Kept 90 days." for claim, _ in judge.calls)


async def test_precision_weighs_citations_not_chunks() -> None:
    """A metadata ID naming two chunks is one citation: over-broad only as a whole."""
    record = AnswerRecord(answer="Kept 90 days on Business. [kb-7][kb-8]", passages=RECORD.passages)
    judge = OracleJudge({}, joint={"Kept 90 days on Business.": {"u-1", "u-2"}})
    (claim,) = (await Scorer(judge).score(record)).claims
    assert (claim.verdict, claim.cited_ids, claim.irrelevant_ids, claim.supported_by) == (
        "correct",
        ["kb-7", "kb-8"],
        ["kb-8"],
        ["u-1", "u-2"],
    )
