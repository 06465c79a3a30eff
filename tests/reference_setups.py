"""The set-up calls of each reference fixture, transcribed from fixtures/reference/SETUPS.md.

Each entry: fixture name -> (kind, list of set-up calls, the recorded call). A call is
(method, path, body) where body is a JSON value sent compact and key-sorted, None for no
body, or a str sent as raw bytes (the JSONL of /import).
"""

from __future__ import annotations

import json
from typing import Any

from conftest import load_fixture

Call = tuple[str, str, Any]

CORPUS_B_STEPS: list[Call] = [
    (
        "POST",
        "associations",
        [
            {
                "label": "connects_to",
                "object": "beta",
                "paragraph": 0,
                "source": "doc.md",
                "subject": "alpha",
                "weight": 2.0,
            }
        ],
    ),
    (
        "POST",
        "sources",
        {
            "locators": {"doc.md": [{"locator": {"kind": "page", "value": "1"}, "paragraph": 0}]},
            "passages": {"doc.md": "alpha connects to beta."},
        },
    ),
]


def _basic(name: str) -> list[Call]:
    steps: list[Call] = [("PUT", f"/contexts/{name}", {"description": "wire-contract corpus"})]
    steps += [(m, f"/contexts/{name}/{p}", b) for m, p, b in CORPUS_B_STEPS]
    return steps


def _manifest_setup() -> list[Call]:
    return [
        ("PUT", "/contexts/corpus-d", None),
        (
            "POST",
            "/contexts/corpus-d/associations",
            [{"label": "近い", "object": "a2", "subject": "a1", "weight": 2.0}],
        ),
    ]


def recorded(kind: str, name: str, context: str | None) -> Call:
    fx = load_fixture(kind, name)
    path = fx["route"].replace("{name}", context or "")
    return (fx["method"], path, fx["request"])


SETUPS: dict[str, tuple[list[Call], str | None]] = {
    "version": ([], None),
    "health": ([("GET", "/version", None)], None),
    "recall": (_basic("corpus-a"), "corpus-a"),
    "contexts_list": (_basic("corpus-a") + [("POST", "/contexts/corpus-a/recall", {"cue": "alpha"})], None),
    # Group C also called POST /explore (out of scope here); it is a read and leaves activate's answer unchanged.
    "activate": (_basic("corpus-b"), "corpus-b"),
    "sources_search": (
        [
            ("PUT", "/contexts/corpus-c", None),
            ("POST", "/contexts/corpus-c/sources", {"passages": {"doc.md": "青嶺酒造は雲居県霧沢町の蔵元である。"}}),
        ],
        "corpus-c",
    ),
    "store_passages": ([("PUT", "/contexts/corpus-e", None)], "corpus-e"),
    "import": ([], None),
    "aliases_register": (
        [
            ("PUT", "/contexts/corpus-h", {"description": "wire-contract aliases corpus"}),
            (
                "POST",
                "/contexts/corpus-h/associations",
                [{"label": "採用", "object": "DB", "source": "doc.md", "subject": "PostgreSQL 16", "weight": 1.0}],
            ),
        ],
        "corpus-h",
    ),
    "import_refusal_durable_prefix": ([], None),
    "associations_store": ([("PUT", "/contexts/corpus-l", None)], "corpus-l"),
    "labels": (
        [
            ("PUT", "/contexts/corpus-i", {"description": "wire-contract coverage corpus"}),
            (
                "POST",
                "/contexts/corpus-i/associations",
                [{"label": "connects_to", "object": "beta", "source": "doc.md", "subject": "alpha", "weight": 1.0}],
            ),
        ],
        "corpus-i",
    ),
    # groups AG and AH (schemas)
    "add_associations_warn": (
        [
            ("PUT", "/contexts/corpus-g", None),
            (
                "PUT",
                "/contexts/corpus-g/schema",
                {
                    "closed_labels": False,
                    "mode": "warn",
                    "relations": {"杜氏": {"domain": ["Brewery"], "range": ["Person"]}},
                    "schema": 1,
                    "types": {"Brewery": {"is_a": []}, "Person": {"is_a": []}},
                },
            ),
        ],
        "corpus-g",
    ),
    "import_with_schema": ([], None),
}
SETUPS["aliases_list"] = (
    SETUPS["aliases_register"][0] + [recorded("http", "aliases_register", "corpus-h")],
    "corpus-h",
)
SETUPS["aliases_remove"] = (SETUPS["aliases_list"][0] + [recorded("http", "aliases_list", "corpus-h")], "corpus-h")


def manifest_text(rev: dict[str, int]) -> str:
    manifest = {
        "algorithm": "louvain-cc/1",
        "communities": [{"concept_count": 2, "fingerprint": "00aa00aa00aa00aa", "id": "L0-0", "level": 0}],
        "levels": 1,
        "revision": rev,
        "source_context": "corpus-d",
        "taguru_communities": 1,
    }
    return json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


EVIDENCE_SETUPS: dict[str, tuple[list[Call], str, dict[str, str], str | None]] = {
    # fixture: (set-up calls, context, server env, token for the recorded call)
    "evidence_mixed_lanes": (
        [
            ("PUT", "/contexts/sake", {"description": "evidence wire-contract corpus"}),
            (
                "POST",
                "/contexts/sake/sources",
                {
                    "locators": {"docs/kura.md": [{"locator": {"kind": "page", "value": "1"}, "paragraph": 0}]},
                    "passages": {"docs/kura.md": "青嶺酒造は雲居県霧沢町の蔵元である。杜氏は高瀬である。"},
                },
            ),
            (
                "POST",
                "/contexts/sake/associations",
                [
                    {
                        "label": "杜氏",
                        "object": "高瀬",
                        "paragraph": 0,
                        "source": "docs/kura.md",
                        "subject": "青嶺酒造",
                        "weight": 1.0,
                    }
                ],
            ),
        ],
        "sake",
        {},
        None,
    ),
    "evidence_budget_constrained": (
        [
            ("PUT", "/contexts/budget-corpus", None),
            (
                "POST",
                "/contexts/budget-corpus/associations",
                [{"label": "rel", "object": f"o{i}", "subject": f"s{i}", "weight": 1.0} for i in range(5)],
            ),
        ],
        "budget-corpus",
        {},
        None,
    ),
    "evidence_duplicate_passage": (
        [
            ("PUT", "/contexts/dup-corpus", None),
            (
                "POST",
                "/contexts/dup-corpus/sources",
                {
                    "passages": {
                        "a.md": "the quick brown fox jumps over the lazy dog",
                        "b.md": "the quick brown fox jumps over the lazy dogs",
                    }
                },
            ),
        ],
        "dup-corpus",
        {},
        None,
    ),
    "evidence_contradiction_group": (
        [
            ("PUT", "/contexts/contradiction-corpus", None),
            (
                "POST",
                "/contexts/contradiction-corpus/sources",
                {
                    "locators": {"s1.md": [{"locator": {"kind": "page", "value": "1"}, "paragraph": 0}]},
                    "passages": {"s1.md": "猫は哺乳類である。", "s2.md": "猫は爬虫類だと主張する文献もある。"},
                },
            ),
            (
                "POST",
                "/contexts/contradiction-corpus/associations",
                [
                    {
                        "label": "is_a",
                        "object": "哺乳類",
                        "paragraph": 0,
                        "source": "s1.md",
                        "subject": "猫",
                        "weight": 1.0,
                    },
                    {
                        "label": "is_a",
                        "object": "爬虫類",
                        "paragraph": 0,
                        "source": "s2.md",
                        "subject": "猫",
                        "weight": 1.0,
                    },
                ],
            ),
        ],
        "contradiction-corpus",
        {},
        None,
    ),
    "evidence_communities_degrade_and_rerank_reason": (
        [
            ("PUT", "/contexts/comm-corpus", None),
            (
                "POST",
                "/contexts/comm-corpus/associations",
                [{"label": "rel", "object": "beta", "subject": "alpha", "weight": 1.0}],
            ),
        ],
        "comm-corpus",
        {},
        None,
    ),
    "error_no_context": ([], "does-not-exist", {}, None),
    "error_over_limit": ([("PUT", "/contexts/over-limit-corpus", None)], "over-limit-corpus", {}, None),
    "error_malformed_request": ([("PUT", "/contexts/malformed-corpus", None)], "malformed-corpus", {}, None),
    "error_forbidden": (
        [
            ("PUT", "/contexts/forbidden-corpus", None),
            (
                "POST",
                "/contexts/forbidden-corpus/associations",
                [{"label": "rel", "object": "b", "subject": "a", "weight": 1.0}],
            ),
        ],
        "forbidden-corpus",
        {
            "TAGURU_API_TOKENS": "boss:atok,reader:rtok",
            "TAGURU_KEY_SCOPES": '{"reader": {"role": "read", "contexts": ["forbidden-corpus"]}}',
        },
        "rtok",
    ),
}
# The set-up calls of error_forbidden run with the admin key.
SETUP_TOKENS = {"error_forbidden": "atok"}


async def seed_communities_artifact(client) -> None:
    """Group E of SETUPS.md: corpus-d and a hand-built corpus-d::communities artifact."""
    await client.ok("PUT", "/contexts/corpus-d", content_type=None)
    await client.ok(
        "POST", "/contexts/corpus-d/associations", [{"label": "近い", "object": "a2", "subject": "a1", "weight": 2.0}]
    )
    rev = (await client.ok("GET", "/contexts/corpus-d"))["result"]["revision"]
    await client.ok("PUT", "/contexts/corpus-d::communities", content_type=None)
    await client.ok(
        "POST",
        "/contexts/corpus-d::communities/sources",
        {
            "passages": {
                "communities:manifest": manifest_text(rev),
                "community:L0-0": "この共同体のテーマは酒造りの歴史です。",
            }
        },
    )
    await client.ok(
        "POST",
        "/contexts/corpus-d::communities/associations",
        [
            {"label": "contains", "object": "a1", "subject": "community:L0-0", "weight": 6.0},
            {"label": "contains", "object": "a2", "subject": "community:L0-0", "weight": 4.0},
        ],
    )


# Groups AB-AE of SETUPS.md (audits and promote): fixture -> (set-up calls, context of the recorded call).
_TWIN_EDGES = [
    {"label": "銘柄", "object": "青嶺", "source": "doc-a", "subject": "青嶺酒造", "weight": 1.0},
    {"label": "銘柄", "object": "青嶺", "source": "doc-b", "subject": "青嶺酒蔵", "weight": 1.0},
    {"label": "行う", "object": "醸造", "subject": "蔵", "weight": 3.0},
]


def _twin_corpus(name: str) -> list[Call]:
    return [
        ("PUT", f"/contexts/{name}", {"description": "wire-contract vocabulary corpus"}),
        ("POST", f"/contexts/{name}/associations", _TWIN_EDGES),
    ]


PROMOTE_STEPS: list[Call] = [
    ("PUT", "/contexts/scratch-w", {"description": "wire-contract session notes"}),
    ("PUT", "/contexts/corpus-p", {"description": "wire-contract permanent corpus"}),
    (
        "POST",
        "/contexts/scratch-w/associations",
        [
            {
                "label": "杜氏",
                "object": "高瀬",
                "paragraph": 0,
                "source": "session:w:a",
                "subject": "蔵",
                "weight": 1.0,
            },
            {"label": "銘柄", "object": "青嶺", "source": "session:w:stay", "subject": "蔵", "weight": 1.0},
        ],
    ),
    (
        "POST",
        "/contexts/scratch-w/sources",
        {
            "dates": {"session:w:a": 1000},
            "passages": {"session:w:a": "蔵の杜氏は高瀬。"},
            "tags": {"session:w:a": ["酒"]},
        },
    ),
    ("POST", "/contexts/scratch-w/aliases", {"concepts": {"あおみね": "青嶺", "たかせ": "高瀬"}}),
]

AUDIT_SETUPS: dict[str, tuple[list[Call], str]] = {
    "vocabulary_audit": (_twin_corpus("corpus-j"), "corpus-j"),
    "drift_audit": (_twin_corpus("corpus-k"), "corpus-k"),
    "consolidation_audit": (
        [
            ("PUT", "/contexts/fix", {"description": "consolidation contract corpus"}),
            (
                "POST",
                "/contexts/fix/associations",
                [
                    {"label": "銘柄", "object": "青嶺", "source": "doc-a", "subject": "青嶺酒造", "weight": 1.0},
                    {"label": "銘柄", "object": "青嶺", "source": "doc-b", "subject": "青嶺酒蔵", "weight": 1.0},
                    {"label": "杜氏", "object": "高瀬", "source": "doc-a", "subject": "蔵", "weight": 1.0},
                    {"label": "杜氏", "object": "青山", "source": "doc-b", "subject": "蔵", "weight": 1.0},
                    {"label": "行う", "object": "大量生産", "source": "doc-a", "subject": "蔵", "weight": 1.0},
                    {"label": "行う", "object": "大量生産", "source": "doc-b", "subject": "蔵", "weight": -2.0},
                    {"label": "銘柄", "object": "初霜", "source": "doc-a", "subject": "蔵", "weight": 1.0},
                    {"label": "銘柄", "object": "幻", "source": "doc-undated", "subject": "幽霊蔵", "weight": 1.0},
                ],
            ),
            (
                "POST",
                "/contexts/fix/sources",
                {"dates": {"doc-a": 1000, "doc-b": 2000}, "passages": {"doc-a": "旧情報。", "doc-b": "新情報。"}},
            ),
        ],
        "fix",
    ),
    "promote_dry_run": (PROMOTE_STEPS, "scratch-w"),
    # step 7 runs right after step 6 (the dry run), which wrote nothing
    "promote": (
        PROMOTE_STEPS
        + [("POST", "/contexts/scratch-w/promote?dry_run=true", {"into": "corpus-p", "sources": ["session:w:a"]})],
        "scratch-w",
    ),
}
