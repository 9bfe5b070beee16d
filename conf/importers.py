"""Bring your configs: an OpusFilter configuration's filters as ``ingest.clean`` keys, an OpusTrainer curriculum's
modifiers as a ``robustness`` section (`augdag import opusfilter|opustrainer FILE.yaml`; both only read).

OpusFilter (``steps:``, each ``{type, parameters}``): a ``filter`` step's filters map one by one to the filters of
conf/sections/filters.py, which keep OpusFilter's names and defaults (``FILTER_KEYS``), ``LengthRatioFilter`` to
``max_ratio`` (whitespace tokens) and a ``remove_duplicates`` step to ``dedup``. A filter maps whole or not at all:
a parameter augdag has no counterpart for (a per-side value that differs, ``unit: char`` of a ratio, a language
identifier other than langid or lingua, ``pass_empty: true``...) leaves the filter out with one line saying why,
as does every step of another type. OpusFilter's ``!var``/``!varstr`` values (a step looped over variables) are
read as placeholders: a language given by one is left to each dataset's ``src_lang``/``tgt_lang``.

OpusTrainer (``modifiers:`` at the top, or per stage): the list as it is; the CLI checks each entry against
tasks/robustness/spec.py (conf/ imports nothing of ours outside conf/). A stage's own list is reported, not mapped:
augdag applies one list to the bitext.

A file that is not YAML, or not such a configuration, is one ``ConfError`` naming the file and line.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from conf.errors import ConfError
from conf.sections.cleaning import CleanConf

# OpusFilter's filter class -> the ingest.clean key it maps to (conf/sections/filters.py keeps their parameters)
FILTER_KEYS = {
    "LengthFilter": "length",
    "LengthRatioFilter": "max_ratio",
    "LongWordFilter": "long_word",
    "AlphabetRatioFilter": "alphabet_ratio",
    "CharacterScoreFilter": "character_score",
    "HtmlTagFilter": "html_tags",
    "TerminalPunctuationFilter": "terminal_punctuation",
    "NonZeroNumeralsFilter": "non_zero_numerals",
    "RepetitionFilter": "repetition",
    "LanguageIDFilter": "language_id",
    "LangidFilter": "language_id",
    "LinguaFilter": "language_id",
}
IDENTIFIERS = {"langid": "py3langid", "lingua": "lingua"}


@dataclasses.dataclass(frozen=True)
class Var:
    """An OpusFilter variable (``!var lang``): its value differs per looped step."""

    tag: str
    name: str


class Unmapped(Exception):
    """A filter or step with no counterpart: the message says why."""


@dataclasses.dataclass
class Imported:
    """What an import found: the fragment's keys (key -> value), where each came from, and the lines not mapped."""

    keys: dict[str, Any] = dataclasses.field(default_factory=dict)
    origin: dict[str, str] = dataclasses.field(default_factory=dict)  # key -> "line N, <filter>"
    notes: list[str] = dataclasses.field(default_factory=list)  # mapped, with a difference worth knowing
    unmapped: list[str] = dataclasses.field(default_factory=list)


def read_nodes(path: Path) -> yaml.Node:
    """The YAML node tree of ``path`` (tags such as ``!var`` kept, nothing constructed); a ConfError naming the line."""
    try:
        root = yaml.compose(Path(path).read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfError(f"{where}: not valid YAML: {e.problem or e.context}") from None
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as e:
        raise ConfError(f"{path}: cannot be read as YAML: {getattr(e, 'strerror', None) or e}") from None
    if not isinstance(root, yaml.MappingNode):
        raise ConfError(f"{path}:1: expected a mapping at the top of the file")
    return root


def plain(node: yaml.Node) -> Any:
    """A node as Python values; a scalar with a local tag (``!var x``) as a ``Var``."""
    if isinstance(node, yaml.MappingNode):
        return {plain(k): plain(v) for k, v in node.value}
    if isinstance(node, yaml.SequenceNode):
        return [plain(v) for v in node.value]
    if node.tag.startswith("!") and not node.tag.startswith("!!"):
        return Var(node.tag, str(node.value))
    return yaml.constructor.SafeConstructor().construct_object(node)


def key_node(mapping: yaml.Node, key: str) -> yaml.Node | None:
    """The value node of ``key`` in a mapping node, None when absent."""
    if isinstance(mapping, yaml.MappingNode):
        for k, v in mapping.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                return v
    return None


def line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def one(params: dict[str, Any], key: str, default: Any) -> Any:
    """``params[key]`` as one value for both sides: a list of equal values is that value; differing ones, or a
    variable, cannot map."""
    value = params.get(key, default)
    if isinstance(value, list):
        if any(isinstance(v, Var) for v in value) or len({repr(v) for v in value}) > 1:
            raise Unmapped(f"{key} per side is {value}: augdag's filter takes one value for both sides")
        return value[0] if value else default
    if isinstance(value, Var):
        raise Unmapped(f"{key} is a variable ({value.tag} {value.name}): augdag's filter takes one value")
    return value


def unit(params: dict[str, Any]) -> str:
    u = one(params, "unit", "word")
    return "char" if u in ("char", "character") else str(u)


def check_known(name: str, params: dict[str, Any], known: set[str]) -> None:
    if extra := sorted(set(params) - known - {"name"}):
        raise Unmapped(f"{', '.join(extra)}: not a parameter augdag's counterpart has")


def map_language_id(name: str, params: dict[str, Any], imported: Imported, where: str) -> dict[str, Any]:
    """LanguageIDFilter / LangidFilter / LinguaFilter as ``language_id``."""
    known = {"languages", "thresholds", "langid_languages", "lingua_mode", "id_method"}
    check_known(name, params, known)
    method = {"LangidFilter": "langid", "LinguaFilter": "lingua"}.get(name, params.get("id_method", "langid"))
    if method not in IDENTIFIERS:
        raise Unmapped(f"id_method {method}: augdag identifies languages with langid (py3langid) or lingua only")
    threshold = one(params, "thresholds", 0.0)
    if threshold < 0:
        raise Unmapped(f"thresholds {threshold}: a negative threshold skips a language; augdag's threshold is in [0, 1]")
    out: dict[str, Any] = {"identifier": IDENTIFIERS[method], "threshold": threshold}
    languages = params.get("languages")
    if isinstance(languages, list) and not any(isinstance(v, Var) for v in languages):
        out["languages"] = languages
    elif languages is not None:
        imported.notes.append(f"{where}: languages {shown(languages)} vary per step: each bitext's src_lang/tgt_lang names them")
    candidates = params.get("langid_languages")
    out["langid_languages"] = "all" if candidates is None else candidates  # OpusFilter's default: every language
    if method == "lingua":
        out["lingua_mode"] = params.get("lingua_mode", "low")
    return out


def shown(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    return f"{value.tag} {value.name}" if isinstance(value, Var) else str(value)


def map_filter(name: str, params: dict[str, Any], imported: Imported, where: str) -> tuple[str, Any]:
    """One OpusFilter filter as (ingest.clean key, value); ``Unmapped`` with why."""
    if name not in FILTER_KEYS:
        raise Unmapped("no counterpart among augdag's filters (conf/sections/filters.py)")
    key, p = FILTER_KEYS[name], params
    if key == "length":
        check_known(name, p, {"min_length", "max_length", "unit", "pass_empty"})
        if p.get("pass_empty"):
            raise Unmapped("pass_empty: true keeps a pair of empty sides; augdag's length drops it")
        return key, {"min_length": one(p, "min_length", 1), "max_length": one(p, "max_length", 100), "unit": unit(p)}
    if key == "max_ratio":
        check_known(name, p, {"threshold", "unit"})
        if unit(p) != "word":
            raise Unmapped("unit: char; augdag's max_ratio counts whitespace tokens")
        imported.notes.append(f"{where}: OpusFilter keeps a ratio < {p.get('threshold')}, augdag <= max_ratio")
        return key, p.get("threshold")
    if key == "long_word":
        check_known(name, p, {"threshold"})
        return key, {"threshold": one(p, "threshold", 40)}
    if key == "alphabet_ratio":
        check_known(name, p, {"threshold", "exclude_whitespace"})
        return key, {"threshold": one(p, "threshold", 0.75), "exclude_whitespace": bool(p.get("exclude_whitespace", False))}
    if key == "character_score":
        check_known(name, p, {"scripts", "thresholds"})
        scripts = p.get("scripts")
        if isinstance(scripts, Var) or (isinstance(scripts, list) and any(isinstance(s, Var) for s in scripts)):
            raise Unmapped(f"scripts {shown(scripts)} vary per step: give them per dataset")
        return key, {"threshold": one(p, "thresholds", 1.0), **({"scripts": scripts} if scripts else {})}
    if key == "html_tags":
        check_known(name, p, set())
        return key, {}
    if key == "terminal_punctuation":
        check_known(name, p, {"threshold"})
        return key, {"threshold": p.get("threshold", -2.0)}
    if key == "non_zero_numerals":
        check_known(name, p, {"threshold", "require_all"})  # one pair of sides: one ratio, require_all moot
        return key, {"threshold": p.get("threshold", 0.5)}
    if key == "repetition":
        check_known(name, p, {"threshold", "min_length", "max_length"})
        values = {k: p.get(k, d) for k, d in (("threshold", 2), ("min_length", 3), ("max_length", 100))}
        return key, {**values, "unit": "char"}
    return key, map_language_id(name, p, imported, where)


def map_duplicates(params: dict[str, Any]) -> tuple[str, Any]:
    """A ``remove_duplicates`` step as ``dedup: true`` (exact duplicates of the pair, the first kept)."""
    if params.get("overlap"):
        raise Unmapped(
            "overlap removes the lines of named files; augdag's decontaminate compares with the profile's held-out "
            "sets: hold the set out (e.g. train_nmt.tests) and set ingest.clean.decontaminate: {threshold: 1.0}"
        )
    for k, default in (("letters_only", False), ("letter_words_only", False), ("lowercase", False)):
        if params.get(k, default):
            raise Unmapped(f"{k}: true; augdag's dedup compares the rows as they are")
    if params.get("compare", "all") != "all":
        raise Unmapped(f"compare {params['compare']}: augdag's dedup compares the whole row")
    return "dedup", True


def add(imported: Imported, key: str, value: Any, where: str) -> None:
    """``key: value`` into the fragment, checked by CleanConf; a clash with an earlier step, or a value augdag
    refuses, is a line of ``unmapped``."""
    if key in imported.keys and imported.keys[key] != value:
        imported.unmapped.append(f"{where}: ingest.clean.{key} is already {imported.keys[key]!r} from {imported.origin[key]}")
        return
    try:
        CleanConf.model_validate({key: value})
    except ValidationError as e:
        problem = e.errors()[0]
        imported.unmapped.append(f"{where}: ingest.clean.{key} = {value!r}: {problem['msg']}")
        return
    imported.keys[key], imported.origin[key] = value, where


def import_opusfilter(path: Path) -> Imported:
    """The ``ingest.clean`` keys of OpusFilter configuration ``path`` (see the module docstring)."""
    root, imported = read_nodes(path), Imported()
    steps = key_node(root, "steps")
    if not isinstance(steps, yaml.SequenceNode):
        raise ConfError(f"{path}:{line(steps or root)}: expected `steps:`, a list (an OpusFilter configuration)")
    for i, step in enumerate(steps.value):
        data = plain(step)
        kind = data.get("type") if isinstance(data, dict) else None
        here = f"{path}:{line(step)}: steps[{i}] ({kind})"
        params_node = key_node(step, "parameters")
        params = plain(params_node) if params_node is not None else {}
        if kind == "remove_duplicates":
            try:
                add(imported, *map_duplicates(params), here)
            except Unmapped as e:
                imported.unmapped.append(f"{here}: {e}")
            continue
        if kind != "filter":
            imported.unmapped.append(f"{here}: not a filter step; augdag's ingest.clean has no counterpart")
            continue
        if params.get("filterfalse"):
            imported.unmapped.append(f"{here}: filterfalse keeps the rejected pairs; augdag's filters keep the accepted")
            continue
        filters = key_node(params_node, "filters")
        for f in filters.value if isinstance(filters, yaml.SequenceNode) else []:
            entry = plain(f)
            name = next(iter(entry), "?") if isinstance(entry, dict) else "?"
            where = f"{path}:{line(f)}: {name}"
            try:
                if not isinstance(entry, dict) or "module" in entry:
                    raise Unmapped("a custom filter (module:); augdag runs its own filters only")
                add(imported, *map_filter(name, entry.get(name) or {}, imported, where), where)
            except Unmapped as e:
                imported.unmapped.append(f"{where}: {e}")
    return imported


@dataclasses.dataclass(frozen=True)
class Modifiers:
    """An OpusTrainer curriculum's modifiers: the top-level list with each entry's line, its seed, the stages' own."""

    entries: list[tuple[int, Any]]
    seed: int | None
    stage_lists: list[str]  # one line per stage with its own list (not mapped)


def read_opustrainer(path: Path) -> Modifiers:
    """The modifiers of OpusTrainer curriculum ``path``, with their lines."""
    root = read_nodes(path)
    doc = plain(root)
    if "datasets" not in doc and "modifiers" not in doc:
        raise ConfError(f"{path}:1: expected an OpusTrainer curriculum (datasets:, stages:, modifiers:)")
    node = key_node(root, "modifiers")
    if node is not None and not isinstance(node, yaml.SequenceNode):
        raise ConfError(f"{path}:{line(node)}: modifiers: expected a list such as [{{UpperCase: 0.05}}]")
    entries = [(line(n), plain(n)) for n in (node.value if node is not None else [])]
    stage_lists = []
    for stage in doc.get("stages") or []:
        own = key_node(key_node(root, str(stage)), "modifiers")
        if own is not None:
            stage_lists.append(
                f"{path}:{line(own)}: stage {stage}: its own modifiers apply during that stage only; augdag's robustness "
                "section is one list for the whole bitext: not mapped"
            )
    seed = doc.get("seed")
    return Modifiers(entries, seed if isinstance(seed, int) else None, stage_lists)
