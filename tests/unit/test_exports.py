"""The public names of `hashreplay` and the layering rule of DESIGN.md §10."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import hashreplay

PACKAGE_DIR = Path(hashreplay.__file__).resolve().parent
FORBIDDEN = ("httpx", "httpx2", "aiohttp", "requests", "pytest", "hashreplay.adapters")
# Adapters and front ends (DESIGN.md §10) may import clients and adapters; nothing else may.
NOT_CORE = (
    "adapters",
    "plugin.py",
    "cli",
    "asgi.py",
    "wsgi.py",
    "server",
    "__init__.py",  # the front door: checked by test_front_door_imports_no_client
)


def isort_key(name: str) -> tuple[int, str]:
    """ruff's RUF022 order: SCREAMING_CASE, then CamelCase, then everything else."""
    if name.isupper() and len(name) > 1:
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


def test_all_is_sorted() -> None:
    assert hashreplay.__all__ == sorted(hashreplay.__all__, key=isort_key)
    assert len(set(hashreplay.__all__)) == len(hashreplay.__all__)


@pytest.mark.parametrize("name", hashreplay.__all__)
def test_every_exported_name_exists(name: str) -> None:
    assert getattr(hashreplay, name) is not None


def test_contract_names_exported() -> None:
    for name in ("Mode", "Session", "Store", "Redactor", "request_hash", "load_config"):
        assert name in hashreplay.__all__


def core_modules() -> list[Path]:
    modules = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        relative = path.relative_to(PACKAGE_DIR)
        if relative.parts[0] in NOT_CORE:
            continue
        modules.append(path)
    return modules


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


def forbidden_imports(path: Path) -> list[str]:
    package = ["hashreplay", *path.relative_to(PACKAGE_DIR).parent.parts]
    names = imported_modules(path.read_text(encoding="utf-8"), package)
    return [n for n in names if any(n == f or n.startswith(f + ".") for f in FORBIDDEN)]


def test_core_modules_found() -> None:
    names = {p.name for p in core_modules()}
    assert {"config.py", "normalise.py", "store.py", "session.py"} <= names
    assert "plugin.py" not in names
    assert "_cli.py" not in names


def test_import_checker_sees_every_form() -> None:
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
    assert "hashreplay._store" in imported_modules("from ._store import Store", ["hashreplay"])
    assert "hashreplay.x" in imported_modules("from ..x import y", ["hashreplay", "sub"])


@pytest.mark.parametrize("path", core_modules(), ids=lambda p: p.name)
def test_core_imports_no_client_or_front_end(path: Path) -> None:
    bad = forbidden_imports(path)
    assert bad == [], f"{path.name} imports {bad} (DESIGN.md §10: imports point down only)"


def test_front_door_imports_no_client() -> None:
    """`hashreplay/__init__.py` re-exports adapter APIs (record_callable, install), but never
    imports an HTTP client or pytest itself: `import hashreplay` stays light."""
    init = PACKAGE_DIR / "__init__.py"
    bad = [m for m in forbidden_imports(init) if not m.startswith("hashreplay.adapters")]
    assert bad == []
