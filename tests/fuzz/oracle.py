"""What every reply must satisfy, whatever the request was (docs/api/README.md: Conventions).

- a reply arrives (no silence, no timeout);
- it is one JSON object;
- an error reply is ``{"error": {"code", "message"}}`` (plus the echoed ``request_id``)
  with a contract code, never ``internal``, and carries no result — so never an allow;
- a check result is consistent: ``allowed`` is true exactly for ``allow``/``partial``;
- a request is isolated: the known-good requests sent beside hostile ones get exactly
  the answer they got alone.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

CODES = frozenset({"bad_request", "not_found", "stale", "unavailable", "internal"})
#: Reply fields that carry no answer (they differ between identical requests).
VOLATILE = frozenset({"cached", "revision", "request_id"})

#: The labels of the counts ``dev.py fuzz`` prints; every one of them must stay 0.
BAD = ("grants on error", "internal errors", "missing replies", "malformed replies",
       "neighbour failures", "pipeline stalls", "services died")


@dataclass(frozen=True)
class Finding:
    """One broken promise: which count it raises, where, on which input, what was seen."""

    label: str
    where: str
    body: bytes
    detail: str

    def __str__(self) -> str:
        shown = self.body if len(self.body) <= 400 else self.body[:400] + b"..."
        return (f"[{self.label}] {self.where}: {self.detail}\n"
                f"    input ({len(self.body)} bytes): {shown!r}")


def _parse(reply: bytes) -> Any:
    try:
        return json.loads(reply)
    except ValueError:
        return None


def judge(subject: str, body: bytes, reply: bytes | None) -> list[Finding]:
    """The promises a reply to any request on ``subject`` breaks."""
    if reply is None:
        return [Finding("missing replies", subject, body, "no reply within the deadline")]
    doc = _parse(reply)
    if not isinstance(doc, dict):
        return [Finding("malformed replies", subject, body, f"reply is not a JSON object: "
                        f"{reply[:200]!r}")]
    if "error" in doc:
        error = doc["error"]
        found: list[Finding] = []
        extra = sorted(set(doc) - {"error", "request_id"})
        if extra:
            found.append(Finding("grants on error", subject, body,
                                 f"error reply also carries {extra}: {reply[:300]!r}"))
        if not isinstance(error, dict) or error.get("code") not in CODES \
                or not isinstance(error.get("message"), str):
            found.append(Finding("malformed replies", subject, body,
                                 f"error is not {{code, message}}: {reply[:300]!r}"))
        elif error["code"] == "internal":
            found.append(Finding("internal errors", subject, body, error["message"][:300]))
        return found
    results = [doc] if subject == "clearance.v1.check" else doc.get("results")
    if subject in ("clearance.v1.check", "clearance.v1.check.batch"):
        if not isinstance(results, list):
            return [Finding("malformed replies", subject, body, f"no results: {reply[:300]!r}")]
        for result in results:
            if not isinstance(result, dict) or result.get("decision") not in \
                    ("allow", "deny", "partial") or result.get("allowed") is not \
                    (result.get("decision") in ("allow", "partial")):
                return [Finding("grants on error", subject, body,
                                f"inconsistent decision: {json.dumps(result)[:300]}")]
    return []


def answer(reply: bytes | None) -> Any:
    """The part of a reply that must not change between identical requests."""
    doc = None if reply is None else _parse(reply)
    if isinstance(doc, dict):
        doc = {k: v for k, v in doc.items() if k not in VOLATILE}
        if isinstance(doc.get("results"), list):
            doc["results"] = [{k: v for k, v in r.items() if k not in VOLATILE}
                              if isinstance(r, dict) else r for r in doc["results"]]
    return doc


@dataclass
class Tally:
    """Counts for the runner's table, and the first findings of each kind."""

    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[Finding]] = field(default_factory=dict)
    keep: int = 5

    def add(self, findings: list[Finding]) -> None:
        for finding in findings:
            self.counts[finding.label] += 1
            kept = self.examples.setdefault(finding.label, [])
            if len(kept) < self.keep:
                kept.append(finding)

    @property
    def bad(self) -> int:
        return sum(self.counts[label] for label in BAD)
