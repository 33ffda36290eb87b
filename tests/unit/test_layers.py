"""The layering of docs/design.md ("Layers"), checked on the source: imports point down only,
core and engine import no HTTP client and no pytest, and there is no import cycle, lazy and
type-checking-only imports included. Nothing here limits a module's or a class's size or the
number of modules: a module holds one concept, whatever its length.

core (rank 0) < engine, with its maintenance tools (1) < adapters (2) < front ends (3): the
plugin, the CLI, the proxy server, `install()`, the middleware and the package's front door.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import hashreplay

PACKAGE_DIR = Path(hashreplay.__file__).resolve().parent
CLIENTS = ("httpx", "httpx2", "aiohttp", "requests", "urllib3", "botocore", "pytest", "uvicorn")
LAYERS = {"core": 0, "engine": 1, "adapters": 2}
FRONT = 3
LAYER_NAMES = {0: "core", 1: "engine", 2: "adapters", 3: "front ends"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["hashreplay", *parts])


MODULES = {module_name(p): p for p in sorted(PACKAGE_DIR.rglob("*.py"))}


def rank(module: str) -> int:
    parts = module.split(".")
    if len(parts) < 2:
        return FRONT  # the front door
    return LAYERS.get(parts[1], FRONT)


def imported_modules(source: str, package: list[str]) -> list[str]:
    """Every module an import statement names, absolute (relative imports resolved).

    Walks the whole tree, so imports under `if TYPE_CHECKING:` and inside functions count.
    """
    tree = ast.parse(source)
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            names.append(module)
            names.extend(f"{module}.{alias.name}" for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "__import__"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names.append(str(node.args[0].value))
    return names


def own_imports(module: str) -> set[str]:
    """The hashreplay modules `module` imports (names that are not modules dropped)."""
    path = MODULES[module]
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    names = {n for n in imported_modules(path.read_text(encoding="utf-8"), package) if n in MODULES}
    # `from pkg import submodule` names the submodule; the package itself is only the way
    # there (as it is for every `import pkg.sub`), not an import of its own
    parents = {n for n in names if any(o.startswith(n + ".") for o in names)}
    return names - parents - {module}


def test_checker_sees_every_form() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import adapters\n"
        "from .adapters.httpx import Transport\n"
        "import requests.sessions\n"
        "if TYPE_CHECKING:\n"
        "    import httpx2\n"
        "def f():\n"
        "    import aiohttp\n"
        "    return __import__('pytest')\n"
    )
    names = imported_modules(source, ["hashreplay"])
    for expected in (
        "hashreplay.adapters",
        "hashreplay.adapters.httpx",
        "requests.sessions",
        "httpx2",
        "aiohttp",
        "pytest",
    ):
        assert expected in names
    assert "hashreplay.x" in imported_modules("from ..x import y", ["hashreplay", "sub"])


def test_the_layers_are_populated() -> None:
    ranks = {rank(m) for m in MODULES}
    assert ranks == {0, 1, 2, 3}
    assert rank("hashreplay.core.store") == 0
    assert rank("hashreplay.engine.session") == 1
    assert rank("hashreplay.adapters.httpx") == 2
    assert rank("hashreplay.plugin") == FRONT
    assert rank("hashreplay") == FRONT


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module: str) -> None:
    up = sorted(m for m in own_imports(module) if rank(m) > rank(module))
    assert up == [], (
        f"{module} ({LAYER_NAMES[rank(module)]}) imports {up} from a higher layer "
        "(docs/design.md, Layers: imports point down only)"
    )


@pytest.mark.parametrize("module", sorted(m for m in MODULES if rank(m) < 2))
def test_core_and_engine_import_no_client_or_pytest(module: str) -> None:
    path = MODULES[module]
    names = imported_modules(path.read_text(encoding="utf-8"), module.split("."))
    bad = [n for n in names if any(n == c or n.startswith(c + ".") for c in CLIENTS)]
    assert bad == [], f"{module} imports {bad}: core and engine never import a client or pytest"


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path `a -> b -> … -> a`, or None."""
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(graph, white)
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        color[node] = grey
        stack.append(node)
        for nxt in sorted(graph[node]):
            if color[nxt] == grey:
                return [*stack[stack.index(nxt) :], nxt]
            if color[nxt] == white:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        color[node] = black
        return None

    for node in sorted(graph):
        if color[node] == white:
            found = visit(node)
            if found:
                return found
    return None


def test_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles() -> None:
    graph = {m: own_imports(m) for m in MODULES}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])
