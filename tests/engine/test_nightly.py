"""The nightly flow and `augdag retry` on a small ingest profile: dependency order, overlapping nights,
failures that skip what depends on them, and forced recomputes (the demo test runs the full nightly)."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

import pytest
from filelock import FileLock
from typer.testing import CliRunner

from conf.errors import ConfError
from conf.loader import load_profile
from flows.cli import app
from storage.catalog import Catalog

runner = CliRunner()


def write_profile(root: Path, *, lines: int = 50, extra: str = "") -> Path:
    for name in ("a", "b"):
        (root / f"{name}.en").write_text("".join(f"hello {name} world {i}\n" for i in range(lines)))
        (root / f"{name}.de").write_text("".join(f"hallo {name} welt {i}\n" for i in range(lines)))
    profile = root / "p.yaml"
    profile.write_text(
        "pipelines: [ingest]\nshard_size: 20\norchestration: {retries: 0}\n"
        + extra
        + f"datasets:\n  a: {{kind: bitext, format: text, src: {root}/a.en, tgt: {root}/a.de}}\n"
        f"  b: {{kind: bitext, format: text, src: {root}/b.en, tgt: {root}/b.de}}\n"
    )
    return profile


def test_pipelines_run_after_their_upstreams_and_side_by_side():
    from flows.engine.nightly import run_pipelines

    pipelines = ["ingest", "self_training", "rejuvenation", "train_nmt", "paraphrase", "train_classifier"]
    events, lock, running, peak = [], threading.Lock(), set(), [0]

    def run_one(name: str) -> dict:
        with lock:
            events.append(("start", name))
            running.add(name)
            peak[0] = max(peak[0], len(running))
        time.sleep(0.2)
        with lock:
            running.discard(name)
            events.append(("end", name))
        return {"pipeline": name, "status": "failed" if name == "paraphrase" else "completed", "stages": []}

    def prepare() -> None:
        events.append(("prepare", ""))

    results = run_pipelines(pipelines, 2, run_one, prepare=prepare)
    order = {e: i for i, e in enumerate(events)}
    # the model stack is imported once, after ingest ran alone and before two pipelines first run at once
    assert events[:3] == [("start", "ingest"), ("end", "ingest"), ("prepare", "")]
    assert events.count(("prepare", "")) == 1
    for child, parents in (("train_nmt", ("self_training", "rejuvenation")), ("self_training", ("ingest",))):
        assert all(order[("end", p)] < order[("start", child)] for p in parents)
    assert peak[0] == 2  # two at once, never more
    by_name = {r["pipeline"]: r for r in results}
    assert [r["pipeline"] for r in results] == pipelines
    assert by_name["train_classifier"]["status"] == "skipped" and ("start", "train_classifier") not in order
    assert by_name["train_classifier"]["error"] == "upstream pipeline(s) paraphrase did not complete"
    events.clear()  # one at a time, or a chain: nothing ever runs side by side, so nothing is imported ahead
    run_pipelines(pipelines, 1, run_one, prepare=prepare)
    run_pipelines(["ingest", "self_training", "train_nmt"], 2, run_one, prepare=prepare)
    assert ("prepare", "") not in events and len(events) == 2 * (len(pipelines) - 1) + 2 * 3


def test_a_free_slot_goes_to_the_first_ready_pipeline_in_the_profiles_order():
    """train_nmt, ready once rejuvenation ends, takes that slot before c2c, which was ready (after ingest) all along:
    a slot is given when it frees, not by a queue filled in the order pipelines became ready."""
    from flows.engine.nightly import run_pipelines

    starts: list[str] = []
    seconds = {"rejuvenation": 0.1, "epida": 0.6}

    def run_one(name: str) -> dict:
        starts.append(name)
        time.sleep(seconds.get(name, 0.05))
        return {"pipeline": name, "status": "completed", "stages": []}

    run_pipelines(["ingest", "rejuvenation", "train_nmt", "epida", "c2c"], 2, run_one)
    assert starts == ["ingest", "rejuvenation", "epida", "train_nmt", "c2c"]


@pytest.mark.parametrize(
    ("pipelines", "parallel", "imports"),
    [
        ("ingest,rejuvenation,paraphrase,self_training,mt_paraphrase,train_nmt", 2, True),
        ("ingest,rejuvenation,paraphrase,self_training,mt_paraphrase,train_nmt", 1, False),
        ("ingest,self_training,train_nmt", 2, False),  # a chain: never two at once
        ("ingest", 2, False),
    ],
)
def test_side_by_side_tells_before_the_night_whether_it_will_import_ahead(tmp_path, pipelines, parallel, imports):
    """The CLI imports the model stack while Prefect's server starts when ``side_by_side``: it must agree with
    ``run_pipelines``, which imports it before two pipelines first run at once (with the profile's view deps)."""
    from flows.engine.nightly import run_pipelines, side_by_side

    conf = load_profile("demo", [f"pipelines=[{pipelines}]", f"nightly.parallel={parallel}"], cache=tmp_path)
    prepared: list[int] = []

    def run_one(name: str) -> dict:
        time.sleep(0.02)
        return {"pipeline": name, "status": "completed", "stages": []}

    run_pipelines(conf.pipelines, parallel, run_one, prepare=lambda: prepared.append(1), conf=conf)
    assert side_by_side(conf) is imports
    assert prepared == ([1] if imports else [])


def nightly(profile: Path, cache: Path, *sets: str) -> dict:
    from flows.engine.nightly import nightly_flow

    return nightly_flow(profile=str(profile), overrides=list(sets), cache=str(cache))


def test_an_overlapping_night_is_skipped_or_waits(prefect_harness, tmp_path):
    profile, cache = write_profile(tmp_path), tmp_path / "cache"
    cache.mkdir()
    held = FileLock(cache / "nightly.lock", thread_local=False)  # released by a timer thread
    with held:
        skipped = nightly(profile, cache)
    assert skipped["status"] == "skipped" and "still holds" in skipped["error"]
    assert not (cache / "catalog.duckdb").exists() or Catalog(cache).query("SELECT * FROM runs").num_rows == 0
    held.acquire()
    threading.Timer(1.0, held.release).start()
    t0 = time.perf_counter()
    waited = nightly(profile, cache, "nightly.overlap=wait")
    assert waited["status"] == "completed" and time.perf_counter() - t0 >= 1.0
    assert waited["totals"]["shards_computed"] == waited["totals"]["shards"] == 2 * (3 + 1 + 3)


def test_a_failed_pipeline_fails_the_night_and_skips_what_depends_on_it(prefect_harness, tmp_path):
    from flows.engine.nightly import NightlyFailed

    profile = write_profile(tmp_path, extra="rejuvenation: {bitext: a}\n")
    profile.write_text(profile.read_text().replace("pipelines: [ingest]", "pipelines: [ingest, rejuvenation]"))
    (tmp_path / "b.de").write_text("too short\n")  # b is no longer line-aligned: ingest fails on it
    with pytest.raises(NightlyFailed) as failed:
        nightly(profile, tmp_path / "cache")
    summary = failed.value.summary
    assert [(c["pipeline"], c["status"]) for c in summary["pipelines"]] == [("ingest", "failed"), ("rejuvenation", "skipped")]
    assert "b.en and" in summary["pipelines"][0]["error"] and summary["pipelines"][0]["run_id"].startswith("ingest-")
    recorded = Catalog(tmp_path / "cache").query("SELECT pipeline, status FROM runs ORDER BY pipeline").to_pylist()
    assert recorded == [{"pipeline": "ingest", "status": "failed"}, {"pipeline": "nightly", "status": "failed"}]


def _hashes(cache: Path, stage: str) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((cache / "artifacts" / stage).rglob("*.parquet"))}


def test_retry_from_a_stage_recomputes_it_and_its_descendants_only(prefect_harness, tmp_path):
    from flows.engine.retry import forced_artifacts
    from storage.runs import load_run

    profile, cache = write_profile(tmp_path), tmp_path / "cache"
    first = runner.invoke(app, ["run", "ingest", "--config", str(profile), "--cache", str(cache)])
    assert first.exit_code == 0, first.output
    catalog = Catalog(cache)
    run_id = catalog.query("SELECT run_id FROM runs").column(0)[0].as_py()
    run = load_run(catalog, run_id)

    def forced(**names) -> list[str]:
        return list(forced_artifacts(catalog, run, **{"stage": None, "start": None, **names}).values())

    assert forced(start="read") == ["read[a]", "duplicates[a]", "clean[a]", "read[b]", "duplicates[b]", "clean[b]"]
    assert forced(start="duplicates") == ["duplicates[a]", "clean[a]", "duplicates[b]", "clean[b]"]
    assert forced(start="duplicates[b]") == ["duplicates[b]", "clean[b]"]
    assert forced(stage="duplicates") == ["duplicates[a]", "duplicates[b]"]
    with pytest.raises(
        ConfError,
        match=r"has no stage 'nope'; its stages and models: clean, duplicates, read\. "
        r"Hint: S or S\[dataset\], e\.g\. read\[a\]",
    ):
        forced(stage="nope")

    before = _hashes(cache, "clean")
    again = runner.invoke(app, ["retry", run_id, "--from", "duplicates", "--cache", str(cache)])
    assert again.exit_code == 0, again.output
    last = catalog.query("SELECT run_id FROM runs ORDER BY started_at DESC LIMIT 1").column(0)[0].as_py()
    counts = catalog.query(
        "SELECT stage, count(*) FILTER (status = 'computed') AS computed, count(*) AS shards "
        "FROM stage_runs WHERE run_id = $r GROUP BY stage ORDER BY stage",
        {"r": last},
    ).to_pylist()
    assert counts == [
        {"stage": "clean", "computed": 6, "shards": 6},
        {"stage": "duplicates", "computed": 2, "shards": 2},
        {"stage": "read", "computed": 0, "shards": 6},
    ]
    assert _hashes(cache, "clean") == before  # same fingerprint, same bytes

    # a changed parameter: a new fingerprint for clean, the reader's output reused
    changed = runner.invoke(app, ["retry", run_id, "--set", "ingest.clean.max_ratio=3", "--cache", str(cache)])
    assert changed.exit_code == 0, changed.output
    fps = catalog.query("SELECT stage, count(DISTINCT fingerprint) AS n FROM artifacts GROUP BY stage ORDER BY stage").to_pylist()
    assert fps == [{"stage": "clean", "n": 4}, {"stage": "duplicates", "n": 2}, {"stage": "read", "n": 2}]
    unknown = runner.invoke(app, ["retry", "nope", "--cache", str(cache)])
    assert unknown.exit_code == 2 and "no run 'nope'" in unknown.output and run_id in unknown.output


def test_the_nightly_profile_loads(monkeypatch, tmp_path):
    conf = load_profile("nightly", environ={"AUGDAG_DATA": str(tmp_path)})
    assert conf.pipelines == ["ingest", "self_training", "rejuvenation", "train_nmt", "paraphrase", "train_classifier"]
    assert (conf.nightly.cron, conf.nightly.overlap) == ("0 2 * * *", "skip")
    assert conf.datasets["train"].src == tmp_path / "train.en"
