"""The layering rules of the project, checked on the source (function-level imports count)."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "taguru_server"


def package_dirs() -> dict[str, Path]:
    """`taguru_server.<pkg>` -> its folder, as pyproject.toml maps them."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mapping = config["tool"]["setuptools"]["package-dir"]
    return {name: ROOT / folder for name, folder in mapping.items()}


def modules() -> dict[str, Path]:
    """Every project module by dotted name."""
    out: dict[str, Path] = {}
    for package, folder in package_dirs().items():
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


def imported_names(path: Path, module: str) -> Iterator[str]:
    """Every absolute module name an import statement anywhere in the file names."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            yield prefix
            for alias in node.names:
                yield f"{prefix}.{alias.name}"


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        targets = set()
        for imported in imported_names(path, name):
            if imported in mods and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def third_party(path: Path, module: str) -> set[str]:
    return {n.split(".")[0] for n in imported_names(path, module)}


def layer(module: str) -> str:
    return module.split(".")[1]


def test_every_package_folder_is_installed() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = set()
    for package, folder in package_dirs().items():
        for init in folder.rglob("__init__.py"):
            rel = init.parent.relative_to(folder)
            found.add(".".join([package, *rel.parts]))
    assert found == listed


def test_no_import_cycles() -> None:
    graph = import_graph()
    try:
        list(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")


@pytest.mark.parametrize(
    ("lower", "forbidden"),
    [
        ("pipeline", {"stages", "store", "server", "evaluate", "cli", "client"}),
        ("store", {"pipeline", "stages", "server", "evaluate", "cli", "client"}),
        ("stages", {"server", "evaluate", "cli", "client"}),
        ("evaluate", {"server", "cli"}),
        ("client", {"pipeline", "stages", "store", "server", "evaluate", "cli"}),
        ("server", {"cli", "evaluate"}),
    ],
)
def test_layers_import_one_way(lower: str, forbidden: set[str]) -> None:
    offending = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        if layer(module) == lower
        for target in targets
        if layer(target) in forbidden
    )
    assert offending == []


@pytest.mark.parametrize("lower", ["pipeline", "store", "stages"])
def test_lower_layers_know_no_http_server(lower: str) -> None:
    offending = sorted(
        module
        for module, path in modules().items()
        if layer(module) == lower and "aiohttp" in third_party(path, module)
    )
    assert offending == []


@pytest.mark.parametrize("package", sorted({name.split(".")[1] for name in package_dirs()}))
def test_modules_have_one_job_each(package: str) -> None:
    """No module of any package exceeds 600 lines."""
    oversized = {
        module: n
        for module, path in modules().items()
        if layer(module) == package and (n := len(path.read_text().splitlines())) > 600
    }
    assert oversized == {}


ENVIRONMENT_READERS = {"taguru_server.server.variables"}  # the registry and the one read of the environment


def touches_environment(path: Path) -> bool:
    """Whether a module names `os.environ`, `os.getenv`, `environ`/`getenv` imported from os, or `environ.get`."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            if any(alias.name in ("environ", "getenv", "environb", "putenv", "unsetenv") for alias in node.names):
                return True
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "os" and node.attr in ("environ", "getenv", "environb", "putenv", "unsetenv"):
                return True
            if node.value.id == "environ" and node.attr == "get":
                return True
    return False


def test_the_environment_is_read_in_at_most_two_modules() -> None:
    readers = {name for name, path in modules().items() if touches_environment(path)}
    assert len(readers) <= 2, f"the environment is read in {sorted(readers)}"
    assert readers <= ENVIRONMENT_READERS, (
        f"read settings through taguru_server.server.variables (its registry), not os.environ: "
        f"{sorted(readers - ENVIRONMENT_READERS)}"
    )


def test_no_one_letter_import_aliases() -> None:
    """`import … as S` hides what a name is at every use; a module is named, or aliased meaningfully."""
    sources = [*modules().values(), *sorted((ROOT / "tests").glob("*.py"))]
    short = [
        f"{path.relative_to(ROOT)}:{node.lineno} as {alias.asname}"
        for path in sources
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
        if alias.asname is not None and len(alias.asname) == 1
    ]
    assert short == []


def test_no_module_cites_sections_of_a_spec_a_clone_lacks() -> None:
    """A reference names a docs/ page of this project; a bare `§` points into a spec a clone has not got."""
    citing = [str(path.relative_to(ROOT)) for path in modules().values() if "§" in path.read_text()]
    assert citing == []


# The store's sub-packages, bottom up: each may import the store's shared root modules (errors,
# json_depth, text, wire: what every sub-package uses) and the sub-packages listed with it, never
# another. The root modules import no sub-package.
STORE_SHARED = "shared"
STORE_LAYERS: dict[str, set[str]] = {
    STORE_SHARED: set(),
    "index": {STORE_SHARED},  # BM25, its snapshot file, the lexicon, index files, vectors
    "model": {STORE_SHARED, "index"},  # a context holds its indexes
    "read": {STORE_SHARED, "index", "model"},  # the read lanes and their diagnostics
    "persist": {STORE_SHARED, "index", "model"},  # rows, backends, registry, writer: never the lanes
    "derive": {STORE_SHARED, "index", "model", "read", "persist"},  # audits, communities, compaction
    "transfer": {STORE_SHARED, "index", "model", "persist"},  # import, export, promote
}


def store_layer(module: str) -> str:
    """The sub-package of a `taguru_server.store` module, or `shared` for a module at the store's root."""
    parts = module.split(".")
    return parts[2] if len(parts) >= 3 and parts[2] in STORE_LAYERS else STORE_SHARED


def test_every_store_sub_package_has_a_layer() -> None:
    folders = {p.parent.name for p in (ROOT / "store").glob("*/__init__.py")}
    assert folders == set(STORE_LAYERS) - {STORE_SHARED}


@pytest.mark.parametrize("sub", sorted(STORE_LAYERS))
def test_store_sub_packages_import_one_way(sub: str) -> None:
    allowed = STORE_LAYERS[sub] | {sub}
    offending = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        if layer(module) == "store" and store_layer(module) == sub
        for target in targets
        if layer(target) == "store" and store_layer(target) not in allowed
    )
    assert offending == []


def test_store_layer_rule_sees_function_level_imports(tmp_path: Path) -> None:
    """A violating import inside a function is found like one at the top of a module."""
    source = tmp_path / "rows.py"
    source.write_text("def load():\n    from taguru_server.store.read.cache import warm\n    return warm\n")
    names = set(imported_names(source, "taguru_server.store.persist.rows"))
    assert "taguru_server.store.read.cache" in names
    assert store_layer("taguru_server.store.read.cache") not in STORE_LAYERS["persist"]


def private_read_names(path: Path, module: str) -> Iterator[str]:
    """Private names of `taguru_server.store.read` modules a file imports or reads as attributes."""
    tree = ast.parse(path.read_text(), str(path))
    aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("taguru_server.store.read"):
            for alias in node.names:
                if alias.name.startswith("_"):
                    yield f"{node.module}.{alias.name}"
                if node.module == "taguru_server.store.read":
                    aliases.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("taguru_server.store.read.") and alias.asname:
                    aliases.add(alias.asname)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            if node.attr.startswith("_"):
                yield f"{module}: {node.value.id}.{node.attr}"


def test_stages_call_only_public_functions_of_the_read_lanes() -> None:
    offending = sorted(
        name
        for module, path in modules().items()
        if layer(module) == "stages"
        for name in private_read_names(path, module)
    )
    assert offending == []


def test_every_test_module_says_what_it_pins() -> None:
    """A test module opens with a docstring saying what it pins, so the suite reads as a specification."""
    tests = Path(__file__).resolve().parent
    missing = [
        path.name
        for path in sorted(tests.rglob("test_*.py"))
        if ast.get_docstring(ast.parse(path.read_text(), str(path))) is None
    ]
    assert missing == []


# The wire shapes (JSON response dicts) are drawn in server/ (server/wire/render, server/errors.py) and,
# where the evidence package shares them, in stages/render.py; the store returns typed results. A
# persisted format is the store's own and may be a dict: it is listed here with what it is.
STORE_DICT_RESULTS_ALLOWED = {
    "taguru_server.store.derive.communities.load_manifest",  # the communities artifact's stored manifest
    # the cross-process change log's rows (what each write touched), as stored in the database
    "taguru_server.store.persist.catch_up._by_context",
    "taguru_server.store.persist.persistence.Persistence.changes_after",
    "taguru_server.store.persist.rows.RowStore.changes_after",
    "taguru_server.store.index.index_file.read_arrays",  # an index file's stored header
    "taguru_server.store.index.index_file._checked",  # the same header, once the mapped file is checked
    "taguru_server.store.read.activation_image._expected",  # the activation image's stored header
    "taguru_server.store.read.activation_image._unchanged",  # the edge image's identity (its stored header)
    "taguru_server.store.model.passage.Passage.meta_json",  # a passage's stored markers (its row's JSON)
    "taguru_server.store.model.schema.Schema.document",  # a schema document, as stored and exported
    "taguru_server.store.transfer.import_records.decode_line",  # one parsed line of an import stream (input)
}


Function = ast.FunctionDef | ast.AsyncFunctionDef


def functions_of(path: Path, module: str) -> Iterator[tuple[str, Function]]:
    """(qualified name, node) of every module-level function and every method of a class in the file."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield f"{module}.{node.name}.{item.name}", item
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f"{module}.{node.name}", node


def returns_json_dict(node: Function) -> bool:
    """Whether a function is annotated to return a JSON dict, alone or inside a list, tuple or union."""
    return node.returns is not None and "dict[str, Any]" in ast.unparse(node.returns)


def store_functions(subs: set[str]) -> Iterator[tuple[str, Function]]:
    """(qualified name, node) of every function and method in the store's sub-packages `subs` (empty: all)."""
    for module, path in modules().items():
        if layer(module) == "store" and (not subs or store_layer(module) in subs):
            yield from functions_of(path, module)


def test_the_store_renders_no_wire_records() -> None:
    """No `to_wire` in the store: a typed result is rendered by its reader, not by itself."""
    offending = sorted(name for name, node in store_functions(set()) if node.name == "to_wire")
    assert offending == []


def test_the_store_returns_typed_results() -> None:
    """No function of the store is annotated to return a JSON dict (or a list of them), but for the
    persisted formats listed."""
    offending = sorted(
        name
        for name, node in store_functions(set())
        if returns_json_dict(node) and name not in STORE_DICT_RESULTS_ALLOWED
    )
    assert offending == []


def test_the_wire_record_rule_sees_methods(tmp_path: Path) -> None:
    """A method annotated to return a JSON dict is found like a module-level function."""
    source = tmp_path / "hits.py"
    source.write_text(
        "class Hit:\n    def to_wire(self) -> dict[str, Any]:\n        return {}\n\n\n"
        "def page() -> list[dict[str, Any]]:\n    return []\n\n\ndef count() -> int:\n    return 0\n"
    )
    found = {name: returns_json_dict(node) for name, node in functions_of(source, "m")}
    assert found == {"m.Hit.to_wire": True, "m.page": True, "m.count": False}
