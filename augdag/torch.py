"""A PyTorch ``IterableDataset`` over a view's Parquet parts: every row once per epoch over all ranks and workers.

The unit of work is a *row group* of a part. For an epoch ``e`` and a ``shuffle_seed`` ``s`` the row groups are
put in one order, ``numpy.random.default_rng([s, e]).permutation`` (the parts' own order without a seed), and dealt
to the ``world_size · num_workers`` shards in that order, each to the shard that has the fewest rows so far (the
lowest shard on a tie): every shard of every rank computes the same deal from the parts' footers, so the shards
cover every row group exactly once, and ranks get about as many rows each (row groups are not cut, so a rank can
get up to one row group more than another). Shard ``rank · num_workers + worker`` then reads its row groups one at
a time and, with a seed, passes them through a shuffle buffer of at most ``shuffle_buffer`` rows drawn by
``default_rng([s, e, shard])``: a row group arrives, the buffer and it are permuted together, and all but
``shuffle_buffer`` rows leave for the batches; what is left is permuted and emptied at the end. In each worker at
most one row group and the buffer, their permuted copy and one batch are in memory, whatever the view's size
(tests/e2e/test_loaders_memory.py).

The rank and world size come from ``torch.distributed`` when it is initialised, else from ``rank=`` and
``world_size=`` (one process simulating a rank), else 0 and 1; the worker from
``torch.utils.data.get_worker_info()``. Nothing here touches process-global state: no global seed, no torch thread
count (the generators are numpy ``Generator``s seeded from ``(seed, epoch, shard)``).

The order is a function of (seed, epoch, world size, workers per rank): the same for the same four. Call
``set_epoch(e)`` before each epoch, as with ``DistributedSampler``: a ``DataLoader`` without ``persistent_workers``
copies the dataset into its workers when each epoch's iteration starts, so they see it::

    ds = torch_dataset(parts, columns=["src", "tgt"], batch_size=64, shuffle_seed=1)
    loader = ds.loader(num_workers=2)          # workers read and shuffle Arrow; this process makes the lists
    for epoch in range(3):
        ds.set_epoch(epoch)
        for batch in loader:                   # {"src": [str, ...], "tgt": [str, ...]}
            ...

Parts are read as given: ``augdag``'s view passes parts it proved against their manifests (storage/integrity/);
parts on an object store (``s3://…``) are read through storage/objects/, by forked workers too.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.distributed
import torch.utils.data

from conf.errors import ConfError, InputError
from storage import objects

if TYPE_CHECKING:
    import pyarrow.fs as pafs

Batch = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class RowGroup:
    """One unit of work: row group ``index`` of the part at ``part``, with its ``num_rows``."""

    part: str
    index: int
    num_rows: int


def _open(part: str, filesystem: pafs.FileSystem | None) -> pq.ParquetFile:
    if filesystem is not None:
        return pq.ParquetFile(filesystem.open_input_file(part))
    return objects.parquet_file(part)


def _tensor_columns(meta: Sequence[pq.FileMetaData], schema: pa.Schema) -> frozenset[str]:
    """The columns served as tensors: floats (a null is NaN), and integers and booleans that no row group's
    statistics show a null in (any other one is a list, where a null is None)."""
    out = set()
    for field in schema:
        exact = pa.types.is_integer(field.type) or pa.types.is_boolean(field.type)
        if pa.types.is_floating(field.type) or (exact and all(_no_nulls(m, field.name) for m in meta)):
            out.add(field.name)
    return frozenset(out)


def _no_nulls(meta: pq.FileMetaData, column: str) -> bool:
    names = [meta.schema.column(i).path for i in range(meta.num_columns)]
    if column not in names:
        return False
    c = names.index(column)
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(c).statistics
        if stats is None or not stats.has_null_count or stats.null_count > 0:
            return False
    return True


def keep_batch(batch: Any) -> Any:
    """A ``DataLoader``'s ``collate_fn`` for this dataset's batches: each as it is (see ``ParquetIterableDataset``)."""
    return batch


def deal(units: Sequence[RowGroup], shards: int, order: Sequence[int]) -> list[list[RowGroup]]:
    """The row groups of each of ``shards`` shards: ``units`` in ``order``, each to the shard with the fewest rows
    so far (the lowest on a tie)."""
    out: list[list[RowGroup]] = [[] for _ in range(shards)]
    load = [(0, s) for s in range(shards)]
    for i in order:
        rows, s = heapq.heappop(load)
        out[s].append(units[i])
        heapq.heappush(load, (rows + units[i].num_rows, s))
    return out


class ParquetIterableDataset(torch.utils.data.IterableDataset[Batch]):
    """Batches of a view's rows, split across ``DataLoader`` workers and distributed ranks (see the module).

    Each batch is a ``dict`` column -> values: a 1-d ``torch.Tensor`` for a float column (null as NaN) and for an
    integer or boolean column without nulls; a ``list`` of Python values (``str``, ``None``, nested lists) for every
    other column. The dataset batches itself: iterate ``ds.loader(num_workers=2)`` (a ``Loader``: its workers send
    Arrow, the main process makes the lists), or ``DataLoader(ds, batch_size=None, collate_fn=keep_batch,
    num_workers=2)``, the same batches in the same order; a ``DataLoader`` without ``collate_fn=keep_batch`` walks
    every list value by value (``default_convert``): again the same rows, a few times slower; and a
    ``DataLoader`` of your own draws its workers' seed from torch's global generator unless given ``generator=``.
    """

    def __init__(
        self,
        units: Sequence[RowGroup],
        *,
        schema: pa.Schema,
        tensor_columns: frozenset[str],
        batch_size: int,
        shuffle_seed: int | None,
        shuffle_buffer: int,
        drop_last: bool,
        rank: int | None,
        world_size: int | None,
        filesystem: pafs.FileSystem | None,
    ) -> None:
        super().__init__()
        self.units = list(units)
        self.schema = schema
        self.tensor_columns = tensor_columns
        self.batch_size = batch_size
        self.shuffle_seed = shuffle_seed
        self.shuffle_buffer = shuffle_buffer
        self.drop_last = drop_last
        self.rank, self.world_size = rank, world_size
        self.filesystem = filesystem
        self.epoch = 0

    @property
    def num_rows(self) -> int:
        """The rows of one epoch over all ranks and workers."""
        return sum(u.num_rows for u in self.units)

    def loader(self, **options: Any) -> Loader:
        """A ``Loader`` of these batches (``options``: ``DataLoader``'s ``num_workers``, ``pin_memory``, …)."""
        return Loader(self, **options)

    def set_epoch(self, epoch: int) -> None:
        """Read epoch ``epoch``'s order from now on (``DistributedSampler.set_epoch``'s contract)."""
        self.epoch = epoch

    def ranks(self) -> tuple[int, int]:
        """(rank, world size): ``torch.distributed``'s when initialised, else the ones given, else (0, 1)."""
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank(), torch.distributed.get_world_size()
        return (self.rank or 0), (self.world_size or 1)

    def shard(self, rank: int, world_size: int, worker: int, num_workers: int) -> list[RowGroup]:
        """The row groups worker ``worker`` of ``num_workers`` on rank ``rank`` of ``world_size`` reads this epoch,
        in its reading order."""
        if self.shuffle_seed is None:
            order: Sequence[int] = range(len(self.units))
        else:
            order = np.random.default_rng([self.shuffle_seed, self.epoch]).permutation(len(self.units)).tolist()
        return deal(self.units, world_size * num_workers, order)[rank * num_workers + worker]

    def __iter__(self) -> Iterator[Batch]:
        for batch in self.arrow_batches():
            yield to_batch(batch, self.tensor_columns)

    def _read(self, unit: RowGroup) -> pa.Table:
        f = _open(unit.part, self.filesystem)
        try:
            return f.read_row_group(unit.index, columns=self.schema.names)
        finally:
            f.close()

    def _shuffled(self, units: list[RowGroup], rng: np.random.Generator | None) -> Iterator[pa.Table]:
        """The rows of ``units``, through the shuffle buffer when ``rng`` is given."""
        buffer = self.schema.empty_table()
        for unit in units:
            table = self._read(unit)
            if rng is None:
                yield table
                continue
            pool = pa.concat_tables([buffer, table])
            pool = pool.take(rng.permutation(pool.num_rows))
            out = max(0, pool.num_rows - self.shuffle_buffer)
            buffer = pool.slice(out).combine_chunks()
            yield pool.slice(0, out)
        if rng is not None and buffer.num_rows:
            yield buffer.take(rng.permutation(buffer.num_rows))

    def arrow_batches(self) -> Iterator[pa.RecordBatch]:
        """This process's share of the epoch (its rank's, and its worker's in a ``DataLoader`` worker) as Arrow
        record batches of ``batch_size`` rows, in order."""
        rank, world_size = self.ranks()
        info = torch.utils.data.get_worker_info()
        worker, num_workers = (0, 1) if info is None else (info.id, info.num_workers)
        shard = rank * num_workers + worker
        rng = None if self.shuffle_seed is None else np.random.default_rng([self.shuffle_seed, self.epoch, shard])
        carry = self.schema.empty_table()
        for table in self._shuffled(self.shard(rank, world_size, worker, num_workers), rng):
            carry = pa.concat_tables([carry, table])
            start = 0
            while carry.num_rows - start >= self.batch_size:
                yield carry.slice(start, self.batch_size).combine_chunks().to_batches()[0]
                start += self.batch_size
            carry = carry.slice(start)
        if carry.num_rows and not self.drop_last:
            yield carry.combine_chunks().to_batches()[0]


def to_batch(batch: pa.RecordBatch, tensor_columns: frozenset[str]) -> Batch:
    """``batch`` as ``ParquetIterableDataset`` yields it: ``tensor_columns`` as tensors, the others as lists."""
    out: Batch = {}
    for name, col in zip(batch.schema.names, batch.columns):
        if name in tensor_columns:
            values = col.to_numpy(zero_copy_only=False)
            out[name] = torch.from_numpy(values if values.flags.writeable else values.copy())
        else:
            out[name] = col.to_pylist()
    return out


def _ipc(batch: pa.RecordBatch) -> pa.Buffer:
    """``batch`` as an Arrow IPC stream: only its rows (pickling a sliced batch would copy the whole buffers)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


class ArrowBatches(torch.utils.data.IterableDataset[pa.Buffer]):
    """What a ``Loader``'s workers yield: ``dataset``'s batches as Arrow IPC buffers (a copy of the bytes each)."""

    def __init__(self, dataset: ParquetIterableDataset) -> None:
        super().__init__()
        self.dataset = dataset  # the dataset itself: a set_epoch after the Loader was made reaches the workers

    def __iter__(self) -> Iterator[pa.Buffer]:
        return map(_ipc, self.dataset.arrow_batches())


class Loader:
    """A ``DataLoader`` over a ``ParquetIterableDataset`` whose workers read and shuffle Arrow and whose main
    process makes the Python values (``to_batch``): a worker sends its batch as Arrow bytes, not as pickled lists
    of strings. Iterating gives the dataset's batches in the order a ``DataLoader`` over the dataset gives them.

    Args:
        dataset: the dataset (its ``set_epoch`` applies to the next iteration).
        options: ``DataLoader``'s (``num_workers``, ``multiprocessing_context``, ``pin_memory``, …); not
            ``batch_size``, ``collate_fn`` or ``sampler``, which the dataset's batching replaces.
    """

    def __init__(self, dataset: ParquetIterableDataset, **options: Any) -> None:
        if clash := sorted({"batch_size", "collate_fn", "sampler", "batch_sampler"} & options.keys()):
            raise ConfError(f"loader(): {', '.join(clash)} cannot be given; the dataset batches (batch_size=) itself")
        self.dataset = dataset
        self.pin_memory = bool(options.pop("pin_memory", False))
        # a DataLoader draws its workers' base seed from `generator` at each epoch, from torch's global one when
        # there is none: this dataset draws nothing from torch, so a generator of its own leaves the global one alone
        options.setdefault("generator", torch.Generator().manual_seed(0))
        self.dataloader = torch.utils.data.DataLoader(ArrowBatches(dataset), batch_size=None, collate_fn=keep_batch, **options)

    def set_epoch(self, epoch: int) -> None:
        """The dataset's ``set_epoch``."""
        self.dataset.set_epoch(epoch)

    def __iter__(self) -> Iterator[Batch]:
        for buffer in self.dataloader:
            batch = to_batch(pa.ipc.open_stream(buffer).read_next_batch(), self.dataset.tensor_columns)
            if self.pin_memory:
                batch = {k: v.pin_memory() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
            yield batch


def torch_dataset(
    paths: Sequence[str | Path],
    *,
    columns: Sequence[str] | None = None,
    batch_size: int = 1024,
    shuffle_seed: int | None = None,
    shuffle_buffer: int = 8192,
    filesystem: pafs.FileSystem | None = None,
    drop_last: bool = False,
    rank: int | None = None,
    world_size: int | None = None,
) -> ParquetIterableDataset:
    """An ``IterableDataset`` of batches over the Parquet parts at ``paths`` (see the module for the split).

    Args:
        paths: the parts, in the view's order: local paths, object-store URIs (``s3://bucket/key``, opened by
            storage/objects/), or paths in ``filesystem``.
        columns: the columns to read, in this order (all of the first part's when None).
        batch_size: rows per batch; a shard's last batch is smaller unless ``drop_last``.
        shuffle_seed: None reads in the parts' order; a seed gives one order per ``(seed, epoch)``.
        shuffle_buffer: rows held back in each worker to mix row groups (with a seed).
        filesystem: a ``pyarrow.fs.FileSystem`` the paths are in (None: this machine or the URI's store).
        drop_last: drop each shard's last, smaller batch (then rows can be left out of an epoch).
        rank: this process's rank when ``torch.distributed`` is not initialised (simulated ranks).
        world_size: the number of ranks, with ``rank``.

    Returns:
        The dataset; its ``set_epoch`` chooses the epoch's order.

    Raises:
        ConfError: a bad ``batch_size``, ``shuffle_buffer``, ``rank`` or ``world_size``.
        InputError: no parts, or a column that a part lacks (naming the part).
    """
    if batch_size < 1 or shuffle_buffer < 0:
        raise ConfError(f"torch_dataset: batch_size = {batch_size} must be >= 1 and shuffle_buffer = {shuffle_buffer} >= 0")
    if (rank is None) != (world_size is None) or (world_size is not None and not 0 <= (rank or 0) < world_size):
        raise ConfError(f"torch_dataset: rank = {rank}, world_size = {world_size}: give both, with 0 <= rank < world_size")
    parts = [str(p) for p in paths]
    if not parts:
        raise InputError("torch_dataset: no Parquet parts given")
    units: list[RowGroup] = []
    metas: list[pq.FileMetaData] = []
    schema: pa.Schema | None = None
    for part in parts:
        f = _open(part, filesystem)
        try:
            arrow = f.schema_arrow
            wanted = list(columns) if columns is not None else (schema or arrow).names
            if missing := [c for c in wanted if arrow.get_field_index(c) < 0]:
                raise InputError(f"{part}: no column {', '.join(missing)} (it has {', '.join(arrow.names)})")
            part_schema = pa.schema([arrow.field(c) for c in wanted])
            if schema is None:
                schema = part_schema
            elif part_schema.types != schema.types:
                found = ", ".join(f"{f.name}: {f.type}" for f in part_schema)
                raise InputError(f"{part}: column types ({found}) differ from the first part's; choose columns=")
            metas.append(f.metadata)
            units += [RowGroup(part, g, f.metadata.row_group(g).num_rows) for g in range(f.metadata.num_row_groups)]
        finally:
            f.close()
    assert schema is not None
    return ParquetIterableDataset(
        units,
        schema=schema,
        tensor_columns=_tensor_columns(metas, schema),
        batch_size=batch_size,
        shuffle_seed=shuffle_seed,
        shuffle_buffer=shuffle_buffer,
        drop_last=drop_last,
        rank=rank,
        world_size=world_size,
        filesystem=filesystem,
    )
