"""`augdag verify [--repair]`: every current artifact's files against their manifest, every byte hashed.

What it checks: the current artifacts of the catalog (per stage, dataset and view, the one a run used last: what the
views serve and the next run reuses), on this machine or on the cache's object store; for each, every file its
manifest lists is hashed (sha256, the integrity memo ignored: this is the check that catches damage no stat field
shows, storage/integrity/). Each file missing or differing is one line; exit 1 when there is any, 0 when none.

``--repair`` recomputes exactly those files: it deletes each bad file and, for a side role (``rejects-``,
``dropped-``...), its shard's main part (a main part on disk means the shard is done, tasks/runtime/stage.py), then
runs again, as `augdag retry` does, the run that last used each such artifact: its stage finds those shards missing
and computes only them (the other shards are checked against the manifest and kept), and each recomputed file must
come out with the bytes its manifest records (storage/artifacts.py ``write_part``). Then it hashes those artifacts
again and says what it recomputed.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Annotated

import typer
from rich.markup import escape

from conf.errors import ArtifactError
from flows.cli.app import CacheOpt, app, err, existing_catalog_at, fail, out
from storage import objects
from storage.artifacts import MAIN
from storage.cache_root import resolve
from storage.catalog import Catalog
from storage.integrity import MANIFEST, Finding, recorded, verify_artifact
from storage.schemas import CURRENT_SQL


def current(catalog: Catalog) -> list[tuple[objects.Loc, str]]:
    """The current artifacts: (directory, the run that last used it), oldest run first (a repair runs them in order)."""
    rows = catalog.query(
        "SELECT a.path, a.last_run FROM artifacts a LEFT JOIN runs r ON r.run_id = a.last_run "
        f"{CURRENT_SQL} ORDER BY r.started_at NULLS FIRST, a.path"
    ).to_pylist()
    return [(resolve(catalog.root, r["path"]), r["last_run"]) for r in rows]


def check(catalog: Catalog, artifacts: list[tuple[objects.Loc, str]]) -> tuple[int, list[Finding]]:
    """Hash every file of ``artifacts``: (files checked, the missing or differing ones; a missing manifest is a
    finding of ``manifest.json``)."""
    files, found = 0, []
    for directory, _ in artifacts:
        hashes = recorded(directory)
        if hashes is None:
            found.append(Finding(directory, MANIFEST, "", None))
            continue
        files += len(hashes)
        found += verify_artifact(catalog.root, directory, hashes, memo=False)
    return files, found


def line(f: Finding) -> str:
    """A finding as `augdag verify` lists it (an artifact without its manifest too)."""
    return f"artifact {f.artifact}: {MANIFEST} is missing" if f.file == MANIFEST else f.line()


def clear(f: Finding) -> None:
    """Delete the bad file and, for a side role, its shard's main part: the next run of its stage computes the shard."""
    objects.remove(objects.join(f.directory, f.file))
    role, shard = f.file.removesuffix(".parquet").rsplit("-", 1)
    if role != MAIN:
        objects.remove(objects.join(f.directory, f"{MAIN}-{shard}.parquet"))


@app.command()
def verify(
    repair: Annotated[
        bool, typer.Option("--repair", help="recompute the missing or differing files (only those shards), then check again")
    ] = False,
    cache: CacheOpt = None,
) -> None:
    """Check every current artifact (here and on the object store) against its manifest, every byte: one line per
    file missing or differing, exit 1 when any; --repair recomputes exactly those files and says which."""
    catalog = existing_catalog_at(cache)
    artifacts = current(catalog)
    files, found = check(catalog, artifacts)
    for f in found:
        out.print(escape(line(f)), highlight=False, soft_wrap=True)
    if not found:
        out.print(f"{len(artifacts)} artifact(s), {files} file(s): every one as its manifest records", highlight=False)
        return
    if not repair:
        opt = f" --cache {escape(str(cache))}" if cache else ""
        fail(ArtifactError(f"{len(found)} file(s) missing or differing. Hint: augdag verify --repair{opt}"))
    bad_dirs = {str(f.directory) for f in found}
    if any(f.file == MANIFEST for f in found):
        fail(ArtifactError("an artifact without its manifest is recomputed whole: run again the run that made it"))
    for f in found:
        clear(f)
    runs = list(dict.fromkeys(run for d, run in artifacts if str(d) in bad_dirs and run))
    for run_id in runs:
        err.print(f"repair: augdag retry {run_id}", highlight=False)
        cmd = [sys.executable, "-m", "flows.cli", "retry", run_id, "--cache", str(catalog.root), "-q"]
        if subprocess.run(cmd, check=False).returncode != 0:
            fail(ArtifactError(f"the repair's retry of run {run_id} failed (see its line above)"))
    _, still = check(catalog, [(d, run) for d, run in artifacts if str(d) in bad_dirs])
    for f in found:
        if not any(s.directory == f.directory and s.file == f.file for s in still):
            done = f"recomputed artifact {f.artifact}: {f.file} (sha256 {f.recorded}, as its manifest records)"
            out.print(escape(done), highlight=False, soft_wrap=True)
    if still:
        for s in still:
            out.print(escape(line(s)), highlight=False, soft_wrap=True)
        fail(ArtifactError(f"{len(still)} file(s) still missing or differing after the repair"))
