"""An interrupted run (issue 47, defect 5): SIGINT or SIGTERM inside a run records it `interrupted`, asks every
running shard to stop at its next batch (tasks/runtime/progress.py), and ends with the one line the CLI prints with
its `Resume:` command. (A translation that stops between batches: tests/models/test_nmt_fairseq.py.)"""

from __future__ import annotations

import json
import signal

import pytest

from conf.schema import AugdagConf
from flows.cli.app import resume_hint
from flows.engine.driver import Run
from storage.catalog import Catalog
from tasks.runtime.progress import Interrupted, clear_stop, stop_requested


@pytest.fixture
def stop_cleared():
    clear_stop()
    yield
    clear_stop()


def interrupted_run(tmp_path, error: BaseException) -> tuple[Run, Interrupted]:
    conf = AugdagConf(cache=tmp_path / "cache")
    with pytest.raises(Interrupted) as stopped, Run.started(conf, pipeline="tiny", profile="test", config={}) as run:
        raise error
    return run, stopped.value


@pytest.mark.parametrize("make, name", [(KeyboardInterrupt, "SIGINT"), ("termination", "SIGTERM")])
def test_an_interrupted_run_is_recorded_interrupted_stops_the_shards_and_says_how_to_resume(tmp_path, stop_cleared, make, name):
    from prefect.exceptions import TerminationSignal  # what Prefect's SIGTERM handler raises in the flow's thread

    error = TerminationSignal(signal.SIGTERM) if make == "termination" else make()
    run, e = interrupted_run(tmp_path, error)
    assert stop_requested()  # every shard still running raises Interrupted after its current batch
    assert (str(e), e.exit_code, e.run_id) == (f"interrupted by {name}; the shards it finished are kept", 130, run.run_id)
    assert isinstance(e.__cause__, type(error))
    ((status, summary),) = Catalog(tmp_path / "cache").query("SELECT status, summary FROM runs").to_pylist() and [
        tuple(r.values()) for r in Catalog(tmp_path / "cache").query("SELECT status, summary FROM runs").to_pylist()
    ]
    assert (status, json.loads(summary)["error"]) == ("interrupted", str(e))
    cache = (tmp_path / "cache").absolute()
    log = cache / "logs" / f"{run.run_id}.log"
    assert resume_hint(e) == f" Resume: augdag retry {run.run_id} --cache {cache}  (log: {log}; -v shows it here)"
