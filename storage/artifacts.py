"""The content-addressed artifact store.

Layout: ``<cache>/artifacts/<stage>/<fingerprint>/<role>-<shard>.parquet`` plus ``manifest.json``.
The fingerprint hashes the stage name, its code version, its canonical parameters, its input
fingerprints and its model fingerprints, so the same inputs and config give the same directory.
Every file is written under a temporary name and renamed (the rename is the commit); the manifest
(rows, bytes, sha256 and schema of every file, plus the parameters) is written last, so a directory
without a manifest is an unfinished stage that nobody may read as finished.

With ``storage.artifacts`` an object-store URI (``s3://bucket/prefix``), the same layout lies under that prefix
(``ArtifactRef.store``) and each file is one PUT under its final key, the manifest last (storage/objects/).
"""

from __future__ import annotations

import contextvars
import dataclasses
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from conf.errors import ArtifactError, InputError
from storage import objects
from storage.integrity import MANIFEST, read_checked, remember, stat_keys
from storage.objects import Loc
from storage.parts import Parts

# where a run's report figures are memoised by what they draw (flows/reports/plots.py ``memoised``): the flow driver
# sets ``<cache>/reports/figures`` for each run; unset, every figure is drawn
FIGURE_MEMO: contextvars.ContextVar[Path | None] = contextvars.ContextVar("augdag_figure_memo", default=None)

MAIN = "part"  # the role of a stage's main output; others: "rejects", "dropped", ...
# row groups of 128k rows: a large part sorted by a key (the sample, by line) is read in slices by filters
_WRITE_OPTS = {"compression": "zstd", "use_dictionary": True, "write_statistics": True, "row_group_size": 1 << 17}


def part_name(shard: int, role: str = MAIN) -> str:
    return f"{role}-{shard:05d}.parquet"


@dataclasses.dataclass(frozen=True)
class ArtifactRef:
    """A reference to one stage output, passed between tasks instead of the tables themselves."""

    root: str  # the cache root, absolute
    stage: str
    fingerprint: str
    view: str | None = None  # the catalog view its main parts appear in (bitext, curriculum, ...); None: internal
    dataset: str | None = None
    n_shards: int = 0
    store: str | None = None  # where artifacts live when not under ``root``: an object-store URI (storage/objects/)

    @property
    def dir(self) -> Loc:
        return objects.join(self.store or Path(self.root), "artifacts", self.stage, self.fingerprint)

    def path(self, shard: int, role: str = MAIN) -> Loc:
        return objects.join(self.dir, part_name(shard, role))

    def paths(self, role: str = MAIN) -> list[Loc]:
        return [self.path(i, role) for i in range(self.n_shards)]

    def parts(self, role: str = MAIN) -> Parts:
        """Its parts of ``role`` as a lazy dataset (what a reduce stage or a model builder reads)."""
        return Parts(tuple(self.paths(role)), root=self.root)

    def read(self, shard: int, role: str = MAIN) -> pa.Table:
        """Shard ``shard`` of ``role``, its bytes checked against the manifest (storage/integrity/)."""
        path = self.path(shard, role)
        try:
            return read_checked(path, root=self.root)
        except FileNotFoundError:
            raise ArtifactError(f"{path}: shard {shard} of stage {self.stage!r} is missing; re-run to recompute it") from None

    def with_shards(self, n_shards: int) -> ArtifactRef:
        return dataclasses.replace(self, n_shards=n_shards)


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"cannot fingerprint a {type(obj).__name__}: {obj!r}")


def canonical(obj: Any) -> str:
    """Canonical JSON: sorted keys, no whitespace; pydantic models, dataclasses and paths as plain JSON."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_jsonable, ensure_ascii=False)


def fingerprint(
    stage: str,
    version: str,
    params: Mapping[str, Any],
    inputs: Sequence[str] = (),
    models: Sequence[str] = (),
) -> str:
    """sha256 over (stage, version, canonical params, input fingerprints, model fingerprints), 32 hex chars."""
    doc = {"stage": stage, "version": version, "params": params, "inputs": list(inputs), "models": list(models)}
    return hashlib.sha256(canonical(doc).encode()).hexdigest()[:32]


def hash_file(path: Loc, *, block: int = 1 << 22) -> str:
    """sha256 of a file's bytes, on this machine or on the object store."""
    return objects.hash_of(path)


def hash_inputs(paths: Iterable[Path | str], *, memo: Path | None = None) -> str:
    """Fingerprint of input files (by content); a directory hashes every file under it, by relative path.

    With ``memo`` (a directory in the cache), a file's sha256 is remembered under its (path, size,
    mtime, inode) and reused while those are unchanged, so a cached re-run does not re-read its inputs; an
    object's under its (URI, size, modification time).
    """
    h = hashlib.sha256()
    for path in paths:
        if objects.is_remote(path):
            digest = _memo_object_hash(str(path), memo) if memo is not None else hash_file(path)
            h.update(f"{objects.name(path)}\0{digest}\0".encode())
            continue
        path = Path(path)
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for f in files:
            digest = _memo_hash(f, memo) if memo is not None else hash_file(f)
            h.update(f"{f.relative_to(path) if path.is_dir() else f.name}\0{digest}\0".encode())
    return h.hexdigest()[:32]


def _memo_object_hash(uri: str, memo: Path) -> str:
    if (found := objects.stamp(uri)) is None:
        raise InputError(f"{uri}: no such object. Hint: check the dataset's path in the profile")
    size, mtime = found
    return _memoised(f"{uri}\0{size}\0{mtime}", memo, uri)


def _memo_hash(path: Path, memo: Path) -> str:
    st = path.stat()
    return _memoised(f"{path.absolute()}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}", memo, path)


def _memoised(key: str, memo: Path, path: Loc) -> str:
    entry = memo / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.sha256"
    try:
        return entry.read_text()
    except FileNotFoundError:
        digest = hash_file(path)
        write_text(digest, entry)
        return digest


def commit_file(tmp: Path, final: Path) -> None:
    os.replace(tmp, final)  # atomic on POSIX: a reader sees the old state or the whole new file


def temp_path(final: Path) -> Path:
    """Where ``final`` is written before its rename: a hidden name that carries the writer's pid."""
    return final.with_name(f".{final.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


def dead_temporaries(directory: Path) -> list[Path]:
    """The ``temp_path`` files and directories in ``directory`` whose writer process is gone (a live one, this
    process included, may still be writing)."""
    dead = []
    for tmp in directory.glob(".*.tmp") if directory.is_dir() else ():
        try:
            pid = int(tmp.name.rsplit(".", 3)[-3])
            os.kill(pid, 0)
            continue  # its writer lives
        except ProcessLookupError:
            dead.append(tmp)
        except (ValueError, IndexError, PermissionError):  # not ours to judge, or a live process of another user
            continue
    return dead


def sweep_temp(directory: Loc) -> list[Path]:
    """Remove what killed writers left in ``directory`` (``dead_temporaries``). Returns what it removed."""
    if objects.is_remote(directory):
        return []  # an object store has no temporary names: a PUT is the commit
    removed = dead_temporaries(Path(directory))
    for tmp in removed:
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
    return removed


def write_text(text: str, path: Loc) -> None:
    """Write a small text file (a manifest, a memo entry) under a temporary name and rename it."""
    write_bytes(text.encode(), path)


def write_bytes(data: bytes, path: Loc) -> None:
    """Write a small file (a memoised figure, a text) under a temporary name and rename it; on an object store,
    one PUT under its final key."""
    if objects.is_remote(path):
        objects.put_bytes(data, str(path))
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        tmp.write_bytes(data)
        commit_file(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_part(table: pa.Table, path: Loc, *, recorded: str | None = None, what: str = "") -> dict[str, Any] | None:
    """Write one Parquet part under a temporary name and rename it: no half file ever looks finished. On an
    object store the part is made in memory and PUT under its final key (atomic per object), and what its manifest
    entry says of it (rows, bytes, sha256, schema) is returned, so that the manifest need not read it back.

    ``recorded``: the sha256 this file already has (its manifest's, or the committed file's): the part is being
    computed again under the same fingerprint, so its bytes must be the same. A difference raises an
    ``ArtifactError`` naming ``what`` (stage, shard) and both hashes, and the recorded file stays as it was. A local
    file that is there with those bytes is kept as it is (not replaced by its copy).
    """
    if objects.is_remote(path):
        data = objects.parquet_bytes(table, _WRITE_OPTS)
        sha = hashlib.sha256(data).hexdigest()
        if recorded is not None:
            _same_bytes(path, what, recorded, sha)
        objects.put_bytes(data, str(path))
        return {"bytes": len(data), "sha256": sha, **_footer(pq.ParquetFile(pa.BufferReader(data)).metadata)}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        pq.write_table(table, tmp, **_WRITE_OPTS)
        if recorded is not None:
            _same_bytes(path, what, recorded, hash_file(tmp))
            if path.exists() and hash_file(path) == recorded:
                return None  # the file there has those bytes: kept (a repair rewrites only the parts that differ)
        commit_file(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return None


def _footer(meta: pq.FileMetaData) -> dict[str, Any]:
    """A part's rows and schema as its manifest records them."""
    return {"rows": meta.num_rows, "schema": meta.schema.to_arrow_schema().to_string(show_schema_metadata=False)}


def _same_bytes(path: Loc, what: str, recorded: str, new: str) -> None:
    if new != recorded:
        raise ArtifactError(
            f"{what or objects.parent(path)}: {objects.name(path)} was computed again under the same fingerprint and its "
            f"bytes differ: recorded sha256 {recorded}, new {new}. A fingerprint must name its bytes: the stage "
            "read something its fingerprint does not cover (process-global random or thread state, the "
            "clock, another stage's output), or its code changed without a new version. The recorded file "
            "is kept. Hint: bump the stage's version if its code changed"
        )


def recorded_hashes(ref: ArtifactRef) -> dict[str, str]:
    """The sha256 of every file the artifact's manifest lists (empty without a manifest for this fingerprint),
    complete or not: what a part computed again must reproduce."""
    try:
        manifest = json.loads(objects.read_bytes(objects.join(ref.dir, MANIFEST)))
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    if manifest.get("fingerprint") != ref.fingerprint:
        return {}
    return {f["file"]: f["sha256"] for f in manifest.get("files", ())}


def write_manifest(
    ref: ArtifactRef,
    *,
    version: str,
    params: Mapping[str, Any],
    inputs: Sequence[str] = (),
    models: Sequence[str] = (),
    extra: Mapping[str, Any] | None = None,
    known: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Describe every committed part of ``ref`` (rows, bytes, sha256, schema) and commit the manifest last.
    ``known``: what the shard tasks said of the parts they PUT (``write_part``), by file name: taken where the
    listed size agrees, instead of reading the part back from the object store."""
    files, schemas, distinct, verified = [], {}, {}, {}
    listed = objects.listing(ref.dir, ".parquet")
    keys = stat_keys(ref.dir, listed)  # before hashing: what the integrity memo remembers them by
    for file, (size, _) in sorted(listed.items()):
        path = objects.join(ref.dir, file)
        role, shard = file.removesuffix(".parquet").rsplit("-", 1)
        said = (known or {}).get(file)
        if said is None or said["bytes"] != size:
            said = {"sha256": hash_file(path), **_footer(objects.parquet_file(path).metadata)}
        if file in keys:
            verified[file] = (keys[file], said["sha256"])
        schemas.setdefault(role, said["schema"])
        distinct.setdefault(role, set()).add(said["schema"])
        entry = {"file": file, "role": role, "shard": int(shard), "rows": said["rows"], "bytes": size}
        files.append({**entry, "sha256": said["sha256"]})
    main = [f for f in files if f["role"] == MAIN]
    if len(main) != ref.n_shards or {f["shard"] for f in main} != set(range(ref.n_shards)):
        found = sorted(f["shard"] for f in main)
        raise ArtifactError(f"{ref.dir}: expected {ref.n_shards} main parts, found shards {found}")
    manifest = {
        "stage": ref.stage,
        "version": version,
        "fingerprint": ref.fingerprint,
        "view": ref.view,
        "dataset": ref.dataset,
        "n_shards": ref.n_shards,
        "params": json.loads(canonical(params)),
        "inputs": list(inputs),
        "models": list(models),
        "rows": sum(f["rows"] for f in main),
        "bytes": sum(f["bytes"] for f in files),
        "files": files,
        "schema": schemas,
        # per role, whether every part has that one schema: a view then binds from one footer, not from each part's
        "uniform": {role: len(found) == 1 for role, found in sorted(distinct.items())},
        "extra": dict(extra or {}),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    write_text(json.dumps(manifest, indent=1, sort_keys=True), objects.join(ref.dir, MANIFEST))
    remember(Path(ref.root), ref.dir, verified)  # hashed from the files as committed: a cached read need not again
    return manifest


def read_manifest(ref: ArtifactRef) -> dict[str, Any] | None:
    """The manifest, if the artifact is complete: it exists, names this fingerprint and every file it lists
    is on disk with the recorded size. A deleted or truncated part makes the artifact incomplete."""
    path = objects.join(ref.dir, MANIFEST)
    try:
        manifest = json.loads(objects.read_bytes(path))
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as e:
        raise ArtifactError(f"{path}: manifest is not valid JSON ({e}); delete the directory to recompute") from None
    if manifest.get("fingerprint") != ref.fingerprint:
        return None
    on_disk = objects.listing(ref.dir, ".parquet")  # one listing (one request on an object store), not one per file
    if any(on_disk.get(f["file"], (None,))[0] != f["bytes"] for f in manifest["files"]):
        return None
    return manifest


def verify(ref: ArtifactRef) -> list[str]:
    """Re-hash every file of a complete artifact; returns the names whose sha256 differs from the manifest."""
    manifest = read_manifest(ref)
    if manifest is None:
        raise ArtifactError(f"{ref.dir}: no complete manifest")
    return [f["file"] for f in manifest["files"] if hash_file(objects.join(ref.dir, f["file"])) != f["sha256"]]
