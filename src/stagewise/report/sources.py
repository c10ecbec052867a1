"""Where a claim comes from (:class:`Source`): a paper, named by the key the lab declares in
``Lab.sources`` with its theorem / figure / section; a reviewer; or our own check.

This layer knows the kinds of source (:data:`KINDS`), never a paper's title: the headings of
the paper groups come from the labs, as a mapping key -> heading (``Summary.sources``, or passed
in by the layer above for summaries written before it existed); :func:`source_groups` orders
the groups of a report. Re-exported by :mod:`.claims`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

SourceKind = Literal["paper", "reviewer", "own"]
KINDS: dict[str, tuple[str, str]] = {"reviewer": ("reviewers", "reviewer"), "own": ("own checks", "own check")}
"""The kinds besides papers, in report order after the papers: kind -> (group heading, label in a table)."""

SOURCE_KEY = r"^[A-Za-z0-9_]+$"
"""What a paper's key may hold (``paper1``)."""

OLD_PAPER_KIND = re.compile(r"^paper[0-9]+$")
"""A source kind of summaries written before papers were keys (``paper1``): read as kind
``paper`` with the kind as its key."""

PAPER_GROUP = "paper:"
"""Prefix of a paper's group key (``paper:paper1``); the other groups are keyed by their kind."""


def paper_label(key: str, sources: Mapping[str, str] | None = None) -> str:
    """The short name of paper ``key`` in a table: its heading up to the first ``": "``
    (``"paper 1: A. Author, 2025"`` -> ``paper 1``); the key itself without a heading."""
    heading = (sources or {}).get(key)
    return heading.split(": ", 1)[0] if heading else key


class Source(BaseModel):
    """Where a claim comes from: ``kind`` (paper / reviewer / own), ``paper`` the key of the
    paper (a key of ``Lab.sources``; kind paper only) and ``where`` in it ("Theorem 3",
    "Figure 2", "Section 4.2", "review: the proof of Lemma 5", "Example 1"). Stored as
    ``{"kind", "paper", "where"}`` (``paper`` left out for the other kinds)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: SourceKind
    paper: str | None = Field(default=None, pattern=SOURCE_KEY)
    where: str = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _old_kind(cls, data: Any) -> Any:
        """``{"kind": "paper1", ...}`` (older summaries) -> ``{"kind": "paper", "paper": "paper1", ...}``."""
        if isinstance(data, dict) and isinstance(data.get("kind"), str) and OLD_PAPER_KIND.match(data["kind"]) \
                and "paper" not in data:
            data = {**data, "kind": "paper", "paper": data["kind"]}
        return data

    @model_validator(mode="after")
    def _paper_named(self) -> "Source":
        if (self.kind == "paper") != (self.paper is not None):
            raise ValueError(f"source kind {self.kind!r}: a paper source names its paper (paper=KEY), the other kinds none")
        return self

    @model_serializer(mode="wrap")
    def _without_empty_paper(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        if self.paper is None:
            data.pop("paper", None)
        return data

    @property
    def group(self) -> str:
        """The key of the claim's group in a report: ``paper:KEY`` for a paper, else the kind."""
        return f"{PAPER_GROUP}{self.paper}" if self.kind == "paper" else self.kind

    def label(self, sources: Mapping[str, str] | None = None) -> str:
        """Short form for tables: ``paper 2, Theorem 3`` (:func:`paper_label` of ``sources``) /
        ``reviewer, ...`` / ``own check, ...``."""
        head = paper_label(str(self.paper), sources) if self.kind == "paper" else KINDS[self.kind][1]
        return f"{head}, {self.where}"


def paper(key: str, where: str) -> Source:
    """A claim from paper ``key`` (declared in ``Lab.sources``), at ``where`` in it."""
    return Source(kind="paper", paper=key, where=where)


def reviewer(where: str) -> Source:
    return Source(kind="reviewer", where=where)


def own(where: str) -> Source:
    return Source(kind="own", where=where)


def source_groups(sources: Mapping[str, str] | None = None, cited: Iterable[Source | None] = ()) -> dict[str, str]:
    """Group key (:attr:`Source.group`) -> heading, in report order: the papers by key (those
    in ``sources`` with their heading, those only ``cited`` under their key), then reviewers,
    then own checks."""
    papers = dict(sources or {})
    for source in cited:
        if source is not None and source.kind == "paper":
            papers.setdefault(str(source.paper), str(source.paper))
    return {**{f"{PAPER_GROUP}{key}": papers[key] for key in sorted(papers)},
            **{kind: heading for kind, (heading, _) in KINDS.items()}}
