"""The shape of the code: one-way layers, no cycles and pipelines apart (import-linter's contracts in
pyproject.toml), no private name imported across modules, no module over 400 lines, no folder of over 15
modules."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

PACKAGES = ("conf", "storage", "models", "tasks", "demo", "flows", "augdag")
MAX_LINES = 400
MAX_MODULES = 15  # directly in one folder (its __init__.py included): more is a package waiting to be split


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py") if "__pycache__" not in p.parts)


def test_lint_imports_keeps_every_contract():
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 7 kept, 0 broken." in done.stdout


def test_no_private_name_is_imported_from_another_module():
    found = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
                found += [
                    f"{path.relative_to(REPO)}:{node.lineno}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert found == []


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(REPO)): n for p in _modules() if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


def test_no_folder_holds_more_than_15_modules():
    per_folder: dict[str, int] = {}
    for path in _modules():
        folder = str(path.parent.relative_to(REPO))
        per_folder[folder] = per_folder.get(folder, 0) + 1
    assert {folder: n for folder, n in per_folder.items() if n > MAX_MODULES} == {}


def test_every_public_function_of_flows_and_tasks_says_what_it_does():
    """A public function or method (not a dunder) of flows/ or tasks/ has a docstring (issue 27)."""
    missing = []
    for package in ("flows", "tasks"):
        for path in sorted((REPO / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            scopes = [tree, *(n for n in tree.body if isinstance(n, ast.ClassDef))]
            for scope in scopes:
                for node in scope.body:
                    if (
                        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                        and not node.name.startswith("_")
                        and ast.get_docstring(node) is None
                    ):
                        missing.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}")
    assert missing == []


def test_no_pipeline_or_stage_prints_to_stdout():
    """A flow's lines go to its run logger (``flows.engine.replay.run_logger``), never ``print``: Prefect's
    ``log_prints`` swaps ``builtins.print`` for the whole process while a flow runs and puts back what it found when
    that flow ends, so with two pipelines of a night in threads one's prints could reach the terminal, text and newline
    in two writes between the CLI's lines (the likely cause of the empty line CI's tiny demo printed among them)."""
    homes = ("flows/pipelines", "flows/engine", "flows/reports", "tasks", "storage", "models")
    found = [
        f"{path.relative_to(REPO)}:{node.lineno}"
        for path in _modules()
        if str(path.relative_to(REPO)).startswith(homes)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "print"
        and not any(k.arg == "file" for k in node.keywords)
    ]
    assert found == []
