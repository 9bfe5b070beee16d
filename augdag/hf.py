"""A Hugging Face ``datasets.Dataset`` over a view's Parquet parts, memory-mapped, with the run that made it in its info.

Local parts go through datasets' own Parquet builder (``Dataset.from_parquet``): it reads record batches with
pyarrow and writes them as Arrow files into ``cache_dir`` (``<scratch>/hf`` by default, conf/sections/storage.py
``scratch_dir``), which the ``Dataset`` memory-maps; no row becomes a Python object on the way, and a second call
over the same parts finds the files already written. Parts on an object store (``s3://…``, read by storage/objects/,
which datasets' fsspec route cannot reach without s3fs) are streamed batch by batch into one Arrow file under
``cache_dir/augdag-<key>/``, named by the parts, their sizes and the columns, written to a temporary name and
renamed, then memory-mapped with ``Dataset.from_file``.

``DatasetInfo.description`` names the run, the view, the artifacts with their fingerprints and the lineage columns,
in words and as one JSON line that ``augdag_info`` reads back; it travels with ``save_to_disk``/``load_from_disk``.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa

from conf.errors import ConfError, InputError
from conf.sections.storage import scratch_dir
from storage import objects

MARK = "augdag-info: "  # the description line that holds the info as JSON


def _check_info(info: Mapping[str, Any]) -> dict[str, Any]:
    """``info`` as stored: ``run`` (the run id), ``artifacts`` (stage/fingerprint -> what it is, or a list of
    ``stage/fingerprint``), ``lineage_columns`` (names); any other keys (``view``, ``profile``) kept as given."""
    if not isinstance(info.get("run"), str) or not info["run"]:
        raise ConfError(f"hf_dataset: info['run'] must name the run that made the rows (found {info.get('run')!r})")
    for key in ("artifacts", "lineage_columns"):
        if key not in info:
            raise ConfError(f"hf_dataset: info has no {key!r} (it has {', '.join(sorted(info))})")
    out = dict(info)
    out["lineage_columns"] = list(info["lineage_columns"])
    out["artifacts"] = dict(info["artifacts"]) if isinstance(info["artifacts"], Mapping) else list(info["artifacts"])
    try:
        json.dumps(out)
    except TypeError as e:
        raise ConfError(f"hf_dataset: info must hold JSON values: {e}") from None
    return out


def describe(info: Mapping[str, Any]) -> str:
    """The ``DatasetInfo.description`` of ``info``: a few lines in words, then ``augdag-info: {json}``."""
    view = f"view {info['view']} of " if info.get("view") else ""
    artifacts = ", ".join(map(str, info["artifacts"])) or "none"
    lineage = ", ".join(map(str, info["lineage_columns"])) or "none"
    return (
        f"augdag {view}run {info['run']}\n"
        f"artifacts (stage/fingerprint): {artifacts}\n"
        f"lineage columns: {lineage}\n"
        f"{MARK}{json.dumps(info, sort_keys=True)}"
    )


def augdag_info(dataset: datasets.Dataset) -> dict[str, Any]:
    """The ``info`` that ``hf_dataset`` stored in ``dataset``'s description (after ``load_from_disk`` too).

    Raises:
        InputError: the dataset was not made by ``hf_dataset``.
    """
    for line in (dataset.info.description or "").splitlines():
        if line.startswith(MARK):
            return dict(json.loads(line[len(MARK) :]))
    raise InputError("this dataset's info has no 'augdag-info:' line: it was not made by augdag's hf_dataset")


def _check_parts(parts: list[str], columns: Sequence[str] | None) -> None:
    """Every part has ``columns`` (all of the first part's when None) with the first part's types, or one line
    naming the part that differs (datasets' builder would fail on it with a cast error after the parts before it)."""
    first: list[tuple[str, pa.DataType]] | None = None
    for part in parts:
        try:
            schema = objects.parquet_file(part).schema_arrow
        except (OSError, pa.ArrowInvalid) as e:
            raise InputError(f"{part}: not a readable Parquet part ({e})") from None
        wanted = list(columns) if columns is not None else [n for n, _ in first] if first else schema.names
        if missing := [c for c in wanted if schema.get_field_index(c) < 0]:
            raise InputError(f"{part}: no column {', '.join(missing)} (it has {', '.join(schema.names)})")
        found = [(c, schema.field(c).type) for c in wanted]
        if first is not None and found != first:
            raise InputError(f"{part}: column types {found} differ from the first part's {first}; choose columns=")
        first = first or found


def _streamed(parts: list[str], columns: Sequence[str] | None, cache_dir: Path) -> datasets.Dataset:
    """Remote parts as one Arrow file under ``cache_dir``, memory-mapped (see the module)."""
    stamps = [(p, objects.size(p)) for p in parts]
    key = hashlib.sha256(json.dumps([stamps, list(columns or [])]).encode()).hexdigest()[:24]
    final = cache_dir / f"augdag-{key}" / "data.arrow"
    if not final.exists():
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f"data.{uuid.uuid4().hex}.tmp")
        writer = None
        try:
            for part in parts:
                f = objects.parquet_file(part)
                for batch in f.iter_batches(columns=list(columns) if columns is not None else None):
                    writer = writer or pa.ipc.new_stream(str(tmp), batch.schema)
                    writer.write_batch(batch)
                f.close()
        finally:
            if writer is not None:
                writer.close()
        os.replace(tmp, final)
    return datasets.Dataset.from_file(str(final))


def hf_dataset(
    paths: Sequence[str | Path],
    *,
    columns: Sequence[str] | None = None,
    info: Mapping[str, Any],
    cache_dir: str | Path | None = None,
) -> datasets.Dataset:
    """A memory-mapped ``datasets.Dataset`` of the Parquet parts at ``paths``, in their order (see the module).

    Args:
        paths: the parts: local paths or object-store URIs (all of one kind).
        columns: the columns to keep, in this order (all when None).
        info: what the rows are: ``run`` (the run id), ``artifacts`` (``stage/fingerprint`` -> anything JSON, or a
            list of them), ``lineage_columns`` (``uid``, ``parent_uid``, ``method``, …); other keys are kept.
        cache_dir: where the Arrow files go (``<scratch>/hf`` when None).

    Returns:
        The dataset; ``augdag_info(ds)`` gives ``info`` back.

    Raises:
        ConfError: ``info`` lacks a key or holds a value JSON cannot write.
        InputError: no parts, a missing or unreadable part, or one without a column or with other types than the
            first part's (its path named).
    """
    stored = _check_info(info)
    parts = [str(p) for p in paths]
    if not parts:
        raise InputError("hf_dataset: no Parquet parts given")
    where = Path(cache_dir) if cache_dir is not None else scratch_dir() / "hf"
    if missing := [p for p in parts if not objects.exists(p)]:
        raise InputError(f"{missing[0]}: no such Parquet part ({len(missing)} of {len(parts)} missing)")
    _check_parts(parts, columns)
    if objects.is_remote(parts[0]):
        ds = _streamed(parts, columns, where)
    else:
        cols = list(columns) if columns is not None else None
        ds = datasets.Dataset.from_parquet(parts, columns=cols, cache_dir=str(where))
    ds.info.description = describe(stored)
    return ds
