"""A source's text in memory: its paragraphs, questions, sections, locators and tags, and what a store of it kept."""

from __future__ import annotations

import bisect
import sys
from typing import Any

import attrs

from taguru_server.store.text import split_paragraphs

F64_MAX = sys.float_info.max


class Passage:
    """One source's text split into paragraphs, with its markers and metadata."""

    __slots__ = (
        "text",
        "_paragraphs",
        "questions",
        "sections",
        "section_keys",
        "locators",
        "tags",
        "stored_at",
        "date",
        "docs",
    )

    def __init__(
        self,
        text: str,
        questions: list[tuple[int, str]],
        sections: dict[int, str],
        locators: dict[int, tuple[str, str]],
        tags: list[str],
        stored_at: int | None,
        date: int | None,
        paragraphs: list[str] | None = None,
    ) -> None:
        """`paragraphs`: `split_paragraphs(text)` when the caller has it already (a load splits a batch);
        otherwise the text is split when the paragraphs are first read."""
        self.text = text
        self._paragraphs = paragraphs
        self.questions = questions
        self.sections = sections
        self.section_keys = sorted(sections)
        self.locators = locators
        self.tags = tags
        self.stored_at = stored_at
        self.date = date
        self.docs: list[int] = []

    @property
    def paragraphs(self) -> list[str]:
        """`split_paragraphs(text)`, computed once."""
        found = self._paragraphs
        if found is None:
            found = self._paragraphs = split_paragraphs(self.text)
        return found

    def section_for(self, i: int) -> str | None:
        if i >= len(self.paragraphs):
            return None
        k = bisect.bisect_right(self.section_keys, i)
        return self.sections[self.section_keys[k - 1]] if k else None

    def locator_for(self, i: int) -> dict[str, str] | None:
        if i >= len(self.paragraphs):
            return None
        loc = self.locators.get(i)
        return {"kind": loc[0], "value": loc[1]} if loc else None

    def meta_json(self) -> dict[str, Any]:
        return {
            "questions": self.questions,
            "sections": sorted(self.sections.items()),
            "locators": sorted((p, k, v) for p, (k, v) in self.locators.items()),
            "tags": self.tags,
            "stored_at": self.stored_at,
            "date": self.date,
        }


@attrs.frozen
class StoreCounts:
    """What one passage store kept and dropped."""

    questions_stored: int
    questions_dropped: int
    sections_stored: int
    sections_dropped: int
    locators_stored: int
    locators_dropped: int

    def plus(self, other: StoreCounts) -> StoreCounts:
        """The two counts summed field by field."""
        return StoreCounts(*(a + b for a, b in zip(attrs.astuple(self), attrs.astuple(other), strict=True)))


NO_MARKERS = StoreCounts(0, 0, 0, 0, 0, 0)
"""The counts of a passage store that kept and dropped nothing (or of no passage)."""
