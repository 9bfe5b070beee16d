"""Reads a YAML profile into the typed ``AugdagConf``: ``${VAR}`` interpolation, ``--set`` overrides, line numbers.

The one place YAML is read. Order: find the profile (a file path, else a packaged ``conf/<name>.yaml``),
compose it keeping the line of every key, interpolate ``${VAR}`` / ``${VAR:-default}`` / ``$$`` in string
scalars, apply ``--set a.b=c`` (values parsed as YAML), validate, then resolve the cache root
(``--cache`` > ``AUGDAG_CACHE`` > the profile's ``cache:`` > ``.augdag``) and the dataset paths. Every
problem is a ``ConfError`` whose lines start with the place: ``<file>:<line>: <dotted.key>: ...`` or
``--set <key>=<value>: ...``.

Where a relative path points. A run started by a schedule or a worker has no meaningful working
directory, so a relative dataset path written in a profile file resolves against that file's directory,
and in a packaged profile (``conf/<name>.yaml``, inside the installed code) against the cache root: the
demo data of ``conf/demo.yaml`` is ``<cache>/demo-data`` unless ``AUGDAG_DEMO_DATA`` says otherwise, the
corpora of ``conf/nightly.yaml`` ``<cache>/data`` unless ``AUGDAG_DATA`` does. A ``--set`` value is
taken as given, relative to the working directory (`augdag serve` and `augdag deploy` record such a
dataset path made absolute), and so are the cache root (``--cache``, ``AUGDAG_CACHE``, ``cache:``;
the deployments record it absolute) and model names, which may be Hugging Face names.
"""

from __future__ import annotations

import copy
import difflib
import os
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from pydantic import BaseModel, ValidationError

from conf.at_rest import at_rest, note_keys, note_value
from conf.errors import ConfError, InputError
from conf.pipelines import check_enabled
from conf.schema import AugdagConf, resolve_cache
from conf.sections.storage import artifacts_store

PROFILES_DIR = Path(__file__).parent
_VAR = re.compile(r"\$(?:\$|\{([^}]*)\})")  # $$, or ${...} whose inside _interpolate checks
_VAR_SPLIT = re.compile(r"\$(?:\$|\{[^}]*\})")  # _VAR without its group, for re.split
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEY = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")
_KEYED = re.compile(r"([A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*): (.*)", re.S)  # "a.b.c: message"
_INTERNAL_LOC = re.compile(r"[\w-]*\[.*\]")  # pydantic's own loc parts: '[key]', 'function-after[...]'


class SetItem(NamedTuple):
    """One ``--set`` override: the dotted key, its value parsed as YAML, and the text as given."""

    key: str
    value: Any
    text: str


def available_profiles() -> list[str]:
    """The names of the packaged profiles, ``conf/<name>.yaml``."""
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def parse_sets(sets: Sequence[str]) -> list[SetItem]:
    """Parses ``["a.b=3", "c=[x, y]"]``: the key is dotted, the value a YAML scalar or flow value."""
    items = []
    for text in sets:
        key, eq, raw = text.partition("=")
        if not eq or not _KEY.fullmatch(key.strip()):
            raise ConfError(f"--set {text!r}: expected KEY=VALUE with a dotted KEY, e.g. ingest.clean.max_ratio=2")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            raise ConfError(f"--set {text}: the value is not valid YAML: {getattr(e, 'problem', e)}") from None
        items.append(SetItem(key.strip(), value, text))
    return items


def load_profile(
    profile: str | Path,
    sets: Sequence[str] = (),
    *,
    cache: Path | None = None,
    environ: Mapping[str, str] | None = None,
    pipeline: str | None = None,
) -> AugdagConf:
    """Loads, interpolates, overrides and validates a profile; ``cache`` is the CLI's ``--cache``;
    ``pipeline`` (`augdag run NAME`) is checked like an entry of ``pipelines:`` even where it is not one."""
    environ = os.environ if environ is None else environ
    path = _find_profile(profile)
    doc, lines, from_env = _read_yaml(path, environ)
    written = _dataset_paths(doc)  # before --set: only what the file says resolves against its base
    items = parse_sets(sets)
    conf = _validate(doc, items, path, lines)
    if pipeline is not None and pipeline not in conf.pipelines:
        try:
            check_enabled([pipeline], conf)
        except ValueError as e:
            origins = {item.key: f"--set {item.text}" for item in items}
            raise ConfError(
                _describe({"loc": (), "type": "value_error", "msg": str(e), "input": {}}, path, lines, origins)
            ) from None
    root = resolve_cache(conf.cache if "cache" in doc else None, cache, environ)
    base = root.absolute() if is_packaged(path) else path.parent.absolute()
    datasets = {
        name: ds.resolved(base, [f for f, p in ds.paths().items() if written.get((name, f)) == p])
        for name, ds in conf.datasets.items()
    }
    try:
        storage = conf.storage.model_copy(update={"artifacts": artifacts_store(conf.storage, environ)})
    except ValueError as e:  # $AUGDAG_ARTIFACTS (the profile's value was validated with the file's line)
        raise ConfError(str(e)) from None
    conf = conf.model_copy(update={"cache": root, "datasets": datasets, "storage": storage})
    relative = {f"datasets.{n}.{f}" for (n, f), p in written.items() if not p.is_absolute() and "://" not in str(p)}
    for key in relative & from_env.keys():  # resolved against the base: at rest, the base joins the written form
        from_env[key] = f"{base}/{from_env[key]}"
    _note_from_env(conf, from_env, items)
    return conf


def load_recorded(
    config: Mapping[str, Any],
    sets: Sequence[str] = (),
    *,
    run_id: str | None = None,
    cache: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> AugdagConf:
    """The configuration a run recorded in the catalog (`augdag retry`), or one handed to the nightly flow,
    with ``--set`` overrides, over ``cache`` (default: the cache it names). It is stored as ``dump_conf`` writes
    it: its ``${VAR}`` are resolved from ``environ`` (this process's environment), ``$$`` is ``$``."""
    where = f"<configuration of run {run_id}>" if run_id else "<configuration given to the flow>"
    ctx = _Ctx(Path(where), os.environ if environ is None else environ, yaml.constructor.SafeConstructor(), {}, [0])
    doc = _interpolate_data(copy.deepcopy(dict(config)), "", ctx)  # stored at rest: ${VAR} resolved here and now
    items = parse_sets(sets)
    conf = _validate(doc, items, Path(where), {})
    conf = conf.model_copy(update={"cache": Path(cache) if cache is not None else conf.cache})
    _note_from_env(conf, ctx.from_env, items)
    return conf


def _interpolate_data(value: Any, key: str, ctx: _Ctx) -> Any:
    """``${VAR}`` and ``$$`` resolved in every string of plain data (a configuration recorded by ``dump_conf``)."""
    if isinstance(value, dict):
        return {k: _interpolate_data(v, f"{key}.{k}" if key else str(k), ctx) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate_data(v, f"{key}.{i}", ctx) for i, v in enumerate(value)]
    return _interpolate(value, key, None, ctx) if isinstance(value, str) else value


def _note_from_env(conf: AugdagConf, from_env: Mapping[str, str], items: Sequence[SetItem]) -> None:
    """``dump_conf`` stores the written form of each key whose value came from the environment (no ``--set``'s)."""
    note_keys(conf.model_dump(mode="json"), from_env, [item.key for item in items])


def profile_path(profile: str | Path) -> Path:
    """The file a profile name or path stands for (``ConfError`` when there is none)."""
    return _find_profile(profile)


def is_packaged(path: Path) -> bool:
    """Whether ``path`` is a packaged profile, ``conf/<name>.yaml``."""
    return Path(path).absolute().parent == PROFILES_DIR.absolute()


def check_inputs(conf: AugdagConf) -> None:
    """``InputError`` (one line) naming the first dataset whose file or directory is missing, of the wrong
    kind or unreadable: ``datasets.<key>: <path>: no such file``. Called before a run starts any stage."""
    missing = [
        (name, p, problem)
        for name, ds in conf.datasets.items()
        for p in ds.files()
        if isinstance(p, Path)  # an object-store URI: its read says if it is missing (storage/readers/common.py)
        and (problem := _input_problem(p, directory=ds.format == "hf"))
    ]
    if missing:
        name, p, problem = missing[0]
        what = "missing" if all(m[2].startswith("no such") for m in missing[1:]) else "missing or unreadable"
        more = f" (and {len(missing) - 1} more {what})" if len(missing) > 1 else ""
        raise InputError(f"datasets.{name}: {p}: {problem}{more}")


def _input_problem(path: Path, *, directory: bool) -> str | None:
    """Why ``path`` cannot be read as an input file (``directory``: a saved HF dataset's directory), or None."""
    if not path.exists():
        return f"no such {'directory' if directory else 'file'}"
    if path.is_dir() != directory:
        return (
            "is a file; expected the directory of a saved Hugging Face dataset (save_to_disk)"
            if directory
            else "is a directory; expected a file. Hint: name the file inside it"
        )
    try:
        os.listdir(path) if directory else open(path, "rb").close()
    except PermissionError:
        return f"permission denied: it cannot be read. Hint: check its mode and owner (ls -ld {path})"
    return None


def _dataset_paths(doc: Mapping[str, Any]) -> dict[tuple[str, str], Path]:
    """(dataset, field) -> the path as the profile file writes it (interpolated)."""
    datasets = doc.get("datasets")
    if not isinstance(datasets, Mapping):
        return {}
    return {
        (name, f): Path(ds[f])
        for name, ds in datasets.items()
        if isinstance(ds, Mapping)
        for f in ("path", "src", "tgt")
        if isinstance(ds.get(f), str)
    }


def _validate(doc: dict, items: Sequence[SetItem], path: Path, lines: dict[str, int]) -> AugdagConf:
    for item in items:
        _apply_set(doc, item)
    try:
        return AugdagConf.model_validate(doc)
    except ValidationError as e:
        origins = {item.key: f"--set {item.text}" for item in items}
        errors = [_describe(err, path, lines, origins) for err in e.errors(include_url=False)]
        raise ConfError("\n".join(errors)) from None


def dump_conf(conf: AugdagConf) -> dict:
    """The configuration as JSON-ready data, for the run records and a flow's parameters: a value read from the
    environment in its ``${VAR}`` form, every other ``$`` as ``$$`` (conf/at_rest.py), as ``load_recorded`` reads it."""
    return at_rest(conf.model_dump(mode="json"))


def _find_profile(profile: str | Path) -> Path:
    path = Path(profile)
    if path.is_file():
        return path
    bare = path.parent == Path(".") and path.suffix in ("", ".yaml")
    packaged = PROFILES_DIR / f"{path.stem}.yaml"
    if bare and packaged.is_file():
        return packaged
    looked = f"no such profile file, nor a packaged profile {packaged}" if bare else "no such profile file"
    listing = ", ".join(available_profiles()) or "(none)"
    raise ConfError(f"{profile}: {looked}. Hint: give a path to a YAML file or a packaged profile: {listing}")


def _read_yaml(path: Path, environ: Mapping[str, str]) -> tuple[dict, dict[str, int], dict[str, str]]:
    """The document with ``${VAR}`` interpolated, the 1-based line of every dotted key, and the text as written of
    every key whose value came from the environment."""
    try:
        root = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        context = f" ({e.context} at line {e.context_mark.line + 1})" if e.context and e.context_mark else ""
        raise ConfError(f"{path}:{mark.line + 1}: YAML syntax error: {e.problem}{context}") from None
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as e:
        raise ConfError(f"{path}: cannot read the profile: {e}") from None
    if root is None:
        return {}, {}, {}
    if not isinstance(root, yaml.MappingNode):
        raise ConfError(f"{path}:{root.start_mark.line + 1}: expected a mapping at the top level, found a {root.id}")
    lines = {"": root.start_mark.line + 1}
    ctx = _Ctx(path, environ, yaml.constructor.SafeConstructor(), {}, [0])
    return _build(root, "", lines, ctx), lines, ctx.from_env


class _Ctx(NamedTuple):
    path: Path
    environ: Mapping[str, str]
    constructor: yaml.constructor.SafeConstructor
    from_env: dict[str, str]  # dotted key -> its text as written, where a ${VAR} took the environment's value
    built: list[int]  # values built so far (one counter)


MAX_VALUES = 100_000  # values in a profile after its aliases are expanded (the packaged ones hold under 1,000)
MAX_DEPTH = 64  # nested mappings and sequences


def _build(node: yaml.Node, key: str, lines: dict[str, int], ctx: _Ctx) -> Any:
    """Plain data from a composed node; records the line of each key (and sequence item) in ``lines``. An alias
    repeats its anchor's whole node: a "billion laughs" document is refused once it expands past ``MAX_VALUES``
    values (or ``MAX_DEPTH`` levels: an alias inside its own anchor), before it takes the memory."""
    ctx.built[0] += 1
    if ctx.built[0] > MAX_VALUES or key.count(".") >= MAX_DEPTH:
        what = f"more than {MAX_VALUES:,} values" if ctx.built[0] > MAX_VALUES else f"more than {MAX_DEPTH} levels"
        shown = ".".join(key.split(".")[:4]) + ("..." if key.count(".") >= 4 else "")
        raise ConfError(
            f"{ctx.path}:{node.start_mark.line + 1}: {shown or 'the document'}: its aliases (*name) expand to {what}; "
            "refused (a profile holds a few hundred). Hint: write the repeated settings out, or use fewer aliases"
        )
    if isinstance(node, yaml.MappingNode):
        out = {}
        for key_node, value_node in node.value:
            name = str(key_node.value)
            child, line = f"{key}.{name}" if key else name, key_node.start_mark.line + 1
            if name in out:
                raise ConfError(f"{ctx.path}:{line}: {child}: duplicate key (first at line {lines[child]})")
            lines[child] = line
            out[name] = _build(value_node, child, lines, ctx)
        return out
    if isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[f"{key}.{i}"] = item.start_mark.line + 1
        return [_build(item, f"{key}.{i}", lines, ctx) for i, item in enumerate(node.value)]
    value = ctx.constructor.construct_object(node)
    return _interpolate(value, key, node.start_mark.line + 1, ctx) if isinstance(value, str) else value


def _interpolate(text: str, key: str, line: int | None, ctx: _Ctx) -> str:
    """``${VAR}``, ``${VAR:-default}`` (the default also when VAR is empty, as in sh), ``$$`` → ``$``. Where a
    variable's value is used, the value is noted as one never to store, and ``key``'s form at rest is ``text`` with
    that variable as ``${VAR}`` (a default used is written out: a reader without VAR then fails, never falls back)."""
    where = f"{ctx.path}:{line}" if line is not None else str(ctx.path)
    rest: list[str] = []  # the text at rest, piece by piece

    def substitute(m: re.Match) -> str:
        rest.append("")
        if m.group(0) == "$$":
            rest[-1] = "$$"
            return "$"
        name, sep, default = m.group(1).partition(":-")
        if not _NAME.fullmatch(name):
            raise ConfError(
                f"{where}: {key}: malformed {m.group(0)!r}, expected ${{VAR}} or ${{VAR:-default}} (write $$ for a literal $)"
            )
        if ctx.environ.get(name) or (name in ctx.environ and not sep):
            note_value(name, ctx.environ[name])
            rest[-1] = f"${{{name}}}"
            return ctx.environ[name]
        if sep:
            rest[-1] = default.replace("$", "$$")
            return default
        raise ConfError(f"{where}: {key}: environment variable {name} is not set (use ${{{name}:-default}} for a default)")

    resolved = _VAR.sub(substitute, text)
    if any(r.startswith("${") for r in rest):
        between = _VAR_SPLIT.split(text)  # the literal text around each match
        ctx.from_env[key] = "".join(x for pair in zip(between, [*rest, ""], strict=True) for x in pair)
    return resolved


def _apply_set(doc: dict, item: SetItem) -> None:
    """Sets ``doc[a][b][c] = value`` for ``a.b.c``, creating missing (or null) mappings on the way."""
    *parents, last = item.key.split(".")
    node = doc
    for i, part in enumerate(parents):
        if node.get(part) is None:
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict):
            where = ".".join(parents[: i + 1])
            raise ConfError(f"--set {item.text}: {where} is {node!r}, not a mapping; set {where} as a whole instead")
    node[last] = item.value


def _describe(err: Mapping[str, Any], path: Path, lines: dict[str, int], origins: dict[str, str]) -> str:
    """One line for one pydantic error: place, dotted key, what was expected, what was found."""
    loc = [str(p) for p in err["loc"] if not (isinstance(p, str) and _INTERNAL_LOC.fullmatch(p))]
    if not loc and (m := _KEYED.match(err["msg"].removeprefix("Value error, "))):  # a profile-wide check: its key
        return f"{_place(m[1].split('.'), path, lines, origins)}: {m[0]}"
    if err["type"] == "extra_forbidden":
        model = _model_at(loc[:-1])
        keys = list(model.model_fields) if model else []
        near = difflib.get_close_matches(loc[-1], keys, n=1) if loc else []
        hint = f"did you mean {near[0]!r}? " if near else ""
        what = f"unknown key; {hint}expected one of: {', '.join(keys) or '?'}"
    elif err["type"] == "missing":
        what = "missing required key"
    else:
        what = err["msg"].removeprefix("Value error, ")
        what += "" if isinstance(err["input"], Mapping) else f", found {err['input']!r}"
    return ": ".join([_place(loc, path, lines, origins), *([".".join(loc)] if loc else []), what])


def _place(loc: list[str], path: Path, lines: dict[str, int], origins: dict[str, str]) -> str:
    """``--set k=v`` if it set the key or a parent, else the file line of the key or of its nearest parent."""
    keys = [".".join(loc[:n]) for n in range(len(loc), 0, -1)]
    for key in keys:
        if key in origins:
            return origins[key]
    for key in keys:
        if key in lines:
            return f"{path}:{lines[key]}"
        created_by = [origin for k, origin in origins.items() if k.startswith(key + ".")]
        if created_by:  # a mapping made by --set (e.g. a new dataset) lacks a key
            return created_by[0]
    return f"{path}:{lines.get('', 1)}"


def _model_at(loc: list[str]) -> type[BaseModel] | None:
    """The model class a loc points into, through models, ``dict[str, X]``, ``list[X]`` and ``X | None``."""
    tp: Any = AugdagConf
    for part in loc:
        if isinstance(tp, type) and issubclass(tp, BaseModel) and part in tp.model_fields:
            tp = tp.model_fields[part].annotation
        elif typing.get_origin(tp) in (dict, list):
            tp = typing.get_args(tp)[-1]
        else:
            return None
        if typing.get_origin(tp) in (typing.Union, types.UnionType):
            tp = next((a for a in typing.get_args(tp) if a is not type(None)), tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None
