"""`augdag gc`: collect what crashed writers left, on this machine and on the cache's object store.

A stage's parts are written before its manifest (storage/artifacts.py), so a writer killed between the two leaves
parts that no reader takes as finished; the next run of the same fingerprint writes the same bytes over them. What
nobody runs again stays: ``unfinished`` lists every artifact without a valid manifest (a directory on this machine,
a prefix on the store), every model prefix on the store without its manifest (storage/objects/models.py), and the
temporary files of writers whose process is gone; ``collect`` removes them. A complete artifact is never collected:
it is a cache entry, named in the catalog, that a later run reuses. The caller checks that no run is running.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

from storage import objects
from storage.artifacts import MANIFEST, ArtifactRef, dead_temporaries, read_manifest, sweep_temp


@dataclasses.dataclass(frozen=True)
class Garbage:
    location: str  # an artifact's directory or prefix, a model's prefix, or a temporary file
    files: int
    bytes: int
    what: str  # "unfinished artifact" | "unpublished model" | "temporary file"


def _tree(base: objects.Loc) -> dict[str, int]:
    """Every file under ``base`` (relative name -> bytes): one recursive listing."""
    if objects.is_remote(base):
        import pyarrow.fs as pafs

        fs, path = objects.split(str(base))
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
        return {i.path[len(path) + 1 :]: i.size for i in infos if i.type == pafs.FileType.File}
    base = Path(base)
    return {p.relative_to(base).as_posix(): p.stat().st_size for p in base.rglob("*") if p.is_file()} if base.is_dir() else {}


def _grouped(files: dict[str, int], depth: int) -> dict[tuple[str, ...], dict[str, int]]:
    """Files by their first ``depth`` path components (stage, fingerprint), hidden names left out."""
    out: dict[tuple[str, ...], dict[str, int]] = {}
    for name, size in files.items():
        parts = name.split("/")
        if len(parts) > depth and not parts[-1].startswith("."):
            out.setdefault(tuple(parts[:depth]), {})["/".join(parts[depth:])] = size
    return out


def unfinished(root: Path, stores: Iterable[str] = ()) -> list[Garbage]:
    """What crashed writers left under the cache ``root`` and the object-store prefixes ``stores``."""
    found = []
    for base in (root, *sorted(set(stores))):
        artifacts = objects.join(base, "artifacts")
        for (stage, fp), files in sorted(_grouped(_tree(artifacts), 2).items()):
            if read_manifest(ArtifactRef(str(root), stage, fp, store=None if base == root else str(base))) is None:
                found.append(_garbage(objects.join(artifacts, stage, fp), files, "unfinished artifact"))
        if objects.is_remote(base):
            models = objects.join(base, "models")
            for (key, fp), files in sorted(_grouped(_tree(models), 2).items()):
                if not _published(str(objects.join(models, key, fp)), files):
                    found.append(_garbage(objects.join(models, key, fp), files, "unpublished model"))
    for directory in (root / "artifacts", root / "models"):
        for tmp in _temporaries(directory):
            size = sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file()) if tmp.is_dir() else tmp.stat().st_size
            found.append(Garbage(str(tmp), 1, size, "temporary file"))
    return found


def _garbage(location: objects.Loc, files: dict[str, int], what: str) -> Garbage:
    return Garbage(str(location), len(files), sum(files.values()), what)


def _published(prefix: str, files: dict[str, int]) -> bool:
    if MANIFEST not in files:
        return False
    manifest = json.loads(objects.read_bytes(f"{prefix}/{MANIFEST}"))
    return all(files.get(f["file"]) == f["bytes"] for f in manifest["files"])


def _temporaries(directory: Path) -> list[Path]:
    """The temporary names of dead writers two levels down (``<stage>/<fingerprint>/.x.tmp``), not removed yet."""
    if not directory.is_dir():
        return []
    return [tmp for d in sorted(directory.glob("*/*")) if d.is_dir() for tmp in dead_temporaries(d)]


def collect(garbage: Sequence[Garbage]) -> None:
    """Remove what ``unfinished`` found."""
    for g in garbage:
        if g.what == "temporary file":
            sweep_temp(Path(g.location).parent)
        elif objects.is_remote(g.location):
            objects.remove_tree(g.location)
        else:
            shutil.rmtree(g.location, ignore_errors=True)
