"""Bytes are proven, not trusted: a part is compared with the sha256 its artifact's manifest records.

Where each part is checked, and how:

1. **A stage's read** (``ArtifactRef.read``, ``Parts.table``/``tables``/``side``, storage/parts.py): the part's
   bytes are read whole, hashed, compared and only then decoded (``read_checked``). No memo: the bytes are in
   memory anyway, so the check costs one sha256 over them (~1.4 GB/s with the CPU's SHA extensions), and damage
   that leaves a file's every stat field as it was (a disk's silent bit rot) is caught there too. Parts a stage
   hands to DuckDB (``Parts.sql``, ``Parts.filtered``) are hashed, streamed, before DuckDB reads them
   (``check_files``).
2. **A cached stage** (the flow driver finds its manifest complete and would compute nothing) and **what the
   views serve** (every sandboxed catalog connection: `augdag sql`, the shell, `augdag export`): each file of the
   artifact is hashed once per *stat key* and the result memoised in ``<cache>/integrity/<stage>-<fp>.json``
   (``verify_artifact``). On this machine the key is (device, inode, size, mtime_ns, ctime_ns): a write, a touch,
   a copy, a rename over it or a restored backup changes it (ctime cannot be set back by a user), so a stale memo
   is never trusted; on an object store, (size, modification time) from one LIST. The writer fills the memo
   (``remember``): the manifest's sha256 of a local part is computed from the committed file.
3. **`augdag verify`** hashes every file of every current artifact, memo ignored, and lists each missing or
   differing one (flows/cli/verify.py).

A part that differs raises ``IntegrityError`` (exit 1) in one line: the artifact (stage/fingerprint), the part, both
hashes and the repair command. A part whose directory has no manifest yet is a stage's own output being written:
nothing records its bytes, and it is read as it is. A part DuckDB finds missing while it reads a view (deleted after
the view was built) is one line too (``missing_part``). A query that names files itself (``read_parquet('…')``)
reads them as they are: only views are checked.

``AUGDAG_BENCH_UNCHECKED=1`` turns every check off: for bench/integrity.py's baseline only, never a setting.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shlex
import uuid
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from conf.cache_path import resolve_cache
from conf.errors import ArtifactError, CatalogError
from storage import objects
from storage.cache_root import resolve
from storage.objects import Loc
from storage.schemas import CURRENT_SQL

MANIFEST = "manifest.json"
MEMO = "integrity"  # <cache>/integrity/<stage>-<fingerprint>.json: file -> "stat key sha256" last seen good
UNCHECKED_ENV = "AUGDAG_BENCH_UNCHECKED"  # bench/integrity.py's baseline: "1" turns every check off


class IntegrityError(ArtifactError):
    """A part's bytes differ from its manifest (or a part the manifest lists is gone)."""

    # set: the run that meets it keeps it, and the CLI adds no `augdag retry` line (it would fail the same way; the
    # message ends with the repair command)
    run_id = ""


@dataclasses.dataclass(frozen=True)
class Finding:
    """One file of an artifact that is not as its manifest records: ``found`` is its sha256, None when missing."""

    directory: Loc
    file: str
    recorded: str
    found: str | None

    @property
    def artifact(self) -> str:
        """``stage/fingerprint`` of the artifact."""
        return f"{objects.name(objects.parent(self.directory))}/{objects.name(self.directory)}"

    def line(self) -> str:
        """The finding in one line (what `augdag verify` lists)."""
        if self.found is None:
            return f"artifact {self.artifact}: {self.file} is missing (its manifest records sha256 {self.recorded})"
        return (
            f"artifact {self.artifact}: {self.file} differs from its manifest: recorded sha256 {self.recorded}, "
            f"found {self.found}"
        )


def checks_on() -> bool:
    """False only under bench/integrity.py's baseline (``AUGDAG_BENCH_UNCHECKED=1``)."""
    return os.environ.get(UNCHECKED_ENV) != "1"


def repair_hint(root: Path | str | None) -> str:
    """``augdag verify --repair``, with ``--cache`` unless ``root`` is the default cache."""
    if root is None or Path(root).absolute() == resolve_cache(None, None).absolute():
        return "augdag verify --repair"
    return f"augdag verify --repair --cache {shlex.quote(str(Path(root).absolute()))}"


def root_of(directory: Loc) -> Path | None:
    """The cache root of a local artifact directory (``<root>/artifacts/<stage>/<fp>``); None on an object store."""
    return None if objects.is_remote(directory) else Path(directory).parents[2]


def failed(finding: Finding, root: Path | str | None) -> IntegrityError:
    """The one-line error of ``finding``, ending with the repair command."""
    return IntegrityError(f"{finding.line()}. Hint: {repair_hint(root)}")


_RECORDED: dict[tuple[str, Any], dict[str, str]] = {}  # (directory, manifest stamp) -> file -> sha256


def recorded(directory: Loc) -> dict[str, str] | None:
    """file -> sha256 as the manifest in ``directory`` lists them; None when it has no manifest (yet)."""
    path = objects.join(directory, MANIFEST)
    if objects.is_remote(path):
        stamp: Any = None  # a manifest on a store is PUT once per fingerprint (a forced re-run: the same hashes)
    else:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
    if (hit := _RECORDED.get((str(directory), stamp))) is not None:
        return hit
    try:
        manifest = json.loads(objects.read_bytes(path))
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as e:
        raise ArtifactError(f"{path}: manifest is not valid JSON ({e}). Hint: {repair_hint(root_of(directory))}") from None
    hashes = {f["file"]: f["sha256"] for f in manifest.get("files", ())}
    _RECORDED[(str(directory), stamp)] = hashes
    return hashes


def _expected(loc: Loc, root: Path | str | None) -> str | None:
    """The sha256 the manifest beside ``loc`` records for it; None when there is no manifest."""
    hashes = recorded(objects.parent(loc))
    if hashes is None:
        return None
    if (sha := hashes.get(objects.name(loc))) is None:
        raise IntegrityError(
            f"artifact {Finding(objects.parent(loc), '', '', None).artifact}: {objects.name(loc)} is not in its manifest "
            f"(a file nobody recorded). Hint: {repair_hint(root)}"
        )
    return sha


def read_checked(loc: Loc, columns: Iterable[str] | None = None, *, root: Path | str | None = None) -> pa.Table:
    """The part at ``loc`` (``columns`` only), its bytes hashed and compared with its manifest before decoding."""
    if not checks_on() or (sha := _expected(loc, root)) is None:
        return objects.read_table(loc, columns)
    data = objects.read_bytes(loc)
    if (found := hashlib.sha256(data).hexdigest()) != sha:
        raise failed(Finding(objects.parent(loc), objects.name(loc), sha, found), root or root_of(objects.parent(loc)))
    return pq.read_table(pa.BufferReader(data), columns=list(columns) if columns is not None else None)


_CHECKED: set[tuple[str, str]] = set()  # (part, stat key) this process hashed and found as recorded


def check_files(locs: Iterable[Loc], *, root: Path | str | None = None) -> None:
    """Hash each part (streamed) and compare it with its manifest: before DuckDB or a dataset reads them. A stage
    that names its parts in several queries hashes each once per process while its stat key holds (an object on a
    store: once per process, its key never rewritten with other bytes)."""
    if not checks_on():
        return
    for loc in locs:
        if (sha := _expected(loc, root)) is None:
            continue
        key = (
            str(loc),
            sha if objects.is_remote(loc) else _stat_keys(objects.parent(loc), [objects.name(loc)]).get(objects.name(loc), ""),
        )
        if key in _CHECKED:
            continue
        if (found := objects.hash_of(loc)) != sha:
            raise failed(Finding(objects.parent(loc), objects.name(loc), sha, found), root or root_of(objects.parent(loc)))
        _CHECKED.add(key)


# -- memoised checks: a cached stage, the views ----------------------------------------------------------------------


def _memo_path(root: Path, directory: Loc) -> Path:
    return root / MEMO / f"{objects.name(objects.parent(directory))}-{objects.name(directory)}.json"


def _stat_keys(directory: Loc, files: Iterable[str]) -> dict[str, str]:
    """file -> its stat key (absent: the file is missing)."""
    if objects.is_remote(directory):
        listed = objects.listing(directory)
        return {f: f"{listed[f][0]}:{listed[f][1]}" for f in files if f in listed}
    keys = {}
    for f in files:
        try:
            st = os.stat(Path(directory) / f)
        except FileNotFoundError:
            continue
        keys[f] = f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
    return keys


def _read_memo(path: Path) -> dict[str, str]:
    try:
        memo = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return memo if isinstance(memo, dict) else {}


def _write_memo(path: Path, memo: Mapping[str, str]) -> None:
    """Under a temporary name, renamed: a reader sees the old memo or the new one; a lost update costs a hash."""
    with contextlib.suppress(OSError):  # a read-only cache: checks still run, they are only not remembered
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        tmp.write_text(json.dumps(dict(sorted(memo.items()))))
        os.replace(tmp, path)


def stat_keys(directory: Loc, files: Iterable[str]) -> dict[str, str]:
    """The stat keys of ``files`` in ``directory`` now (taken before hashing them, for ``remember``)."""
    return _stat_keys(directory, files)


def remember(root: Path, directory: Loc, verified: Mapping[str, tuple[str, str]]) -> None:
    """Record that each file (-> (its stat key before it was hashed, its sha256)) was hashed as its manifest says."""
    if verified:
        path = _memo_path(root, directory)
        _write_memo(path, {**_read_memo(path), **{f: f"{key} {sha}" for f, (key, sha) in verified.items()}})


def verify_artifact(root: Path, directory: Loc, files: Mapping[str, str], *, memo: bool = True) -> list[Finding]:
    """The files of one artifact (file -> recorded sha256) that are missing or differ. With ``memo``, a file whose
    stat key and recorded hash are the ones last seen good is not hashed again; good hashes are remembered."""
    keys = _stat_keys(directory, files)
    path = _memo_path(root, directory)
    seen = _read_memo(path) if memo else {}
    found, good = [], {}
    for f, sha in sorted(files.items()):
        if (key := keys.get(f)) is None:
            found.append(Finding(directory, f, sha, None))
            continue
        if seen.get(f) == f"{key} {sha}":
            continue
        if (now := objects.hash_of(objects.join(directory, f))) == sha:
            good[f] = f"{key} {sha}"
        else:
            found.append(Finding(directory, f, sha, now))
    if good:
        _write_memo(path, {**(seen or _read_memo(path)), **good})
    return found


def check_artifact(
    root: Path, directory: Loc, files: Mapping[str, str], *, on_disk: bool = False, shards: Collection[int] | None = None
) -> None:
    """Files of an artifact a run takes as done (file -> recorded sha256): a cached stage's, or (``on_disk``: only
    files there, of ``shards`` when given) an unfinished one's; the first that differs or is gone raises (memoised)."""
    if on_disk:
        listed = objects.listing(directory, ".parquet")
        files = {
            f: sha for f, sha in files.items() if f in listed and (shards is None or int(f[:-8].rsplit("-", 1)[1]) in shards)
        }
    if checks_on() and files and (bad := verify_artifact(root, directory, files)):
        raise failed(bad[0], root)


def check_served(con: duckdb.DuckDBPyConnection, root: Path) -> None:
    """Every part the catalog's views read (the current artifacts with a view, every role), before a query: the
    first that differs from its manifest raises (memoised, so a query costs a stat per part)."""
    if not checks_on():
        return
    rows = con.execute(f"SELECT path, manifest FROM artifacts WHERE view IS NOT NULL {CURRENT_SQL} ORDER BY path").fetchall()
    for path, manifest in rows:
        files = {f["file"]: f["sha256"] for f in json.loads(manifest)["files"]}
        bad = [f for f in verify_artifact(root, resolve(root, path), files) if f.found is not None]  # a missing part:
        if bad:  # the view was rebuilt without it, or DuckDB says it is gone (missing_part)
            raise failed(bad[0], root)


_MISSING = re.compile(r"""(?:No files found that match the pattern|Cannot open file|No such file)[^"']*["']([^"']+)["']""")


def missing_part(error: BaseException) -> CatalogError | None:
    """DuckDB's IOException about a missing part (a view read after the part was deleted) as one line; None for any
    other error."""
    if not isinstance(error, duckdb.IOException) or (m := _MISSING.search(str(error))) is None:
        return None
    path = m.group(1)
    directory = objects.parent(path)
    root = root_of(directory) if "/artifacts/" in path else None
    what = f"artifact {Finding(directory, '', '', None).artifact}: " if root is not None else ""
    return CatalogError(f"{what}{objects.name(path)} is missing ({path}). Hint: {repair_hint(root)}")
