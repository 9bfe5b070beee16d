"""A training in a fork of the warm process (models/nmt/fairseq_zygote.py ``in_fork``), as the slot taggers and the
C2C generators train when several train at once: the same bytes as in this process, its record returned, its
exception raised here with its type, and a fork that dies said as such."""

from __future__ import annotations

import os
import random

import pytest
import torch

from conf.errors import InputError, ModelError
from models.c2c import C2CSettings, train_c2c
from models.nmt.fairseq_zygote import Zygote, in_fork
from models.tagger import TaggerSettings, train_tagger
from tests.fixtures.zygote_probe import said_and_died

torch.set_num_threads(1)

_CITIES = ["boston", "denver", "dallas", "seattle", "atlanta", "chicago", "miami", "tampa"]


def _rows(n: int) -> list[tuple[list[str], list[str]]]:
    rng, rows = random.Random(3), []
    for _ in range(n):
        a, b = rng.sample(_CITIES, 2)
        rows.append((["fly", "from", a, "to", b], ["O", "O", "B-from", "O", "B-to"]))
    return rows


SETTINGS = TaggerSettings(embedding_dim=16, hidden=8, epochs=3, batch_size=8, seed=5)


def test_a_tagger_trained_in_a_fork_is_the_bytes_trained_here(tmp_path):
    rows = _rows(40)
    here = train_tagger(rows, tmp_path / "here", SETTINGS, device="cpu", threads=1)
    forked = in_fork(train_tagger, rows, tmp_path / "fork", SETTINGS, device="cpu", threads=1)
    assert forked["losses"] == here["losses"] and forked["best_epoch"] == here["best_epoch"] == 3
    for name in sorted(os.listdir(tmp_path / "here")):
        assert (tmp_path / "fork" / name).read_bytes() == (tmp_path / "here" / name).read_bytes(), name


def test_a_c2c_generator_trained_in_a_fork_is_the_bytes_trained_here(tmp_path):
    pairs = [([["fly", "to", "<to>"]], [["go", "to", "<to>"], ["a", "flight", "to", "<to>"]])] * 4
    settings = C2CSettings(layers=1, d_model=16, heads=2, epochs=2, seed=1)
    train_c2c(pairs, tmp_path / "here", settings=settings, device="cpu", threads=1)
    in_fork(train_c2c, pairs, tmp_path / "fork", settings=settings, device="cpu", threads=1)
    names = sorted(os.listdir(tmp_path / "here"))
    assert names and names == sorted(os.listdir(tmp_path / "fork"))
    for name in names:
        assert (tmp_path / "fork" / name).read_bytes() == (tmp_path / "here" / name).read_bytes(), name


def test_the_forks_exception_is_raised_here_with_its_type_and_message(tmp_path):
    with pytest.raises(InputError, match="no sentence with tokens"):
        in_fork(train_tagger, [([], [])], tmp_path / "empty", SETTINGS, device="cpu", threads=1)
    assert not (tmp_path / "empty").exists()


def test_a_fork_that_dies_is_a_model_error_with_its_last_lines():
    zygote, lines = Zygote(preload=("torch",)), []
    try:
        with pytest.raises(ModelError, match=r"^said_and_died in a fork ended without an exit code \(killed\?\); its last 1 "):
            zygote.call(said_and_died, (), {}, threads=1, on_line=lines.append)
        assert lines == ["said before it died"]
    finally:
        zygote._proc.kill()
        zygote._proc.wait()
