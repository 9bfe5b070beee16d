"""conf/effects_mt.yaml (issue 50): the Multi30k effects profile validates at each of scripts/device_effects.sh's sizes,
with the arms, test sets, seeds and model sizes docs/effects.md promises. The tiny size runs end to end in
tests/e2e/test_effects_mt.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, subprocess_env

SCRIPT = REPO / "scripts" / "device_effects.sh"


def multi30k_like(root: Path) -> Path:
    """Made-up files in the layout the profile reads (Multi30k task 1 and task 2's captions), from the demo grammar."""
    from demo.writer import write_demo

    demo = root / "demo"
    write_demo(demo, bitext_rows=300, mono_rows=300, test_rows=50, bad_rows=False)
    task1, task2 = root / "data" / "multi30k_en_de", root / "data" / "multi30k_task2_mono"
    task1.mkdir(parents=True)
    task2.mkdir()
    for side in ("en", "de"):
        shutil.copy(demo / f"train.{side}", task1 / f"train.{side}")
        shutil.copy(demo / f"test.{side}", task1 / f"test.{side}")
        shutil.copy(demo / f"test.{side}", task1 / f"test2017.{side}")
    shutil.copy(demo / "mono.en", task2 / "mono.en")
    return root / "data"


def check(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SCRIPT), "--check", "--no-install", "--out", str(tmp_path / "out"), *args],
        env=subprocess_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return multi30k_like(tmp_path_factory.mktemp("effects"))


def test_the_gpu_profile_is_the_file_as_written_with_base_students_and_three_seeds(data, tmp_path, monkeypatch):
    done = check(tmp_path, "--data", str(data))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    import flows  # noqa: F401 — registers the pipelines the profile lists
    from conf.loader import load_profile

    monkeypatch.setenv("AUGDAG_EFFECTS_DATA", str(data))
    conf = load_profile(str(REPO / "conf" / "effects_mt.yaml"), [], cache=tmp_path / "cache")
    nmt = conf.train_nmt
    assert list(nmt.experiments) == ["baseline", "syn_random", "syn_uncertainty", "rejuvenated", "para_10_1_ct", "robust"]
    assert [t if isinstance(t, str) else t.label for t in nmt.tests] == [
        "test2016",
        "test2017",
        "test2016+UpperCase",
        "test2016+TitleCase",
    ]
    assert (nmt.baseline, nmt.seeds) == ("baseline", [1, 2, 3])
    assert nmt.experiments["para_10_1_ct"].copies == {"bitext": 10, "paraphrased": 1}
    for model in (
        conf.self_training.teacher,
        conf.rejuvenation.identification,
        conf.paraphrase.generator.forward,
        conf.paraphrase.generator.backward,
        nmt.student,
    ):  # transformer-base (Vaswani et al. 2017), one training recipe for every model
        t = model.train
        assert (t.encoder_layers, t.decoder_layers, t.embed_dim, t.ffn_dim, t.heads, t.max_update) == (6, 6, 512, 2048, 8, 15000)
    assert conf.self_training.mono == ["captions"]
    assert conf.datasets["captions"].path == data / "multi30k_task2_mono" / "mono.en"


def test_the_cpu_size_shrinks_the_models_samples_and_seeds_only(data, tmp_path):
    done = check(tmp_path, "--data", str(data), "--size", "cpu")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "self_training.teacher.train={max_update: 800, vocab_size: 8000}",
        "rejuvenation.identification.train={max_update: 800, vocab_size: 8000}",
        "paraphrase.generator.forward.train={max_update: 800, vocab_size: 8000}",
        "paraphrase.generator.backward.train={max_update: 800, vocab_size: 8000}",
        "train_nmt.student.train={max_update: 400, vocab_size: 8000}",
        "self_training.sampling.budget=5000",
        "mt_paraphrase.share=0.1",
        "train_nmt.seeds=[1, 2]",
        "train_nmt.experiments.para_10_1_ct.continue_on.max_update=100",
        "train_nmt.experiments.para_10_1_ct.continue_on.lr=0.0003",
        "train_nmt.parallel_arms=2",  # a 64-dim student keeps one of the 2 cores busy: two arms train at once
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--size", "huge"], "device_effects.sh: --size must be gpu, cpu or tiny, not 'huge'"),
        (["--sizes", "cpu"], "device_effects.sh: unknown argument '--sizes' (see --help)"),
    ],
)
def test_a_mistyped_argument_is_one_line_and_exit_2(data, tmp_path, args, message):
    done = check(tmp_path, "--data", str(data), *args)
    assert (done.returncode, done.stderr.strip(), done.stdout) == (2, message, "")


def test_missing_data_names_the_file_and_how_to_give_it(tmp_path):
    done = check(tmp_path, "--data", str(tmp_path / "nowhere"))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"device_effects.sh: {tmp_path}/nowhere/multi30k_en_de/train.en not found (--data DIR or $AUGDAG_EFFECTS_DATA)"
    )
