"""Citations: a paragraph's text with its source, section and locator."""

from __future__ import annotations

import attrs

from taguru_server.store.model.context import Context


@attrs.frozen
class Locator:
    """Where a paragraph sits in its original (e.g. a page), as given at import."""

    kind: str
    value: str


@attrs.frozen
class Citation:
    """A paragraph's text with its source, section and locator."""

    text: str
    source: str
    section: str | None
    locator: Locator | None


def find_citation(ctx: Context, source: str, paragraph: int) -> Citation | str:
    """The paragraph's citation, or why there is none: 'no_source' / 'no_paragraph'."""
    sid = ctx.find_source(source)
    passage = ctx.passages.get(sid) if sid is not None else None
    if passage is None:
        return "no_source"
    if paragraph >= len(passage.paragraphs):
        return "no_paragraph"
    loc = passage.locators.get(paragraph)
    return Citation(
        passage.paragraphs[paragraph],
        source,
        passage.section_for(paragraph),
        None if not loc else Locator(loc[0], loc[1]),
    )
