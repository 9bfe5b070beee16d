"""flows/engine/imports.py: the nightly imports, in one thread, every third-party module stage code imports lazily."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from flows.engine.imports import PACKAGES, STACK

ROOT = Path(__file__).resolve().parents[2]
OWN = {"conf", "flows", "tasks", "models", "storage", "demo"}
LAZY_ATTRIBUTES = {"transformers"}  # packages whose attributes import submodules: each one used is listed


def lazy_imports() -> dict[str, set[str]]:
    """Third-party imports made inside a function of ``PACKAGES``: STACK entry -> the files that make it."""
    found: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for node in ast.walk(fn):
                    if isinstance(node, ast.Import):
                        entries = [a.name for a in node.names]
                    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                        top = node.module.split(".")[0]
                        entries = [f"{node.module}:{a.name}" for a in node.names] if top in LAZY_ATTRIBUTES else [node.module]
                    else:
                        continue
                    for entry in entries:
                        top = entry.split(".")[0].split(":")[0]
                        if top not in OWN and top not in sys.stdlib_module_names:
                            found.setdefault(entry, set()).add(str(path.relative_to(ROOT)))
    return found


def test_the_stack_lists_every_lazy_third_party_import_of_stage_code():
    found = lazy_imports()
    assert {"torch", "safetensors.torch", "transformers:AutoModelForCausalLM", "fairseq.sequence_generator"} <= set(found)
    missing = {entry: sorted(files) for entry, files in found.items() if entry not in STACK}
    assert missing == {}, f"add these to flows/engine/imports.py STACK: {missing}"
