"""Models on an object store: published by the host that trained them, fetched once per host into its scratch.

A model is a file or a directory (a checkpoint, a CTranslate2 conversion, an LM). With ``storage.artifacts`` on an
object store, the host that trains it writes it to its scratch directory (conf/sections/storage.py ``scratch_dir``)
as it would to the cache, then ``publish`` PUTs every file under ``<store>/models/<key>/<fingerprint>/`` and a
manifest (each file's bytes and sha256) last: a model without a manifest is not published. Another host, or the
same one after its scratch was cleared, ``fetch``es it into its own scratch, checks every sha256 and renames the
directory into place, so a half-fetched model is never read. The fingerprint names the model's bytes, so one
copy per host serves every run. A model the profile names by a path on the driver (``shipped``: a configured
checkpoint, the WordNet database) is published the same way, under ``models/<key>/<its content hash>/``, so a worker
that shares no disk with the driver loads it as it loads a trained one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from conf.errors import ArtifactError
from storage import objects

MANIFEST = "manifest.json"


def published(remote: str) -> dict[str, Any] | None:
    """The manifest of the model under the prefix ``remote`` when it is published whole, else None."""
    try:
        manifest = json.loads(objects.read_bytes(f"{remote}/{MANIFEST}"))
    except FileNotFoundError:
        return None
    for f in manifest["files"]:
        if objects.size(f"{remote}/{f['file']}") != f["bytes"]:
            return None
    return manifest


def publish(local: Path, remote: str) -> dict[str, Any]:
    """PUT the model at ``local`` (a file or a directory) under ``remote/<its name>``, then its manifest."""
    files = objects.upload_tree(local, f"{remote}/{local.name}")
    manifest = {
        "name": local.name,
        "kind": "directory" if local.is_dir() else "file",
        "files": [{"file": f"{local.name}/{rel}" if rel else local.name, "bytes": n, "sha256": sha} for rel, n, sha in files],
    }
    objects.put_bytes(json.dumps(manifest, indent=1, sort_keys=True).encode(), f"{remote}/{MANIFEST}")
    return manifest


def fetch(remote: str, local: Path) -> None:
    """Copy the published model under ``remote`` to ``local`` (its name is the model's), checking each sha256."""
    manifest = published(remote)
    if manifest is None:
        raise ArtifactError(f"{remote}: no published model (no manifest, or a file of it is missing)")
    local.parent.mkdir(parents=True, exist_ok=True)
    tmp = local.with_name(f".{local.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")  # as storage/artifacts.py's temp_path
    try:
        for f in manifest["files"]:
            rel = f["file"].split("/", 1)[1] if manifest["kind"] == "directory" else ""
            target = tmp / rel if rel else tmp
            target.parent.mkdir(parents=True, exist_ok=True)
            data = objects.read_bytes(f"{remote}/{f['file']}")
            if hashlib.sha256(data).hexdigest() != f["sha256"]:
                raise ArtifactError(f"{remote}/{f['file']}: its sha256 differs from the model's manifest; publish it again")
            target.write_bytes(data)
        os.replace(tmp, local)  # the model appears whole or not at all
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        tmp.unlink(missing_ok=True)


def shipped(local: Path, store: str, key: str, fingerprint: str) -> str:
    """The URI of ``local`` (a file or a directory on this host whose bytes ``fingerprint`` names) on the store
    ``store``: published under ``models/<key>/<fingerprint>/`` unless it already is there. A shard task handed the
    URI loads its own host's copy of it (``localized``)."""
    remote = objects.join(store, "models", key, fingerprint)
    if published(remote) is None:
        publish(local, remote)
    return f"{remote}/{local.name}"


def trained(local: Path, remote: str | None) -> bool:
    """Whether a model is trained: on this host at ``local``, and published under ``remote`` if there is a store
    (fetched from it when this host lacks it; published when only this host has it, as a crash may leave it)."""
    if remote is None:
        return local.exists()
    on_store = published(remote) is not None
    if on_store and not local.exists():
        fetch(remote, local)
    elif local.exists() and not on_store:
        publish(local, remote)
    return local.exists()


def local_copy(uri: str) -> Path:
    """The model at ``uri`` (``<store>/models/<key>/<fingerprint>/<name>``) on this host: fetched into its scratch
    directory the first time (one fetch per host and fingerprint, whichever process asks first), then reused."""
    from filelock import FileLock

    from conf.sections.storage import scratch_dir

    prefix, rest = uri.rsplit("/models/", 1)
    key, fp, name = rest.split("/", 2)
    local = scratch_dir() / "models" / key / fp / name
    if not local.exists():
        local.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(local.parent / ".fetch.lock"):
            if not local.exists():
                fetch(f"{prefix}/models/{key}/{fp}", local)
    return local


def localized(resources: Any) -> Any:
    """``resources`` (a shard task's model paths and settings) with every model on an object store replaced by the
    path of its copy on this host (``local_copy``); everything else as it is."""
    if isinstance(resources, str) and objects.is_remote(resources) and "/models/" in resources:
        return str(local_copy(resources))
    if isinstance(resources, dict):
        return {k: localized(v) for k, v in resources.items()}
    if isinstance(resources, (list, tuple)):
        return type(resources)(localized(v) for v in resources)
    return resources
