"""`augdag export-arm` (an arm of train_nmt as the files OpusTrainer, Marian, fairseq or Hugging Face read) and
`augdag import opusfilter|opustrainer` (another tool's configuration as a profile fragment, printed, never run).

    augdag export-arm ARM -o DIR --for opustrainer|marian|fairseq|hf [--config PROFILE] [--run RUN]

The rows are the arm's `training_mix` artifacts of one run (storage/handoff/), every part proven against its
manifest; the formats are storage/handoff/formats.py's. The OpusTrainer modifiers are the profile's ``robustness``
list (``--config``, else the profile the run recorded), checked by tasks/robustness/spec.py; ``Tags`` is left out,
with a line saying so: OpusTrainer's reads a word alignment as a third TSV column, which a training mix does not
have (every line would be skipped).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import yaml
from rich.markup import escape

from conf.errors import AugdagError, ConfError
from flows.cli.app import CacheOpt, app, choice, err, existing_catalog_at, fail, out
from storage.catalog import Catalog
from storage.handoff import ArmData, read_arm
from storage.handoff.card import card
from storage.handoff.formats import FORMATS, check_directory, manifest, write_hf, write_opustrainer, write_parallel, write_texts

if TYPE_CHECKING:
    from conf.importers import Imported

CONFIG_HELP = "the profile whose robustness modifiers OpusTrainer applies (default: the one the run recorded)"
NEEDS_ALIGNMENT = ("Tags",)  # OpusTrainer's modifiers that read a third (alignment) column


def opustrainer_modifiers(entries: list[Any], where: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The profile's robustness entries as OpusTrainer's list (each checked, its name canonical), and a line for
    each left out."""
    from tasks.robustness.spec import ALIASES, parse_modifier  # here: the readers start without pydantic's models

    kept, left = [], []
    for i, entry in enumerate(entries):
        spec = parse_modifier(entry, f"{where}[{i}]")
        if spec.name in NEEDS_ALIGNMENT:
            left.append(
                f"{where}[{i}] {spec.name}: left out: OpusTrainer's {spec.name} reads a word alignment as a third TSV "
                "column, which a training mix does not have (it would skip every line)"
            )
            continue
        (name, p), *rest = dict(entry).items()
        kept.append({ALIASES.get(str(name), str(name)): p, **dict(rest)})
    return kept, left


def languages(config: dict[str, Any]) -> tuple[str, str]:
    """The file suffixes of the two sides: the (src_lang, tgt_lang) the profile's bitexts name, when they agree on
    one pair; else (src, tgt)."""
    pairs = {
        (d.get("src_lang"), d.get("tgt_lang"))
        for d in (config.get("datasets") or {}).values()
        if isinstance(d, dict) and d.get("kind") == "bitext" and d.get("src_lang") and d.get("tgt_lang")
    }
    return next(iter(pairs)) if len(pairs) == 1 else ("src", "tgt")


def profile_config(config: str | None, cache: Path) -> tuple[dict[str, Any] | None, list[str] | None]:
    """``--config``'s profile as JSON and the arms it names; (None, None) without one."""
    from conf.loader import load_profile  # here: `augdag export` without a profile starts without its models

    if config is None:
        return None, None
    conf = load_profile(config, [], cache=cache)
    arms = list(conf.train_nmt.experiments) or ["mix"]
    return conf.model_dump(mode="json"), arms


def export(
    arm: ArmData, fmt: str, output: Path, profile: dict[str, Any], sides: tuple[str, str], catalog: Catalog
) -> dict[str, int]:
    """Write ``arm`` as ``fmt`` into ``output``; {file: lines or rows}."""
    extra: dict[str, Any] = {}
    if fmt == "opustrainer":
        robustness = profile.get("robustness") or {}
        modifiers, left = opustrainer_modifiers(list(robustness.get("modifiers") or []), "robustness.modifiers")
        for line in left:
            err.print(f"warning: {escape(line)}", highlight=False, soft_wrap=True)
        files = write_opustrainer(arm, output, modifiers, seed=int(robustness.get("seed") or 0), cache=catalog.root)
        extra["modifiers"] = modifiers
    elif fmt in ("marian", "fairseq"):
        files = write_parallel(arm, output, src=sides[0], tgt=sides[1], cache=catalog.root)
        extra["languages"] = {"src": sides[0], "tgt": sides[1]}
    else:
        readme = card(catalog, arm)  # before any file: a query that fails leaves no half directory
        files = write_hf(arm, output)
        write_texts(output, {"README.md": readme}, cache=catalog.root)
    write_texts(output, {"manifest.json": manifest(arm, fmt, files, **extra)}, cache=catalog.root)
    return files


@app.command("export-arm")
def export_arm(
    arm: Annotated[str, typer.Argument(help="an arm of train_nmt (a key of train_nmt.experiments; `mix` without them)")],
    output: Annotated[Path, typer.Option("--output", "-o", help="the directory the files go to (absent or empty)")],
    for_: Annotated[str, typer.Option("--for", help=f"the trainer: {'|'.join(FORMATS)}")],
    config: Annotated[str | None, typer.Option("--config", "-c", help=CONFIG_HELP)] = None,
    run: Annotated[str | None, typer.Option("--run", help="the run whose training_mix is read (default: the latest)")] = None,
    src_lang: Annotated[str | None, typer.Option(help="marian/fairseq: the source files' suffix (default: src_lang)")] = None,
    tgt_lang: Annotated[str | None, typer.Option(help="marian/fairseq: the target files' suffix (default: tgt_lang)")] = None,
    force: Annotated[bool, typer.Option("--force", help="write into a directory that is not empty")] = False,
    cache: CacheOpt = None,
) -> None:
    """Write an arm of train_nmt (its SQL mixes with copies, and its continued phase) as the files a trainer reads:
    OpusTrainer's TSV files and curriculum, Marian's or fairseq's line-aligned files, or a Hugging Face dataset
    with its card; with manifest.json (counts, the run, the artifacts)."""
    choice("--for", for_, FORMATS)
    catalog = existing_catalog_at(cache)
    try:
        check_directory(output, force=force, cache=catalog.root)
        profile, arms = profile_config(config, catalog.root)
        data = read_arm(catalog, arm, run, arms)
        profile = profile if profile is not None else data.config
        default = languages(profile)
        sides = (src_lang or default[0], tgt_lang or default[1])
        files = export(data, for_, output, profile, sides, catalog)
    except AugdagError as e:
        fail(e)
    phases = ", ".join(f"{p.name} {p.table.num_rows:,} rows" for p in data.phases)
    out.print(f"arm {escape(arm)} of run {data.run_id} ({phases}) for {for_} in {escape(str(output))}:", highlight=False)
    unit = "rows" if for_ == "hf" else "lines"
    for name, n in files.items():
        out.print(f"  {escape(name)}  {n:,} {unit}", highlight=False)
    out.print("  manifest.json" + ("  README.md" if for_ == "hf" else ""), highlight=False)


import_app = typer.Typer(add_completion=False, no_args_is_help=True, help="another tool's configuration as a profile fragment")
app.add_typer(import_app, name="import")


def fragment(section: dict[str, Any], origin: dict[str, str], tail: list[str]) -> str:
    """``section`` as YAML, each top-level key followed by a comment naming where it came from, then ``tail``."""
    lines = []
    for text in yaml.safe_dump(section, sort_keys=False, allow_unicode=True, default_flow_style=None).splitlines():
        key = text.strip().split(":", 1)[0]
        third_level = text.startswith("    ") and not text.startswith("     ")  # ingest: / clean: / <key>
        lines.append(f"{text}  # {origin[key]}" if third_level and key in origin else text)
    return "\n".join(lines + tail) + "\n"


def printed(imported: Imported) -> str:
    """The `import opusfilter` output: the ingest.clean fragment, the notes, the steps not mapped (comments)."""
    tail = [f"# note: {n}" for n in imported.notes]
    tail += [f"# not mapped: {u}" for u in imported.unmapped]
    tail.append("# keys not set here keep augdag's defaults (dedup: true, min_tokens: 1, max_tokens: 250, max_ratio: 1.5)")
    return fragment({"ingest": {"clean": imported.keys}}, imported.origin, tail)


@import_app.command("opusfilter")
def import_opusfilter_cmd(file: Annotated[Path, typer.Argument(help="an OpusFilter configuration (steps: ...)")]) -> None:
    """Print the ingest.clean keys of an OpusFilter configuration's filter steps, and one line per filter or step
    that has no counterpart (with why). Nothing runs."""
    from conf.importers import import_opusfilter

    try:
        imported = import_opusfilter(file)
    except AugdagError as e:
        fail(e)
    out.print(escape(printed(imported)), end="", highlight=False, soft_wrap=True)


@import_app.command("opustrainer")
def import_opustrainer_cmd(file: Annotated[Path, typer.Argument(help="an OpusTrainer curriculum (modifiers: ...)")]) -> None:
    """Print an OpusTrainer curriculum's modifiers as a robustness section (each checked against augdag's), and one
    line per modifier or stage list that has no counterpart. Nothing runs."""
    from conf.importers import read_opustrainer
    from tasks.robustness.spec import parse_modifier

    try:
        found = read_opustrainer(file)
    except AugdagError as e:
        fail(e)
    kept, tail = [], []
    for line, entry in found.entries:
        try:
            spec = parse_modifier(entry, f"{file}:{line}")
        except ConfError as e:
            tail.append(f"# not mapped: {e}")
            continue
        (_, p), *rest = dict(entry).items()
        kept.append({spec.name: p, **dict(rest)})
    tail += [f"# not mapped: {s}" for s in found.stage_lists]
    section: dict[str, Any] = {"robustness": {**({"seed": found.seed} if found.seed is not None else {}), "modifiers": kept}}
    text = yaml.safe_dump(section, sort_keys=False, allow_unicode=True, default_flow_style=None)
    out.print(escape(text + "".join(t + "\n" for t in tail)), end="", highlight=False, soft_wrap=True)
