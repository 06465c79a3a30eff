"""`taguru communities`: derive the `{name}::communities` artifact from a running server, over HTTP only.

docs/communities.md describes the artifact and the build.

Flow: fetch the analysis (GET …/communities), read the old manifest, reuse the stored summary of
every community whose fingerprint the old manifest already lists, summarize the rest (leaves
before parents), import one batch per community and the manifest batch last, and only then
retract the community records that vanished. A build that fails before its last import leaves
the old manifest in place, so the previous artifact stays searchable.

Each community passage is tagged `fingerprint:{fp}` and `summarizer:{kind}`: a stored summary is
reused only when its tag agrees with the manifest (a half-written earlier build cannot hand a
summary to the wrong community) and it was written by the same kind of summarizer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from taguru_server.cli.environ import UnreadableConfig, add_config_option, client_configuration
from taguru_server.client.http import (
    NotEnvelope,
    Reply,
    ServerError,
    SetupError,
    TaguruClient,
    TransportError,
    base_url,
    bearer_token,
    new_session,
    server_error,
)
from taguru_server.client.progress import Progress as ProgressBar
from taguru_server.server.communities.summaries import (
    EXTRACTIVE,
    Hierarchy,
    leaf_messages,
    leaf_summary,
    manifest_text,
    parent_messages,
    parent_summary,
)
from taguru_server.server.providers.chat import ChatConfigError, ChatFailed, ChatProvider, ProviderConfig
from taguru_server.store.derive.communities import COMMUNITY_PREFIX, MANIFEST_SOURCE, artifact_name

if TYPE_CHECKING:
    from aiohttp import ClientSession

    from taguru_server.server.config import Configuration

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
CHUNK_BUDGET = 4 * 1024 * 1024
LOOKUP_CHUNK = 1000
LIST_PAGE = 1000
MAX_WEIGHT = 1e6
HTTP_TIMEOUT_SECS = 600
TAG_MAX_BYTES = 128


class BuildFailed(Exception):
    """The derivation could not finish; the message says what failed and what to do."""


class UsageError(Exception):
    """The command line or configuration cannot be acted on."""


# ----- configuration -------------------------------------------------------------------


def _base_url(explicit: str | None, env: dict[str, str]) -> str:
    try:
        url = base_url(explicit or None, env)
    except SetupError as exc:
        raise UsageError(str(exc)) from None
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"the server URL must start with http:// or https://, got '{url}'")
    return url


def _provider_config(configuration: Configuration) -> ProviderConfig | None:
    """The chat provider of the summaries (TAGURU_EXTRACT_*), None for the extractive ones; UsageError when
    its settings are refused."""
    try:
        return configuration.chat()
    except ChatConfigError as exc:
        raise UsageError(str(exc)) from None


def _summarizer_tag(config: ProviderConfig) -> str:
    return _tag(f"summarizer:chat/{config.model}")


def _tag(text: str) -> str:
    raw = text.encode("utf-8")[:TAG_MAX_BYTES]
    return raw.decode("utf-8", "ignore")


# ----- the server ----------------------------------------------------------------------


def _seg(name: str) -> str:
    return quote(name, safe="")


class Server:
    """The few taguru endpoints the derivation uses."""

    def __init__(self, session: ClientSession, base: str, token: str) -> None:
        self.base = base
        self.client = TaguruClient(base, token, session, timeout=HTTP_TIMEOUT_SECS, max_response_bytes=None)

    async def request(
        self, method: str, path: str, body: Any = None, raw: bytes | None = None, content_type: str = "application/json"
    ) -> Reply:
        """One request; any status comes back, BuildFailed when no answer arrives."""
        try:
            return await self.client.send(method, path, body, data=raw, content_type=content_type)
        except TransportError as exc:
            if exc.timed_out:
                raise BuildFailed(f"{method} {path} got no answer within {HTTP_TIMEOUT_SECS}s") from None
            raise BuildFailed(
                f"cannot reach the server at {self.base} ({exc.kind}); is it running? "
                "(--url, TAGURU_URL or TAGURU_ADDR)"
            ) from None

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        allow: tuple[int, ...] = (),
        raw: bytes | None = None,
        content_type: str = "application/json",
    ) -> tuple[int, Any]:
        """An enveloped call: the `result` on 200, the status alone for an allowed error, else BuildFailed."""
        reply = await self.request(method, path, body, raw, content_type)
        if reply.status != 200 and reply.status in allow:
            return reply.status, None
        try:
            return reply.status, self.client.decode(reply, path)
        except NotEnvelope:
            raise BuildFailed(f"{method} {path} answered 200 with a body that is not a taguru envelope") from None
        except ServerError:
            raise BuildFailed(f"{method} {path} failed: {_error_text(reply)}") from None


def _error_text(reply: Reply) -> str:
    err = server_error(reply, "")
    if err.error is None:
        return f"HTTP {reply.status}"
    return f"{err.error} (HTTP {reply.status}, {err.code})"


def parse_analysis(data: bytes) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and the community lines of a GET …/communities stream; BuildFailed when torn or unknown."""
    try:
        lines = [json.loads(line) for line in data.decode("utf-8").split("\n") if line.strip()]
    except (UnicodeDecodeError, ValueError):
        raise BuildFailed("the communities stream does not parse as NDJSON") from None
    if not lines or not isinstance(lines[0], dict) or "taguru_communities" not in lines[0]:
        raise BuildFailed("the communities stream has no header line")
    header = lines[0]
    if header.get("taguru_communities") != 1:
        raise BuildFailed(
            f"the communities stream has format {header.get('taguru_communities')!r}; this client "
            "reads format 1 — upgrade taguru"
        )
    communities = lines[1:]
    if len(communities) != header.get("communities"):
        raise BuildFailed(
            f"the communities stream is torn: the header announces {header.get('communities')} "
            f"communities, {len(communities)} arrived"
        )
    return header, communities


# ----- the derivation ------------------------------------------------------------------


Progress = Callable[[str], None]


def _silent(_message: str) -> None:
    return None


async def derive(
    server: Server,
    name: str,
    *,
    into: str | None = None,
    dry_run: bool = False,
    provider: ChatProvider | None = None,
    progress: Progress = _silent,
    chunk_budget: int = CHUNK_BUDGET,
) -> dict[str, Any]:
    """Build (or refresh) the communities artifact of `name`; returns the run's report."""
    derived = into or artifact_name(name)
    progress("reading the analysis")
    reply = await server.request("GET", f"/contexts/{_seg(name)}/communities")
    if reply.status != 200:
        raise BuildFailed(f"GET /contexts/{name}/communities failed: {_error_text(reply)}")
    header, communities = parse_analysis(reply.body)
    algorithm = header.get("algorithm")
    revision = header.get("revision") or {}

    old = await _old_manifest(server, name, derived)
    stored = await _stored_communities(server, derived)
    rebuilt = old is None or old.get("algorithm") != algorithm
    summarizer = _summarizer_tag(provider.config) if provider is not None else f"summarizer:{EXTRACTIVE}"

    summaries: dict[str, str] = {}
    in_place: set[str] = set()
    if not rebuilt:
        assert old is not None
        found = await _reusable(server, derived, old, stored, communities, summarizer)
        summaries = {cid: text for cid, (_old_id, text) in found.items()}
        in_place = _in_place(old, stored, communities, found, summarizer)
    reused = len(summaries)
    todo = [c for c in communities if c["id"] not in summaries]
    new_ids = {c["id"] for c in communities}
    old_ids = {
        e["id"] for e in (old or {}).get("communities", []) if isinstance(e, dict) and isinstance(e.get("id"), str)
    }
    vanished = sorted((old_ids | set(stored)) - new_ids)
    report = {
        "context": name,
        "derived": derived,
        "dry_run": dry_run,
        "algorithm": algorithm,
        "revision_graph": revision.get("graph", 0),
        "concept_count": header.get("concept_count", 0),
        "edge_count": header.get("edge_count", 0),
        "levels": header.get("levels", 0),
        "communities": len(communities),
        "summaries_generated": len(todo),
        "summaries_reused": reused,
        "retracted": len(vanished),
        "rebuilt_from_scratch": rebuilt,
    }
    if dry_run:
        return report

    hierarchy = Hierarchy(communities)
    for i, c in enumerate(todo, 1):
        progress(f"summarizing {i}/{len(todo)}")
        summaries[c["id"]] = await _summarize(c, hierarchy, summaries, provider)

    # a record already stored under the same id with the same content is not rewritten
    stream = _artifact_stream(name, derived, header, communities, summaries, summarizer, skip=in_place)
    await _import(server, stream, chunk_budget, progress)
    for i, cid in enumerate(vanished, 1):
        progress(f"retracting {i}/{len(vanished)}")
        await server.call("POST", f"/contexts/{_seg(derived)}/sources/retract", {"source": COMMUNITY_PREFIX + cid})
    return report


async def _old_manifest(server: Server, name: str, derived: str) -> dict[str, Any] | None:
    """The old manifest, or None on a first run (no artifact, no manifest, or one that does not parse)."""
    status, result = await server.call(
        "POST", f"/contexts/{_seg(derived)}/sources/lookup", {"sources": [MANIFEST_SOURCE]}, allow=(404,)
    )
    if status == 404:
        return None
    text = (result.get("passages") or {}).get(MANIFEST_SOURCE)
    if text is None:
        return None
    try:
        manifest = json.loads(text)
    except ValueError:
        return None
    if not isinstance(manifest, dict):
        return None
    source = manifest.get("source_context")
    if source is not None and source != name:
        raise BuildFailed(
            f"'{derived}' holds the artifact of '{source}', not '{name}'; choose another --into or "
            f"delete '{derived}' first"
        )
    return manifest


async def _stored_communities(server: Server, derived: str) -> dict[str, list[str]]:
    """Every stored `community:{id}` record of the artifact: id → passage tags."""
    out: dict[str, list[str]] = {}
    after: str | None = None
    while True:
        query = {"prefix": COMMUNITY_PREFIX, "limit": str(LIST_PAGE)}
        if after is not None:
            query["after"] = after
        status, result = await server.call("GET", f"/contexts/{_seg(derived)}/sources?{urlencode(query)}", allow=(404,))
        if status == 404:
            return out
        entries = result.get("entries") or []
        for entry in entries:
            out[entry["name"][len(COMMUNITY_PREFIX) :]] = list(entry.get("tags") or [])
        if len(entries) < LIST_PAGE:
            return out
        after = entries[-1]["name"]


async def _reusable(
    server: Server,
    derived: str,
    old: dict[str, Any],
    stored: dict[str, list[str]],
    communities: list[dict[str, Any]],
    summarizer: str,
) -> dict[str, tuple[str, str]]:
    """new id → (old id, stored summary), for every community whose fingerprint the old manifest lists."""
    old_by_fp: dict[str, str] = {}
    for entry in old.get("communities") or []:
        if isinstance(entry, dict) and isinstance(entry.get("fingerprint"), str) and isinstance(entry.get("id"), str):
            old_by_fp.setdefault(entry["fingerprint"], entry["id"])
    wanted: dict[str, str] = {}  # new id -> old id
    for c in communities:
        old_id = old_by_fp.get(c["fingerprint"])
        if old_id is None or old_id not in stored:
            continue
        tags = stored[old_id]
        fp_tags = [t for t in tags if t.startswith("fingerprint:")]
        kind_tags = [t for t in tags if t.startswith("summarizer:")]
        if fp_tags and f"fingerprint:{c['fingerprint']}" not in fp_tags:
            continue  # the record was rewritten by a build whose manifest never landed
        if kind_tags and summarizer not in kind_tags:
            continue
        wanted[c["id"]] = old_id
    texts: dict[str, str] = {}
    old_ids = sorted(set(wanted.values()))
    for i in range(0, len(old_ids), LOOKUP_CHUNK):
        chunk = [COMMUNITY_PREFIX + o for o in old_ids[i : i + LOOKUP_CHUNK]]
        _status, result = await server.call("POST", f"/contexts/{_seg(derived)}/sources/lookup", {"sources": chunk})
        for source, text in (result.get("passages") or {}).items():
            texts[source[len(COMMUNITY_PREFIX) :]] = text
    return {new: (old_id, texts[old_id]) for new, old_id in wanted.items() if texts.get(old_id, "").strip()}


def _in_place(
    old: dict[str, Any],
    stored: dict[str, list[str]],
    communities: list[dict[str, Any]],
    found: dict[str, tuple[str, str]],
    summarizer: str,
) -> set[str]:
    """Ids whose stored record is exactly what this run would write: same id, fingerprint and summarizer
    tags, and (for a parent) the same child ids — members and strengths follow from the fingerprint."""
    old_children: dict[str, set[str]] = {}
    for entry in old.get("communities") or []:
        if isinstance(entry, dict) and isinstance(entry.get("parent"), str) and isinstance(entry.get("id"), str):
            old_children.setdefault(entry["parent"], set()).add(entry["id"])
    out = set()
    for c in communities:
        cid = c["id"]
        if found.get(cid, ("", ""))[0] != cid:
            continue
        tags = stored.get(cid, [])
        if f"fingerprint:{c['fingerprint']}" not in tags or summarizer not in tags:
            continue
        if c.get("children") and set(c["children"]) != old_children.get(cid, set()):
            continue
        out.add(cid)
    return out


async def _summarize(
    community: dict[str, Any], hierarchy: Hierarchy, summaries: dict[str, str], provider: ChatProvider | None
) -> str:
    if community["level"] == 0:
        if provider is None:
            return leaf_summary(community)
        messages = leaf_messages(community)
    else:
        if provider is None:
            return parent_summary(community, hierarchy, summaries)
        kids = hierarchy.ordered_children(community)
        messages = parent_messages(community, [summaries[k] for k in kids if k in summaries])
    try:
        return await provider.complete(messages)
    except ChatFailed as exc:
        raise BuildFailed(str(exc)) from None


def _artifact_stream(
    name: str,
    derived: str,
    header: dict[str, Any],
    communities: list[dict[str, Any]],
    summaries: dict[str, str],
    summarizer: str,
    skip: set[str] | None = None,
) -> list[str]:
    """One JSONL batch per community (but those in `skip`), in analysis order, then the manifest batch."""
    create = {"description": f"Community analysis of '{name}' (taguru communities)"}
    batches: list[str] = []

    def head(source: str) -> dict[str, Any]:
        line: dict[str, Any] = {"taguru_batch": 1, "context": derived, "source": source}
        if not batches:
            line["create"] = create
        return line

    for c in communities:
        if skip and c["id"] in skip:
            continue
        source = COMMUNITY_PREFIX + c["id"]
        lines = [
            head(source),
            {"passage": summaries[c["id"]], "tags": [_tag(f"fingerprint:{c['fingerprint']}"), summarizer]},
        ]
        for m in c.get("members", []):
            strength = float(m["strength"])
            weight = min(strength, MAX_WEIGHT) if strength != 0 else 1.0
            lines.append({"subject": source, "label": "contains", "object": m["name"], "weight": weight})
        for child in c.get("children", []):
            lines.append({"subject": source, "label": "includes", "object": COMMUNITY_PREFIX + child, "weight": 1.0})
        batches.append("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
    text = manifest_text(
        name, header.get("algorithm", ""), header.get("revision") or {}, header.get("levels", 0), communities
    )
    lines = [head(MANIFEST_SOURCE), {"passage": text}]
    batches.append("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
    return batches


def _chunks(batches: list[str], budget: int) -> list[list[str]]:
    out: list[list[str]] = []
    current: list[str] = []
    size = 0
    for batch in batches:
        n = len(batch.encode("utf-8"))
        if current and size + n > budget:
            out.append(current)
            current, size = [], 0
        current.append(batch)
        size += n
    if current:
        out.append(current)
    return out


async def _import(server: Server, batches: list[str], budget: int, progress: Progress) -> None:
    """POST the batches in chunks split at batch boundaries; a 413 halves the chunk budget."""
    done = 0
    while done < len(batches):
        chunk = _chunks(batches[done:], budget)[0]
        progress(f"importing {done + len(chunk)}/{len(batches)} batches")
        reply = await server.request(
            "POST", "/import", raw="".join(chunk).encode("utf-8"), content_type="application/x-ndjson"
        )
        if reply.status == 413:
            if len(chunk) == 1:
                raise BuildFailed(
                    "one community batch is larger than the server's body cap "
                    "(TAGURU_MAX_BODY_BYTES); raise the cap and run again"
                )
            budget = max(budget // 2, 1)
            continue
        if reply.status != 200:
            raise BuildFailed(
                f"POST /import failed after {done} of {len(batches)} batches landed: "
                f"{_error_text(reply)}; the previous manifest is still in place — run again"
            )
        done += len(chunk)


# ----- the command ---------------------------------------------------------------------


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `taguru communities` on the `taguru` command's subparsers."""
    p = subparsers.add_parser(
        "communities",
        help="build the derived communities artifact of a context over HTTP",
        description="Derive the NAME::communities artifact of a context from a running server, over HTTP only.",
        epilog="Summaries come from the chat model of TAGURU_EXTRACT_URL / TAGURU_EXTRACT_MODEL / "
        "TAGURU_EXTRACT_API_KEY when set, else from the members themselves (docs/communities.md).",
    )
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--context", metavar="NAME", help="the context to analyse")
    target.add_argument("--group", metavar="NAME", help="derive every member context of a group")
    p.add_argument("--into", metavar="NAME", help="the artifact context (default: NAME::communities)")
    p.add_argument("--dry-run", action="store_true", help="report what would change; write nothing, call no LLM")
    p.add_argument("--json", action="store_true", help="print a JSON report")
    add_config_option(p)
    p.add_argument(
        "--url",
        metavar="URL",
        help="the server (default: http://TAGURU_ADDR, else http://127.0.0.1:8248); token from TAGURU_API_TOKEN",
    )
    p.add_argument("url_arg", nargs="?", metavar="URL", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_communities)
    return p


def cmd_communities(args: argparse.Namespace) -> int:
    if args.url and args.url_arg:
        return _usage("give the server URL once (--url URL or URL)")
    if args.group is not None and args.into:
        return _usage("--into cannot be combined with --group (each member gets its own NAME::communities)")
    try:
        configuration = client_configuration(args)
        env = dict(configuration.values)
        base = _base_url(args.url or args.url_arg, env)
        provider = _provider_config(configuration)
    except UnreadableConfig as exc:
        return _usage(str(exc) if exc.malformed else f"cannot read the config file: {exc.reason}")
    except (UsageError, SetupError) as exc:
        return _usage(str(exc))
    if args.group is not None:
        return _finish(args, [], "context groups are not supported by this server; run --context for each context")
    progress = _tty_progress(args.context) if sys.stderr.isatty() and not args.json else _silent
    try:
        report = asyncio.run(
            _run(base, bearer_token(env) or "", args.context, args.into, args.dry_run, provider, progress)
        )
    except BuildFailed as exc:
        _clear_progress(progress)
        return _finish(args, [], str(exc))
    except KeyboardInterrupt:
        _clear_progress(progress)
        return _finish(args, [], "interrupted; the previous manifest is still in place — run again")
    _clear_progress(progress)
    return _finish(args, [report], None)


async def _run(
    base: str, token: str, name: str, into: str | None, dry_run: bool, config: ProviderConfig | None, progress: Progress
) -> dict[str, Any]:
    async with new_session(HTTP_TIMEOUT_SECS) as session:
        provider = ChatProvider(config, session) if config is not None and not dry_run else None
        return await derive(
            Server(session, base, token), name, into=into, dry_run=dry_run, provider=provider, progress=progress
        )


def _usage(message: str) -> int:
    print(f"taguru communities: {message}", file=sys.stderr)
    return EXIT_USAGE


_STEP = re.compile(r"(\w+) (\d+)/(\d+)(?: (\w+))?")


def _tty_progress(name: str) -> Progress:
    """Counted steps ("summarizing 3/40") as a bar with rate and ETA, one per phase; other messages as text."""
    bars: dict[str, ProgressBar] = {}

    def show(message: str) -> None:
        step = _STEP.fullmatch(message)
        if step is None:
            sys.stderr.write(f"\r\x1b[2Ktaguru communities: {name}: {message}")
            sys.stderr.flush()
            return
        phase, done, total, unit = step.group(1), int(step.group(2)), int(step.group(3)), step.group(4)
        bar = bars.get(phase)
        if bar is None:
            bar = bars[phase] = ProgressBar(
                f"taguru communities: {name}: {phase}", total, sys.stderr, unit=unit or "communities", enabled=True
            )
        bar.update(done, total=total)

    return show


def _clear_progress(progress: Progress) -> None:
    if progress is not _silent:
        sys.stderr.write("\r\x1b[2K")
        sys.stderr.flush()


def _finish(args: argparse.Namespace, reports: list[dict[str, Any]], error: str | None) -> int:
    if args.json:
        print(json.dumps(reports, ensure_ascii=False, indent=2))
    if error is not None:
        print(f"taguru communities: {error}", file=sys.stderr)
        return EXIT_FAIL
    if not args.json:
        for r in reports:
            verb = "would write" if r["dry_run"] else "wrote"
            print(
                f"taguru communities: {r['context']} → {r['derived']}: {verb} {r['communities']} communities "
                f"({r['levels']} level(s), {r['concept_count']} concepts); summaries {r['summaries_generated']} "
                f"generated, {r['summaries_reused']} reused; {r['retracted']} retracted"
                + ("; rebuilt from scratch" if r["rebuilt_from_scratch"] else "")
            )
    return EXIT_OK
