"""augdag.torch's IterableDataset and augdag.hf's Dataset over Parquet parts (issue 49, the loaders)."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch.utils.data

from augdag.hf import augdag_info, hf_dataset
from augdag.torch import torch_dataset
from conf.errors import ConfError, InputError

# uneven parts, cut into row groups of 700 rows (a part of 1 row, one whose last group has 1 row): 10,000 rows
SIZES = (3000, 1, 2499, 4500)


def fresh_workers() -> dict:
    """DataLoader workers forked from a fresh interpreter (a forkserver that imported augdag.torch once): a worker
    forked from a pytest process inherits what other tests left in it (signal handlers, object-store filesystems
    bound to a dead endpoint, held locks) and died of it under xdist; spawned, each of the ~24 workers here paid
    torch's import again (the module's test took 92 s of a loaded `make test`)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["augdag.torch"])
    return {"multiprocessing_context": context}


FRESH_WORKERS = fresh_workers()
# spawned workers take this process's environment as it is now (a forkserver's is the one it started with): the
# object store's endpoint, set by its fixture
SPAWNED = {"multiprocessing_context": "spawn"}


def write_parts(directory: Path, sizes=SIZES, row_group_size: int = 700, pad: int = 0) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths, start = [], 0
    for i, n in enumerate(sizes):
        ids = np.arange(start, start + n)
        table = pa.table(
            {
                "uid": [f"u{j:07d}" + "x" * pad for j in ids],
                "n": ids,
                "score": ids / 8,
                "parent_uid": [None if j % 3 else f"p{j}" for j in ids],
            }
        )
        paths.append(directory / f"part-{i:05d}.parquet")
        pq.write_table(table, paths[-1], row_group_size=row_group_size)
        start += n
    return paths


def one_epoch(paths, *, seed, epoch, world_size=2, num_workers=2, batch_size=128) -> list[list[int]]:
    """Each simulated rank's rows in the order its DataLoader (``num_workers`` workers) yields them."""
    ranks = []
    for rank in range(world_size):
        ds = torch_dataset(paths, batch_size=batch_size, shuffle_seed=seed, rank=rank, world_size=world_size)
        ds.set_epoch(epoch)
        rows: list[int] = []
        for batch in ds.loader(num_workers=num_workers, **FRESH_WORKERS):
            assert len(batch["uid"]) <= batch_size
            rows += batch["n"].tolist()
        ranks.append(rows)
    return ranks


def test_torch_dataset_two_workers_two_ranks_read_every_row_once_in_one_order_per_seed_and_epoch(tmp_path):
    paths = write_parts(tmp_path / "view")
    first = one_epoch(paths, seed=7, epoch=0)
    rows = first[0] + first[1]
    assert sorted(rows) == list(range(10_000))  # every row, once, over both ranks and their 4 workers
    # the row groups are dealt to the 4 shards by rows: the ranks differ by less than one row group (700 rows)
    assert abs(len(first[0]) - len(first[1])) < 700
    assert one_epoch(paths, seed=7, epoch=0) == first  # the same seed and epoch: the same order on every rank
    next_epoch, other_seed = one_epoch(paths, seed=7, epoch=1), one_epoch(paths, seed=8, epoch=0)
    for other in (next_epoch, other_seed):
        assert sorted(other[0] + other[1]) == list(range(10_000))
        assert other[0] != first[0] and other[1] != first[1]
    # one loader for every epoch: set_epoch reaches its workers; a plain DataLoader gives the same rows in order
    ds = torch_dataset(paths, batch_size=128, shuffle_seed=7, rank=1, world_size=2)
    loader, global_rng = ds.loader(num_workers=2, **FRESH_WORKERS), torch.random.get_rng_state()
    assert [n for b in loader for n in b["n"].tolist()] == first[1]
    assert torch.equal(torch.random.get_rng_state(), global_rng)  # torch's global generator: not drawn from
    ds.set_epoch(1)
    assert [n for b in loader for n in b["n"].tolist()] == next_epoch[1]
    plain = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, **FRESH_WORKERS)  # default_convert: the same, slower
    assert torch.cat([b["n"] for b in plain]).tolist() == next_epoch[1]


def test_torch_dataset_without_a_seed_reads_each_shards_row_groups_in_the_parts_order(tmp_path):
    paths = write_parts(tmp_path / "view")
    ds = torch_dataset(paths, batch_size=1000)
    assert [(u.part, u.index, u.num_rows) for u in ds.shard(0, 1, 0, 1)[:6]] == [
        (str(paths[0]), 0, 700),
        (str(paths[0]), 1, 700),
        (str(paths[0]), 2, 700),
        (str(paths[0]), 3, 700),
        (str(paths[0]), 4, 200),
        (str(paths[1]), 0, 1),
    ]
    batches = list(ds)
    assert [len(b["uid"]) for b in batches] == [1000] * 10
    assert torch.cat([b["n"] for b in batches]).tolist() == list(range(10_000))
    assert batches[0]["uid"][:2] == ["u0000000", "u0000001"] and batches[0]["parent_uid"][:4] == ["p0", None, None, "p3"]
    assert batches[0]["score"].dtype == torch.float64 and batches[0]["score"][3].item() == 0.375


def test_torch_dataset_shuffle_buffer_mixes_row_groups_and_drop_last_drops_each_shards_remainder(tmp_path):
    paths = write_parts(tmp_path / "view")
    ds = torch_dataset(paths, batch_size=1000, shuffle_seed=3, shuffle_buffer=2000, drop_last=True)
    rows = torch.cat([b["n"] for b in ds]).tolist()
    assert len(rows) == 10_000 - 10_000 % 1000 and len(set(rows)) == len(rows)
    first = rows[:1000]  # the first batch holds rows of more than one part (the buffer mixes row groups)
    assert len({np.searchsorted(np.cumsum(SIZES), r, side="right") for r in first}) > 1
    ds = torch_dataset(paths, batch_size=1000, shuffle_seed=3, shuffle_buffer=2000, drop_last=True, rank=1, world_size=3)
    assert [len(b["n"]) for b in ds] == [1000, 1000, 1000]  # rank 1 of 3: 3,301 rows, its last 301 dropped


def test_torch_dataset_refuses_a_missing_column_and_a_rank_without_world_size(tmp_path):
    paths = write_parts(tmp_path / "view")
    with pytest.raises(InputError) as e:
        torch_dataset(paths, columns=["uid", "tgt"])
    assert str(e.value) == f"{paths[0]}: no column tgt (it has uid, n, score, parent_uid)"
    with pytest.raises(ConfError) as e:
        torch_dataset(paths, rank=1)
    assert str(e.value) == "torch_dataset: rank = 1, world_size = None: give both, with 0 <= rank < world_size"


def test_hf_dataset_holds_the_parts_rows_memory_mapped_and_its_info_names_the_run(tmp_path):
    paths = write_parts(tmp_path / "view")
    info = {
        "run": "nightly-20261202-0300",
        "view": "bitext",
        "artifacts": {"clean/3f9a0c": "bitext", "rejuvenate/77b1e2": "rejuvenated"},
        "lineage_columns": ["uid", "parent_uid"],
    }
    ds = hf_dataset(paths, columns=["uid", "n", "parent_uid"], info=info, cache_dir=tmp_path / "hf")
    expected = pa.concat_tables(pq.read_table(p, columns=["uid", "n", "parent_uid"]) for p in paths)
    assert ds.num_rows == 10_000 and ds.data.table.equals(expected)
    assert all(f["filename"].startswith(str(tmp_path / "hf")) for f in ds.cache_files)  # memory-mapped Arrow files
    assert ds.info.description.splitlines()[:3] == [
        "augdag view bitext of run nightly-20261202-0300",
        "artifacts (stage/fingerprint): clean/3f9a0c, rejuvenate/77b1e2",
        "lineage columns: uid, parent_uid",
    ]
    ds.save_to_disk(str(tmp_path / "saved"))
    assert augdag_info(datasets.load_from_disk(str(tmp_path / "saved"))) == json.loads(json.dumps(info))


def test_hf_dataset_refuses_info_without_the_run(tmp_path):
    paths = write_parts(tmp_path / "view", sizes=(10,))
    with pytest.raises(ConfError) as e:
        hf_dataset(paths, info={"artifacts": [], "lineage_columns": []}, cache_dir=tmp_path / "hf")
    assert str(e.value) == "hf_dataset: info['run'] must name the run that made the rows (found None)"


def test_hf_dataset_refuses_a_part_without_a_column_naming_it(tmp_path):
    paths = write_parts(tmp_path / "view", sizes=(10, 10))
    pq.write_table(pq.read_table(paths[1]).drop_columns(["parent_uid"]), paths[1])
    with pytest.raises(InputError) as e:
        hf_dataset(paths, info={"run": "r1", "artifacts": [], "lineage_columns": []}, cache_dir=tmp_path / "hf")
    assert str(e.value) == f"{paths[1]}: no column parent_uid (it has uid, n, score)"


def test_torch_dataset_batches_hold_tensors_for_numbers_without_nulls_and_lists_for_the_rest(tmp_path):
    table = pa.table({"ok": [True, False, True], "f": [0.5, None, 2.0], "i": [1, None, 3], "tags": [["a"], [], None]})
    pq.write_table(table, tmp_path / "part-00000.parquet")
    (batch,) = torch_dataset([tmp_path / "part-00000.parquet"], batch_size=8)
    assert batch["ok"].tolist() == [True, False, True] and batch["ok"].dtype == torch.bool
    assert batch["f"][0].item() == 0.5 and torch.isnan(batch["f"][1]) and batch["f"][2].item() == 2.0
    assert batch["i"] == [1, None, 3] and batch["tags"] == [["a"], [], None]


def test_loaders_read_parts_on_an_object_store(tmp_path, s3_env):
    from storage import objects

    store = s3_env.bucket("aug-loaders")
    uris = []
    for path in write_parts(tmp_path / "view", sizes=(300, 200)):
        uris.append(f"{store}/view/{path.name}")
        objects.put_bytes(path.read_bytes(), uris[-1])
    ds = torch_dataset(uris, columns=["n"], batch_size=64, shuffle_seed=5)
    assert sorted(torch.cat([b["n"] for b in ds]).tolist()) == list(range(500))
    assert sorted(torch.cat([b["n"] for b in ds.loader(num_workers=2, timeout=60, **SPAWNED)]).tolist()) == list(range(500))
    hf = hf_dataset(uris, columns=["uid", "n"], info={"run": "r1", "artifacts": [], "lineage_columns": ["uid"]},
                    cache_dir=tmp_path / "hf")  # fmt: skip
    assert hf["n"] == list(range(500)) and hf["uid"][499] == "u0000499"
    assert hf.info.description.startswith("augdag run r1\n")
