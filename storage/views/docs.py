"""What every catalog table and view holds: hand-written documentation, read by `augdag views` and `.schema`.

Kept by hand beside the code it describes (the DDL in ``storage.catalog``, the record kinds in
``storage.schemas``, the columns each stage returns in ``tasks/``): a new column shows as
"(undocumented)" until it is described here, and ``tests/cli/test_views_shell.py`` fails on one in the DDL
or the base views. The catalog's own tables are ``TABLES``; each pipeline's views are one dict, here
(``INGEST_VIEWS``) or beside this module (``translation_docs``, ``classification_docs``, ...), that its
entry in the pipeline registry (flows/pipelines/__init__.py) names, so `augdag views` documents exactly the
registered pipelines' views. The equations are the thesis's (ch. 5
rejuvenation, ch. 6 self-training, Eq. 6.x) and PCC's (paraphrase curriculum, Eq. 1–4). The functions
at the end pair this text with what DuckDB reports of the catalog itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa

from conf.errors import CatalogError
from storage.catalog import Catalog
from storage.schemas import heldout_view
from storage.views.dropped_docs import DROPPED_COLUMNS, DROPPED_WHAT, MONO_SENTENCE, SOMETIMES

UNDOCUMENTED = "(undocumented)"


@dataclass(frozen=True)
class Doc:
    """One table or view: what it is (and which stage writes it), and each column's meaning."""

    what: str
    columns: dict[str, str]
    kind: str = "view"


UID = "row id: md5 of the source and the content fields, 32 hex characters (storage.schemas.with_uid)"
SOURCE = "dataset name (the profile's `datasets` key) the row was read from"
LINE = "1-based line (row) of the row in its input"
WHERE = {"uid": UID, "source": SOURCE, "line": LINE}
_RUN = "run id, <pipeline>-<UTC time>-<6 hex> (runs.run_id)"
# now() into a TIMESTAMP column: the writer's local time (DuckDB's TimeZone setting), unlike stage_runs (UTC)
_LOCAL = " (local time of the writing process, no zone)"

TABLES: dict[str, Doc] = {
    "runs": Doc(
        "one row per pipeline run (the flow driver writes it at start and finish)",
        {
            "run_id": _RUN,
            "pipeline": "ingest, self_training, rejuvenation, train_nmt, paraphrase or train_classifier",
            "profile": "the profile the run was started with (a YAML path or a packaged name such as demo)",
            "status": "running, completed, failed, or crashed (its process is gone: found by the next run, "
            "`augdag runs` or `augdag retry` on the same host)",
            "started_at": "when the run started" + _LOCAL,
            "finished_at": "when the run finished, or when its crash was found" + _LOCAL + "; null while running",
            "flow_run_id": "the Prefect flow run's id (null outside a flow run)",
            "config": "the resolved profile, as JSON",
            "summary": "the run summary printed at the end (stages, row counts, reports, scores, error, retry_of: "
            "the run an `augdag retry` re-ran), as JSON",
            "host": "the host name of the process that runs it",
            "pid": "its process id on that host",
            "pid_started": "that process's boot id and start time (from /proc): a reused pid is not taken for it",
            "crash_reported": "for a crashed run: whether its Prefect flow run was set Crashed (null otherwise)",
        },
        "table",
    ),
    "stage_runs": Doc(
        "one row per shard of a stage in a run (computed, cached or failed)",
        {
            "run_id": _RUN,
            "stage": "stage name (clean, align, uncertainty, curriculum, ...)",
            "dataset": "dataset of the stage's first input (null for a stage without inputs)",
            "fingerprint": "the output artifact's fingerprint (artifacts.fingerprint)",
            "shard": "0-based shard number",
            "status": "computed, cached (the part was already on disk) or failed",
            "started_at": "when the shard started (UTC); null for the shards of a wholly cached artifact",
            "seconds": "wall-clock seconds of the shard (0 when cached)",
            "rows_in": "rows read from the sharded inputs (0 when cached)",
            "rows_out": "rows of the shard's main part",
            "error": "the exception of a failed shard, `Type: message`",
        },
        "table",
    ),
    "artifacts": Doc(
        "one row per complete stage output (Parquet parts + manifest under artifacts/<stage>/<fp>/)",
        {
            "fingerprint": "hash of stage, version, parameters, input and model fingerprints: the artifact's key",
            "stage": "the stage that wrote it",
            "version": "the stage's code version (part of the fingerprint)",
            "view": "the view that shows its main parts (null for an internal artifact)",
            "dataset": "dataset of the stage's first input",
            "path": "its directory, relative to the cache root (artifacts/<stage>/<fingerprint>)",
            "n_shards": "number of main parts (part-00000.parquet, ...)",
            "rows": "rows of all main parts",
            "bytes": "bytes of all its Parquet files, side roles (dropped, rejects, ...) included",
            "params": "the stage parameters, as JSON",
            "manifest": "manifest.json: files with rows, bytes and sha256, schema per role, inputs, models",
            "created_run": "the run that computed it",
            "created_at": "when it was registered" + _LOCAL,
            "last_run": "the last run that used it (computed or cached); a view shows the last used per stage, dataset",
            "last_used_at": "when a run last used it" + _LOCAL,
        },
        "table",
    ),
    "lineage": Doc(
        "parent → child edges between artifacts (and the training data of models)",
        {
            "child": "fingerprint of the derived artifact or model",
            "parent": "fingerprint of an artifact it was computed from (an input or a side input)",
        },
        "table",
    ),
    "models": Doc(
        "trained or configured models: NMT, LMs, the aligner, classifiers, paraphrase models",
        {
            "fingerprint": "the model's fingerprint (for a trained one: name, version, params, training data)",
            "name": "the role it plays: teacher, student, identification, target_lm, fast_align, classifier, ...; "
            "<name>_ct2 for a CTranslate2 conversion",
            "kind": "fairseq, ctranslate2, kenlm, fast_align, classifier:<kind>, transformers, nli, ...",
            "path": "its file or directory",
            "created_run": "the run that registered it first",
            "created_at": "when it was first registered (trained)" + _LOCAL,
            "meta": "trained: version, params and training-data fingerprints; fast_align: its table files; "
            "configured: loading options; as JSON",
        },
        "table",
    ),
    "evaluations": Doc(
        "one row per metric of a model on a test set (train_nmt: BLEU, chrF; train_classifier)",
        {
            "run_id": _RUN,
            "model": "the evaluated model's fingerprint (models.fingerprint)",
            "model_name": "its role: student (train_nmt), classifier (train_classifier) or feedback_classifier (epida)",
            "testset": "the test dataset's name",
            "metric": "BLEU, chrF (sacrebleu), accuracy or macro_f1",
            "score": "the metric's value (BLEU and chrF 0-100, accuracy and macro_f1 0-1)",
            "signature": "sacrebleu's signature, or classes:<n>|average:macro|sklearn",
            "sentences": "test rows scored",
            "created_at": "when it was registered" + _LOCAL,
            "meta": "train_nmt: mix, copies, mix_rows, continue_on, label, baseline, significance (the paired tests' "
            "signature, resamples, ar_trials, p_ar per metric); train_classifier: dataset, schedule, kind; as JSON",
            "arm": "what the model was trained on, when a run compares several (train_nmt: the arm, `mix` without "
            "experiments; train_classifier: none, eda, epida or curriculum; epida: epida_<mode>[_online]); else null",
            "seed": "the training seed of this arm's model (null when the run trains one)",
            "p_value": "train_nmt: paired bootstrap p vs the baseline arm, all seeds concatenated; null for the baseline",
            "ci_low": "train_nmt: the arm's 95 % bootstrap CI, all seeds concatenated",
            "ci_high": "its upper end",
        },
        "table",
    ),
    "evaluation_summary": Doc(
        "mean ± sd of each metric over the seeds of an arm (a view over `evaluations`)",
        {
            "run_id": _RUN,
            "model_name": "the evaluated model's role",
            "testset": "the test dataset's name",
            "arm": "the arm (null: a run of one model)",
            "metric": "the metric",
            "seeds": "evaluations averaged",
            "mean": "mean score",
            "sd": "sample standard deviation (0 for one seed)",
            "min": "lowest score",
            "max": "highest score",
            "p_value": "evaluations.p_value",
            "ci_low": "evaluations.ci_low",
            "ci_high": "its end",
        },
        "view",
    ),
    "dropped": Doc(DROPPED_WHAT, DROPPED_COLUMNS, "view"),
    "rejects": Doc(
        "input rows the readers refused (never dropped silently): input rows = kept + rejected",
        {
            "fingerprint": "the artifact that refused it (stage read; delexicalise's malformed_bio)",
            "source": SOURCE,
            "file": "the input file",
            "line": "1-based line of the refused row in that file",
            "reason": "invalid_utf8, invalid_encoding, column_count, bad_json, missing_field, bad_type, nul_byte, "
            "too_long, empty or tags_mismatch (storage.readers.row_checks.REASONS)",
            "detail": "the human sentence, e.g. expected 2 tab-separated fields (src, tgt), found 3",
            "content": "the offending input, cut to 200 characters",
        },
    ),
    "rejects_legacy": Doc(
        "a catalog's `rejects` rows from before it was a view that no current artifact's parts hold (shown in `rejects`)",
        {
            "fingerprint": "the artifact that refused it",
            "source": SOURCE,
            "file": "the input file",
            "line": "1-based line of the refused row in that file",
            "reason": "as `rejects`.reason",
            "detail": "as `rejects`.detail",
            "content": "as `rejects`.content",
        },
        "table",
    ),
    "reject_counts": Doc(
        "rejected rows per artifact and reason, of every artifact registered (the rows: `rejects`)",
        {
            "run_id": "the run that made the artifact" + " (" + _RUN + ")",
            "fingerprint": "the artifact (artifacts.fingerprint)",
            "stage": "its stage (read, delexicalise)",
            "dataset": "its dataset",
            "reason": "the reason (as `rejects`.reason)",
            "rows": "rows it rejected for that reason",
        },
        "table",
    ),
}

BITEXT = {"src": "source-language sentence", "tgt": "target-language sentence"}
_KIND = "the rows of every {0} dataset that trains (ingest: read, reject, clean); test sets: heldout_{0}"

# ingest: one view per record kind (storage.schemas), present from the start
INGEST_VIEWS: dict[str, Doc] = {
    "bitext": Doc(_KIND.format("bitext"), {"uid": UID, **BITEXT, "source": SOURCE, "line": LINE}),
    "mono": Doc(_KIND.format("monolingual"), {"uid": UID, "text": "the sentence"} | WHERE | MONO_SENTENCE),
    "labeled": Doc(
        _KIND.format("labeled"),
        {"uid": UID, "text": "the sentence", "label": "its class, as a string", "source": SOURCE, "line": LINE},
    ),
    "slots": Doc(
        _KIND.format("slot-filling"),
        {"uid": UID, "tokens": "the sentence's tokens", "tags": "one BIO slot tag per token", "source": SOURCE, "line": LINE},
    ),
}
_HELDOUT = "the rows of every held-out {0} set (a test or dev set: validated, never cleaned, never in {0})"
INGEST_VIEWS |= {heldout_view(kind): Doc(_HELDOUT.format(kind), doc.columns) for kind, doc in INGEST_VIEWS.items()}


def describe(docs: Mapping[str, Doc], name: str, column: str) -> str:
    """The description of ``name.column`` in ``docs`` (or of one it has ``SOMETIMES``), or "(undocumented)"."""
    doc = docs.get(name)
    return doc.columns.get(column, SOMETIMES.get((name, column), UNDOCUMENTED)) if doc else UNDOCUMENTED


def _objects(catalog: Catalog) -> dict[str, str]:
    """name -> table | view, tables first, then views, each by name."""
    return {
        r["name"]: r["kind"]
        for r in catalog.query(
            "SELECT table_name AS name, CASE table_type WHEN 'VIEW' THEN 'view' ELSE 'table' END AS kind "
            "FROM information_schema.tables WHERE table_schema = 'main' ORDER BY kind, name"
        ).to_pylist()
    }


def catalog_objects(catalog: Catalog, views: Mapping[str, Doc]) -> pa.Table:
    """Every table and view in the catalog: name, kind, rows, description (``TABLES`` and ``views``: the
    registered pipelines' view docs, flows.engine.registry.view_docs)."""
    docs = {**TABLES, **views}
    kinds = _objects(catalog)
    names = list(kinds)
    rows: dict[int, int] = {}
    if names:  # every count in one query: one connection, one lock
        counts = " UNION ALL ".join(f'SELECT {i} AS i, count(*) AS n FROM "{n}"' for i, n in enumerate(names))
        rows = {r["i"]: r["n"] for r in catalog.query(counts).to_pylist()}
    what = [docs[n].what if n in docs else UNDOCUMENTED for n in names]
    return pa.table(
        {
            "name": pa.array(names, pa.string()),
            "kind": pa.array(list(kinds.values()), pa.string()),
            "rows": pa.array([rows[i] for i in range(len(names))], pa.int64()),
            "description": pa.array(what, pa.string()),
        }
    )


def catalog_columns(catalog: Catalog, views: Mapping[str, Doc], name: str | None = None) -> pa.Table:
    """name, kind, column, type, description of every column of ``name`` (default: of every table and view),
    the types as DuckDB reports them (``information_schema.columns``, what DESCRIBE shows).

    Raises:
        CatalogError: ``name`` is neither a table nor a view of this catalog.
    """
    kinds, docs = _objects(catalog), {**TABLES, **views}
    if name is not None and name not in kinds:
        later = f" (not in this catalog until its stage has run: {docs[name].what})" if name in docs else ""
        raise CatalogError(f"unknown table or view {name!r}{later}; expected one of {', '.join(kinds)}")
    cols = catalog.query(
        "SELECT table_name AS name, column_name AS column, data_type AS type FROM information_schema.columns "
        "WHERE table_schema = 'main' AND ($name IS NULL OR table_name = $name) ORDER BY table_name, ordinal_position",
        {"name": name},
    ).to_pylist()
    order = {n: i for i, n in enumerate(kinds)}
    cols.sort(key=lambda c: order[c["name"]])  # stable: the column order within each name is kept
    return pa.table(
        {
            "name": pa.array([c["name"] for c in cols], pa.string()),
            "kind": pa.array([kinds[c["name"]] for c in cols], pa.string()),
            "column": pa.array([c["column"] for c in cols], pa.string()),
            "type": pa.array([c["type"] for c in cols], pa.string()),
            "description": pa.array([describe(docs, c["name"], c["column"]) for c in cols], pa.string()),
        }
    )
