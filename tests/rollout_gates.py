"""The rollout gates of deploy/kubernetes/rollout-gates, evaluated the way their controllers do.

Argo Rollouts (v1.8, ``metricproviders/prometheus`` and ``utils/evaluate``): every
``{{args.NAME}}`` in the metric is substituted (an unresolved one is an error); the instant
query's vector becomes ``result``, a list of floats; ``successCondition`` and
``failureCondition`` are expr-lang expressions over it. Failed if the failure condition holds,
Successful if only the success condition does, Inconclusive if neither, Error if evaluating one
raises (``result[0]`` of an empty list). Only the subset of expr-lang the templates use is
understood here (``len(result) OP N`` and ``result[0] OP N`` joined by a short-circuit ``&&``);
anything else is refused, so a template cannot drift into syntax this evaluator fakes.

Flagger (``pkg/metrics/providers/prometheus.go``, ``pkg/controller/scheduler_metrics.go``): the
query is a Go template over ``{{ variables.NAME }}`` (missing keys are errors); the value is the
last sample of the result, none or NaN is "no values found" (the check fails, advancement
halts); otherwise the check fails when the value is outside ``thresholdRange``.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import REPO

__all__ = [
    "ARGO",
    "FLAGGER",
    "argo_metrics",
    "argo_phase",
    "argo_template",
    "example_thresholds",
    "flagger_check",
    "flagger_templates",
    "render_argo",
    "render_flagger",
]

GATES = REPO / "deploy" / "kubernetes" / "rollout-gates"
ARGO = GATES / "argo-analysistemplate.yaml"
FLAGGER = GATES / "flagger-metrictemplate.yaml"

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
    "==": operator.eq,
}
_TERM = re.compile(r"(len\(result\)|result\[0\])\s*(>=|<=|==|>|<)\s*(-?\d+(?:\.\d+)?)")
_ARG = re.compile(r"\{\{([^}]*)\}\}")
_VAR = re.compile(r"\{\{\s*variables\.(\w+)\s*\}\}")


def argo_template() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(ARGO.read_text())
    return doc


def argo_metrics() -> list[dict[str, Any]]:
    metrics: list[dict[str, Any]] = argo_template()["spec"]["metrics"]
    return metrics


def render_argo(text: str, args: Mapping[str, str]) -> str:
    """fasttemplate substitution of ``{{args.NAME}}``, with the template's default values."""
    values: dict[str, str] = {
        a["name"]: a["value"] for a in argo_template()["spec"]["args"] if "value" in a
    }
    values |= args

    def sub(m: re.Match[str]) -> str:
        tag = m.group(1).strip()
        if not tag.startswith("args.") or tag[5:] not in values:
            raise KeyError(f"failed to resolve {{{{{m.group(1)}}}}}")
        return values[tag[5:]]

    return _ARG.sub(sub, text)


def _condition(expr: str, result: Sequence[float]) -> bool:
    terms = expr.split("&&")
    if not all(_TERM.fullmatch(t.strip()) for t in terms):
        raise ValueError(f"not in the expr-lang subset this evaluator knows: {expr!r}")
    for term in terms:
        m = _TERM.fullmatch(term.strip())
        assert m
        left = float(len(result)) if m.group(1) == "len(result)" else result[0]
        if not _OPS[m.group(2)](left, float(m.group(3))):
            return False  # && short-circuits: the terms after it are never evaluated
    return True


def argo_phase(metric: Mapping[str, Any], result: Sequence[float]) -> str:
    """Argo's ``EvaluateResult`` for a metric with both conditions."""
    try:
        success = _condition(metric["successCondition"], result)
        failure = _condition(metric["failureCondition"], result)
    except IndexError:
        return "Error"
    if failure:
        return "Failed"
    return "Successful" if success else "Inconclusive"


def flagger_templates() -> dict[str, dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(FLAGGER.read_text()) if d]
    return {d["metadata"]["name"]: d for d in docs}


def render_flagger(query: str, variables: Mapping[str, str]) -> str:
    if re.search(r"\{\{(?!\s*variables\.\w+\s*\}\})", query):
        raise ValueError("only {{ variables.NAME }} is rendered here")

    def sub(m: re.Match[str]) -> str:
        if m.group(1) not in variables:
            raise KeyError(f'map has no entry for key "{m.group(1)}"')  # missingkey=error
        return variables[m.group(1)]

    return _VAR.sub(sub, query)


def flagger_check(values: Sequence[float], threshold_range: Mapping[str, float]) -> str:
    """``pass``, ``fail`` (outside the range) or ``no values`` (also a failed check)."""
    if not values or math.isnan(values[-1]):
        return "no values"
    value = values[-1]
    if "min" in threshold_range and value < threshold_range["min"]:
        return "fail"
    if "max" in threshold_range and value > threshold_range["max"]:
        return "fail"
    return "pass"


def example_thresholds() -> dict[str, dict[str, float]]:
    """The thresholdRange each Flagger template's header tells a Canary to use."""
    header = FLAGGER.read_text().split("apiVersion:", 1)[0]
    found = re.findall(r"#\s+(citemon-[\w-]+)\s+.*thresholdRange \{min: (-?[\d.]+)\}", header)
    return {name: {"min": float(v)} for name, v in found}


def gate_files() -> list[Path]:
    return [ARGO, FLAGGER]
