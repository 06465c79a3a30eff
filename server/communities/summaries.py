"""Community summaries: the deterministic extractive default and the chat-provider prompts (docs/communities.md).

The extractive summary of a community is a pure function of the content its fingerprint covers
(members, induced associations, and for a parent its children), so reusing a stored summary for
an unchanged fingerprint gives the same artifact a fresh build would. Its format is versioned by
:data:`EXTRACTIVE`; change the text layout only together with that version, because stored
summaries are reused by fingerprint.

A leaf summary:

1. the theme: the three strongest members, the concept count, then up to 12 more members;
2. one gloss sentence per uncontested top association (``{subject}の{label}は{object}。`` or
   ``{subject} {label} {object}.``), the subject left out when it repeats (Japanese only);
3. the contested facts: negated associations (negative weight) and subject+label pairs with
   conflicting objects.

A parent summary names its strongest descendants' themes, then quotes each child summary's first
sentence. The language is Japanese when the names and labels hold more CJK than Latin letters,
English otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import regex

EXTRACTIVE = "extractive/1"
THEME_NAMES = 3
MORE_MEMBERS = 12
PARENT_CHILD_LINES = 40
FIRST_SENTENCE_CHARS = 300
PROMPT_MEMBERS = 40
PROMPT_CHILD_EXCERPT = 500

_CJK = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}]")
_LATIN = regex.compile(r"\p{Latin}")
_FIRST_SENTENCE = regex.compile(r"^.*?(?:[。！？]|[.!?](?=\s|$)|\n|$)", regex.S)


def clean(name: str) -> str:
    """A name as it is written into prose: whitespace runs folded to one space."""
    folded = " ".join(name.split())
    return folded or "(blank)"


def script_counts(texts: Iterable[str]) -> tuple[int, int]:
    """(names written mostly in CJK, names written mostly in Latin letters): one vote per name."""
    cjk = latin = 0
    for t in texts:
        c, lat = len(_CJK.findall(t)), len(_LATIN.findall(t))
        if c > lat:
            cjk += 1
        elif lat > c:
            latin += 1
    return cjk, latin


def is_japanese(counts: tuple[int, int]) -> bool:
    """Japanese prose when most names and labels are CJK; English otherwise."""
    return counts[0] > counts[1]


def first_sentence(text: str) -> str:
    """The first sentence of a summary (at most 300 characters), trimmed."""
    stripped = text.strip()
    m = _FIRST_SENTENCE.match(stripped)
    sentence = (m.group(0) if m else stripped).strip()
    if len(sentence) > FIRST_SENTENCE_CHARS:
        sentence = sentence[:FIRST_SENTENCE_CHARS].rstrip() + "…"
    return sentence


def _weight(w: float) -> str:
    return f"{w:.2f}"


def _join_en(names: Sequence[str]) -> str:
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def _quoted(names: Sequence[str]) -> str:
    return "".join(f"「{n}」" for n in names)


# ----- leaves --------------------------------------------------------------------------


def leaf_counts(community: Mapping[str, Any]) -> tuple[int, int]:
    """The script counts a leaf's language is decided by: its strongest names and its labels."""
    names = [m["name"] for m in community.get("members", [])[:PROMPT_MEMBERS]]
    labels = [a["label"] for a in community.get("top_associations", [])]
    return script_counts(names + labels)


Fact = Mapping[str, Any]


def _split_facts(associations: Sequence[Fact]) -> tuple[list[Fact], list[list[Fact]]]:
    """Uncontested facts, and contested groups (a negation, or one subject+label with several objects)."""
    groups: dict[tuple[str, str], list[Fact]] = {}
    for a in associations:
        groups.setdefault((a["subject"], a["label"]), []).append(a)
    plain: list[Fact] = []
    contested: list[list[Fact]] = []
    for group in groups.values():
        if len(group) > 1 or group[0]["weight"] < 0:
            contested.append(group)
    contested_keys = {(g[0]["subject"], g[0]["label"]) for g in contested}
    for a in associations:
        if (a["subject"], a["label"]) not in contested_keys:
            plain.append(a)
    return plain, contested


def leaf_summary(community: Mapping[str, Any]) -> str:
    """The extractive summary of a leaf community from its members and top associations."""
    members = [clean(m["name"]) for m in community.get("members", [])]
    associations = community.get("top_associations", [])
    count = community.get("concept_count", len(members))
    theme, more = members[:THEME_NAMES], members[THEME_NAMES : THEME_NAMES + MORE_MEMBERS]
    plain, contested = _split_facts(associations)
    if is_japanese(leaf_counts(community)):
        head = f"{_quoted(theme)}を中心とする概念のまとまり（{count}個）。"
        if more:
            head += f"ほかに{_quoted(more)}などを含む。"
        facts = []
        previous = None
        for a in plain:
            subject = clean(a["subject"])
            prefix = "" if subject == previous else f"{subject}の"
            facts.append(f"{prefix}{clean(a['label'])}は{clean(a['object'])}。")
            previous = subject
        lines = _contested_lines(
            contested,
            lambda subject, label, obj, weight: f"{subject}の{label}は{obj}ではない（重み{weight}）。",
            lambda subject, label, group: (
                f"{subject}の{label}については"
                + "".join(f"「{clean(a['object'])}」" + ("（否定）" if a["weight"] < 0 else "") for a in group)
                + "と食い違う記述がある。"
            ),
        )
        return _prose(head, facts, "異論のある事実：", lines, "")
    head = f"This community centres on {_join_en(theme)} ({count} concepts)."
    if more:
        head += f" It also includes {', '.join(more)}."
    facts = [f"{clean(a['subject'])} {clean(a['label'])} {clean(a['object'])}." for a in plain]
    lines = _contested_lines(
        contested,
        lambda subject, label, obj, weight: f"{subject} {label} {obj} is negated (weight {weight}).",
        lambda subject, label, group: (
            f"{subject} {label} has conflicting values: "
            + ", ".join(clean(a["object"]) + (" (negated)" if a["weight"] < 0 else "") for a in group)
            + "."
        ),
    )
    return _prose(head, facts, "Contested: ", lines, " ")


def _prose(head: str, facts: list[str], contested_head: str, contested: list[str], sep: str) -> str:
    """A leaf summary's paragraphs: the head, the facts, then the contested ones after their heading
    (a paragraph with nothing in it is left out); sentences are joined with `sep`."""
    paragraphs = [head]
    if facts:
        paragraphs.append(sep.join(facts))
    if contested:
        paragraphs.append(contested_head + sep.join(contested))
    return "\n\n".join(paragraphs)


def _contested_lines(
    contested: list[list[Fact]],
    negated: Callable[[str, str, str, str], str],
    conflicting: Callable[[str, str, list[Fact]], str],
) -> list[str]:
    """One sentence per contested group: its one negated value (subject, label, object, weight), or its
    conflicting values, in the summary's language."""
    lines = []
    for group in contested:
        subject, label = clean(group[0]["subject"]), clean(group[0]["label"])
        if len(group) == 1:
            a = group[0]
            lines.append(negated(subject, label, clean(a["object"]), _weight(a["weight"])))
        else:
            lines.append(conflicting(subject, label, group))
    return lines


# ----- parents -------------------------------------------------------------------------


class Hierarchy:
    """Theme names and script counts of every community, leaves up, from one analysis."""

    def __init__(self, communities: Sequence[Mapping[str, Any]]) -> None:
        self.by_id = {c["id"]: c for c in communities}
        self.themes: dict[str, list[str]] = {}
        self.counts: dict[str, tuple[int, int]] = {}
        for c in communities:  # leaves first, then each level: children are always known
            if c["level"] == 0:
                self.themes[c["id"]] = [clean(m["name"]) for m in c.get("members", [])[:THEME_NAMES]]
                self.counts[c["id"]] = leaf_counts(c)
            else:
                kids = self.ordered_children(c)
                self.themes[c["id"]] = [self.themes[k][0] for k in kids if self.themes.get(k)][:THEME_NAMES]
                cjk = sum(self.counts.get(k, (0, 0))[0] for k in kids)
                latin = sum(self.counts.get(k, (0, 0))[1] for k in kids)
                self.counts[c["id"]] = (cjk, latin)

    def ordered_children(self, community: Mapping[str, Any]) -> list[str]:
        """Children by size, then theme: an order that depends on content, never on ids."""
        kids = [k for k in community.get("children", []) if k in self.by_id]

        def key(k: str) -> tuple[int, list[str]]:
            return (-int(self.by_id[k].get("concept_count", 0)), self.themes.get(k, []))

        return sorted(kids, key=key)


def parent_summary(community: Mapping[str, Any], hierarchy: Hierarchy, summaries: Mapping[str, str]) -> str:
    """The extractive summary of a parent: its themes, then each child summary's first sentence."""
    kids = hierarchy.ordered_children(community)
    theme = hierarchy.themes.get(community["id"], [])
    count = community.get("concept_count", 0)
    sentences = [first_sentence(summaries[k]) for k in kids[:PARENT_CHILD_LINES] if summaries.get(k)]
    rest = len(kids) - min(len(kids), PARENT_CHILD_LINES)
    if is_japanese(hierarchy.counts.get(community["id"], (0, 0))):
        head = f"{_quoted(theme)}などにまたがる上位のまとまり（下位グループ{len(kids)}個、概念{count}個）。"
        if rest:
            sentences.append(f"ほか{rest}個の下位グループがある。")
    else:
        groups = f"{len(kids)} subgroup" + ("" if len(kids) == 1 else "s")
        head = f"This higher-level grouping spans {_join_en(theme)} ({groups}, {count} concepts)."
        if rest:
            sentences.append(f"…and {rest} more subgroups.")
    return head + ("\n\n" + "\n".join(sentences) if sentences else "")


def extractive_summaries(
    communities: Sequence[Mapping[str, Any]], known: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Every community's summary, leaves before parents; `known` summaries are kept as they are."""
    hierarchy = Hierarchy(communities)
    out: dict[str, str] = dict(known or {})
    for c in communities:
        if c["id"] in out:
            continue
        out[c["id"]] = leaf_summary(c) if c["level"] == 0 else parent_summary(c, hierarchy, out)
    return out


# ----- the chat provider's prompts -------------------------------------------------------

SYSTEM_PROMPT = (
    "You summarize one cluster of a knowledge graph so that the summary can be found and read later by a "
    "retrieval system. Write in the majority language of the facts you are given. Write prose only: no "
    "headings, no lists, no preamble."
)


def leaf_messages(community: Mapping[str, Any]) -> list[dict[str, str]]:
    """The chat messages that ask for a leaf community's summary."""
    names = ", ".join(m["name"] for m in community.get("members", [])[:PROMPT_MEMBERS])
    facts = "\n".join(
        f"{a['subject']} —{a['label']}→ {a['object']} (weight {_weight(a['weight'])}, ×{a['count']})"
        for a in community.get("top_associations", [])
    )
    user = (
        f"This cluster has {community.get('concept_count', 0)} concepts.\n"
        f"Members, strongest first: {names}\n"
        f"Its strongest facts:\n{facts or '(none)'}\n\n"
        "Write 2-4 short paragraphs. The first sentence must name the cluster's theme. Report facts with a "
        "negative weight as contested or negated, never as plain truth."
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def parent_messages(community: Mapping[str, Any], child_summaries: Sequence[str]) -> list[dict[str, str]]:
    """The chat messages that ask for a parent community's summary from its children's."""
    excerpts = "\n".join(f"- {s[:PROMPT_CHILD_EXCERPT]}" for s in child_summaries)
    user = (
        f"This cluster groups {len(child_summaries)} sub-clusters with {community.get('concept_count', 0)} "
        f"concepts in all. The sub-clusters' summaries:\n{excerpts}\n\n"
        "Write 1-3 paragraphs: first the theme they share, then what distinguishes the subgroups."
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def chat_body(model: str, messages: list[dict[str, str]]) -> dict[str, Any]:
    return {"model": model, "temperature": 0, "messages": messages}


def chat_answer(payload: Any) -> str:
    """The trimmed text of an OpenAI-style chat completion; ValueError when it has none."""
    try:
        content = payload["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise ValueError("the answer has no choices[0].message.content") from None
    if not isinstance(content, str):
        raise ValueError("choices[0].message.content is not a string")
    text = content.strip()
    if not text:
        raise ValueError("the answer is empty")
    return text


def manifest_text(
    name: str, algorithm: str, revision: Mapping[str, int], levels: int, communities: Sequence[Mapping[str, Any]]
) -> str:
    """The `communities:manifest` passage: compact JSON in declaration order."""
    entries = []
    for c in communities:
        entry: dict[str, Any] = {
            "id": c["id"],
            "level": c["level"],
            "fingerprint": c["fingerprint"],
            "concept_count": c["concept_count"],
        }
        if c.get("parent") is not None:
            entry["parent"] = c["parent"]
        entries.append(entry)
    doc = {
        "taguru_communities": 1,
        "algorithm": algorithm,
        "source_context": name,
        "revision": {
            "graph": revision.get("graph", 0),
            "passages": revision.get("passages", 0),
            "config": revision.get("config", 0),
        },
        "levels": levels,
        "communities": entries,
    }
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
