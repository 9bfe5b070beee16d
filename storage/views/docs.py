"""What every catalog table and view holds: hand-written documentation, read by `augdag views` and `.schema`.

Kept by hand beside the code it describes (the DDL in ``storage.catalog``, the record kinds in
``storage.schemas``, the columns each stage returns in ``tasks/``): a new column shows as
"(undocumented)" until it is described here, and ``tests/cli/test_views_shell.py`` fails on one in the DDL
or the base views. The catalog's own tables are ``TABLES``; each pipeline's views are one dict here
(``INGEST_VIEWS``, ...) that its entry in the pipeline registry (flows/pipelines/__init__.py) names, so `augdag
views` documents exactly the registered pipelines' views. The equations are the thesis's (ch. 5
rejuvenation, ch. 6 self-training, Eq. 6.x) and PCC's (paraphrase curriculum, Eq. 1–4). The functions
at the end pair this text with what DuckDB reports of the catalog itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa

from conf.errors import CatalogError
from storage.catalog import Catalog
from storage.views.dropped_docs import DROPPED_COLUMNS, DROPPED_WHAT, MONO_SENTENCE, SOMETIMES

UNDOCUMENTED = "(undocumented)"


@dataclass(frozen=True)
class Doc:
    """One table or view: what it is (and which stage writes it), and each column's meaning."""

    what: str
    columns: dict[str, str]
    kind: str = "view"


_UID = "row id: md5 of the source and the content fields, 32 hex characters (storage.schemas.with_uid)"
_SOURCE = "dataset name (the profile's `datasets` key) the row was read from"
_LINE = "1-based line (row) of the row in its input"
_WHERE = {"uid": _UID, "source": _SOURCE, "line": _LINE}
_RUN = "run id, <pipeline>-<UTC time>-<6 hex> (runs.run_id)"
# now() into a TIMESTAMP column: the writer's local time (DuckDB's TimeZone setting), unlike stage_runs (UTC)
_LOCAL = " (local time of the writing process, no zone)"

TABLES: dict[str, Doc] = {
    "runs": Doc("one row per pipeline run (the flow driver writes it at start and finish)", {
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
    }, "table"),
    "stage_runs": Doc("one row per shard of a stage in a run (computed, cached or failed)", {
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
    }, "table"),
    "artifacts": Doc("one row per complete stage output (Parquet parts + manifest under artifacts/<stage>/<fp>/)", {
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
    }, "table"),
    "lineage": Doc("parent → child edges between artifacts (and the training data of models)", {
        "child": "fingerprint of the derived artifact or model",
        "parent": "fingerprint of an artifact it was computed from (an input or a side input)",
    }, "table"),
    "models": Doc("trained or configured models: NMT, LMs, the aligner, classifiers, paraphrase models", {
        "fingerprint": "the model's fingerprint (for a trained one: name, version, params, training data)",
        "name": "the role it plays: teacher, student, identification, target_lm, fast_align, classifier, ...; "
                "<name>_ct2 for a CTranslate2 conversion",
        "kind": "fairseq, ctranslate2, kenlm, fast_align, classifier:<kind>, transformers, nli, ...",
        "path": "its file or directory", "created_run": "the run that registered it first",
        "created_at": "when it was first registered (trained)" + _LOCAL,
        "meta": "trained: version, params and training-data fingerprints; fast_align: its table files; "
                "configured: loading options; as JSON",
    }, "table"),
    "evaluations": Doc("one row per metric of a model on a test set (train_nmt: BLEU, chrF; train_classifier)", {
        "run_id": _RUN,
        "model": "the evaluated model's fingerprint (models.fingerprint)",
        "model_name": "its role: student (train_nmt), classifier (train_classifier) or feedback_classifier (epida)",
        "testset": "the test dataset's name", "metric": "BLEU, chrF (sacrebleu), accuracy or macro_f1",
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
        "ci_low": "train_nmt: the arm's 95 % bootstrap CI, all seeds concatenated", "ci_high": "its upper end",
    }, "table"),
    "evaluation_summary": Doc("mean ± sd of each metric over the seeds of an arm (a view over `evaluations`)", {
        "run_id": _RUN, "model_name": "the evaluated model's role", "testset": "the test dataset's name",
        "arm": "the arm (null: a run of one model)", "metric": "the metric", "seeds": "evaluations averaged",
        "mean": "mean score", "sd": "sample standard deviation (0 for one seed)", "min": "lowest score",
        "max": "highest score", "p_value": "evaluations.p_value", "ci_low": "evaluations.ci_low", "ci_high": "its end",
    }, "view"),
    "dropped": Doc(DROPPED_WHAT, DROPPED_COLUMNS, "view"),
    "rejects": Doc("input rows the readers refused (never dropped silently): input rows = kept + rejected", {
        "fingerprint": "the reader artifact (stage read) that refused it",
        "source": _SOURCE, "file": "the input file",
        "line": "1-based line of the refused row in that file",
        "reason": "invalid_utf8, invalid_encoding, column_count, bad_json, missing_field, bad_type, nul_byte, "
                  "too_long, empty or tags_mismatch (storage.readers.row_checks.REASONS)",
        "detail": "the human sentence, e.g. expected 2 tab-separated fields (src, tgt), found 3",
        "content": "the offending input, cut to 200 characters",
    }, "table"),
}

_BITEXT = {"src": "source-language sentence", "tgt": "target-language sentence"}
_KIND = "the rows of every {0} dataset (ingest: read, reject, clean: dedup, length filters, none on a held-out set)"

# ingest: one view per record kind (storage.schemas), present from the start
INGEST_VIEWS: dict[str, Doc] = {
    "bitext": Doc(_KIND.format("bitext"), {"uid": _UID, **_BITEXT, "source": _SOURCE, "line": _LINE}),
    "mono": Doc(_KIND.format("monolingual"), {"uid": _UID, "text": "the sentence"} | _WHERE | MONO_SENTENCE),
    "labeled": Doc(_KIND.format("labeled"), {"uid": _UID, "text": "the sentence", "label": "its class, as a string",
                                             "source": _SOURCE, "line": _LINE}),
    "slots": Doc(_KIND.format("slot-filling"), {"uid": _UID, "tokens": "the sentence's tokens",
                                                "tags": "one BIO slot tag per token", "source": _SOURCE,
                                                "line": _LINE}),
}

# self_training (thesis ch. 6)
SELF_TRAINING_VIEWS: dict[str, Doc] = {
    "alignments": Doc("fast_align both ways over the bitext, grow-diag-final-and; one row per pair (stage align)", {
        **_WHERE,
        "links": "the symmetrised links as Pharaoh text, i-j (0-based source-target positions)",
        "src_pos": "source position of each link",
        "tgt_pos": "target position of each link",
        "src_tokens": "source tokens (whitespace)",
        "tgt_tokens": "target tokens (whitespace)",
        "aligned_src": "source positions with at least one link",
        "coverage": "aligned_src / src_tokens: share of source words linked (0 for an empty source)",
    }),
    "lexicon": Doc("the bilingual lexicon: linked word pairs of the symmetrised alignment (stage lexicon)", {
        "src": "source word", "tgt": "a target word linked to it",
        "count": "count[x][y]: links between the two words over the bitext",
        "p": "p(y | x) = count[x][y] / Σ_y' count[x][y']",
    }),
    "word_uncertainty": Doc("every source word of the bitext with its translation entropy (stage word_uncertainty)", {
        "src": "source word",
        "H": "translation entropy H(x) = −Σ_y p(y|x) ln p(y|x) from the lexicon (Eq. 6.4); 0 if never linked",
        "links": "links of the word in the alignment (Σ_y count[x][y]; 0 if never linked)",
        "freq": "its tokens in the bitext source side (for word rarity, Eq. 6.5)",
    }),
    "uncertainty": Doc("sentence uncertainty of the bitext sources and of every monolingual sentence (stage "
                       "uncertainty)", {
        **_WHERE,
        "tokens": "tokens T of the sentence (whitespace)",
        "uncertainty": "U(x) = 1/T Σ_t H(x_t) (Eq. 6.3; a word missing from the lexicon adds 0)",
        "word_rarity": "WR(x) = −1/T Σ_t ln p(x_t), word frequencies of the bitext source (Eq. 6.5)",
    }),
    "sampled_mono": Doc("the monolingual sentences drawn for the teacher, p ∝ (α·U)^β without replacement "
                        "(Eq. 6.6–6.7; stage sampled_mono)", {
        "uid": _UID, "text": "the sentence", "source": _SOURCE, "line": _LINE,
        "uncertainty": "U(x) (Eq. 6.3)",
        "p": "its probability under Eq. 6.6 over all monolingual rows (method uncertainty); 1/N for the others",
        "rank": "1 = the largest A-ES key: drawn first",
        "method": "uncertainty, random, word_rarity or srclm",
    }),
    "uncertainty_bins": Doc("properties per uncertainty bin, bitext sources and monolingual sentences (Fig. 6.3; "
                            "stage uncertainty_bins)", {
        "source": "the dataset(s) binned, comma-separated",
        "bin": "1..bins, equal-size bins by U ascending (ties by uid)",
        "rows": "sentences in the bin",
        "u_min": "smallest U in the bin", "u_max": "largest U in the bin", "u_mean": "mean U in the bin",
        "length": "mean tokens",
        "word_rarity": "mean WR (Eq. 6.5)",
        "coverage": "mean share of source words aligned (monolingual: force-aligned with the teacher's translation)",
    }),
    "synthetic": Doc("the teacher's translations of sampled_mono after the length/ratio and target-LM filters", {
        "uid": _UID + " of the synthetic pair",
        "src": "the sampled monolingual sentence", "tgt": "the teacher's beam translation",
        "source": _SOURCE + " (the monolingual dataset)", "line": _LINE,
        "parent_uid": "uid of the monolingual sentence (sampled_mono.uid)",
        "model": "the teacher's fingerprint (models.fingerprint)",
    }),
}

# rejuvenation (thesis ch. 5)
REJUVENATION_VIEWS: dict[str, Doc] = {
    "pair_scores": Doc("every bitext pair force-decoded by the identification model (stage pair_score)", {
        "uid": "the pair's uid (bitext.uid)",
        "tokens": "target tokens scored, EOS included (null if the model could not score the pair)",
        "logprob": "Σ_t log p(y_t | y_<t, x)",
        "cross_entropy": "−logprob / tokens",
        "prob": "exp(logprob / tokens): the length-normalised sentence probability",
    }),
    "inactive": Doc("the ⌊R·N⌋ scored pairs of lowest probability (R = inactive_ratio; stage inactive)", {
        "uid": _UID, **_BITEXT, "source": _SOURCE, "line": _LINE,
        "tokens": "target tokens scored (pair_scores.tokens)",
        "cross_entropy": "pair_scores.cross_entropy", "prob": "pair_scores.prob",
        "state": "always inactive here",
    }),
    "rejuvenated": Doc("active pairs ∪ the inactive sources with new targets from the rejuvenation model "
                       "(stage rejuvenated)", {
        "uid": _UID, **_BITEXT, "source": _SOURCE, "line": _LINE,
        "origin": "original (an active pair) or rejuvenated (a new pair)",
        "parent_uid": "uid of the inactive pair it replaces (null for original)",
        "direction": "forward (x, f(x)) or backward (b(y), y); null for original",
        "prob": "the (parent) pair's probability under the identification model",
        "rejuvenated_prob": "the new pair's probability under the identification model (null for original)",
        "model": "fingerprint of the model that made the new pair (null for original)",
    }),
    "probability_bins": Doc("pair probability per bin (Fig. 5.2; stage probability_bins)", {
        "bin": "1..bins, equal-size bins by probability ascending (bin 1: the inactive end)",
        "rows": "pairs in the bin",
        "p_min": "lowest probability", "p_max": "highest probability", "p_mean": "mean probability",
    }),
    "rejuvenation_states": Doc("inactive vs active pairs (ch. 5; stage state_properties)", {
        "state": "active or inactive",
        "rows": "pairs",
        "prob": "mean probability",
        "length": "mean source tokens",
        "coverage": "mean share of source words aligned (alignments.coverage)",
        "uncertainty": "mean source uncertainty U (Eq. 6.3)",
    }),
}

# train_nmt
TRAIN_NMT_VIEWS: dict[str, Doc] = {
    "training_mix": Doc("the students' data per arm: its mix queries, each repeated copies times (train_nmt)", {
        "uid": "md5 of (mix name, src, tgt)", **_BITEXT,
        "source": "the mix entry's name (a key of the arm's mix)",
        "line": "1-based row in the mix", "copy": "0-based repeat of the row (the arm's copies)",
        "arm": "the arm (experiments key; `mix` without)", "phase": "train, or continue (its continue_on mix)",
    }),
    "test_translations": Doc("every student's translations of each test set (stage arm_translations)", {
        "uid": "the test pair's uid", "src": "test source sentence", "ref": "the reference (test target)",
        "hyp": "the student's translation", "testset": "the test dataset", "arm": "the student's arm",
        "seed": "the student's seed", "model": "the student's fingerprint (models.fingerprint)",
    }),
}

# paraphrase (PCC)
PARAPHRASE_VIEWS: dict[str, Doc] = {
    "paraphrase_candidates": Doc("every generated paraphrase with M and G (Alg. 2 lines 4-6; stage "
                                 "paraphrase_scores)", {
        "uid": "md5 of (parent_uid, text)",
        "parent_uid": "uid of the original sentence",
        "text": "the candidate x̄",
        "label": "the original's label (null for unlabeled input)",
        "source": _SOURCE, "line": _LINE + " (of the original)",
        "sampler": "top_k_top_p (easy, Eq. 1) or bottom_k (hard, Eq. 2)",
        "sample": "0-based index of the draw",
        "model": "the generator's fingerprint",
        "original": "the original sentence x",
        "mi": "M(x, x̄): mutual implication, entailment both ways (Eq. 3); null without an NLI model",
        "p_entail_fwd": "NLI entailment probability x ⇒ x̄",
        "p_entail_bwd": "NLI entailment probability x̄ ⇒ x",
        "sim": "G(x, x̄): similarity, chrF/100, a cross-encoder or embedding cosine (Eq. 3-4)",
    }),
    "curriculum": Doc("originals (level 0) and their kept paraphrases by difficulty level (Alg. 2 lines 7-8; "
                      "stage curriculum)", {
        "uid": "the original's uid (level 0) or the candidate's", "parent_uid": "uid of the original sentence",
        "text": "the sentence or paraphrase", "label": "the original's label",
        "source": _SOURCE, "line": _LINE + " (of the original)",
        "level": "difficulty d = ⌈C · rank / |X|⌉ (Eq. 4), 1 = most similar; 0 = the original",
        "rank": "rank by G descending within the bag, ties by uid then copy (0 for the original)",
        "copy": "repeat number when a short bag is repeated (shortfall repeat); 0 otherwise",
        "sampler": "top_k_top_p, bottom_k or original",
        "mi": "M(x, x̄) (Eq. 3); null without an NLI model or for the original",
        "sim": "G(x, x̄) (Eq. 3-4); null for the original",
        "generator": "the generator's fingerprint (null for the original)",
        "nli": "the NLI model's fingerprint (null without one or for the original)",
        "similarity": "the similarity model's fingerprint, or its kind (chrf) without a model; null for the original",
    }),
    "paraphrase_diversity": Doc("diversity per sampler over every candidate (PCC Table 5, appendix F; stage "
                                "paraphrase_diversity)", {
        "sampler": "top_k_top_p or bottom_k", "candidates": "candidates generated",
        **{f"distinct_{n}": f"Distinct-{n}: distinct {n}-grams / all {n}-grams" for n in range(1, 7)},
        "copies_first_token": "share of candidates starting with the original's first token",
    }),
    "curriculum_levels": Doc("per difficulty level of the curriculum (stage curriculum_levels)", {
        "level": "difficulty level (0 = originals)", "rows": "rows at the level",
        "sentences": "distinct originals (parent_uid) at the level",
        "sim_min": "min G", "sim_q25": "G's first quartile", "sim_median": "median G", "sim_q75": "G's third quartile",
        "sim_max": "max G", "sim_mean": "mean G",
        "mi_share": "share with M = 1 (null without an NLI model)",
        "bottom_k_share": "share drawn by the bottom-k sampler",
    }),
}

# train_classifier
TRAIN_CLASSIFIER_VIEWS: dict[str, Doc] = {
    "test_predictions": Doc("the classifier's predictions on the test set (stage classify_test)", {
        "uid": "the test row's uid", "text": "the sentence", "label": "the gold label",
        "predicted": "the classifier's label",
    }),
}


# epida
EPIDA_VIEWS: dict[str, Doc] = {
    "augmented": Doc("every EPiDA candidate of every round, scored by the classifier's feedback, the m kept per "
                     "row and algorithm marked (Alg. 1; stages eda, cwe, back_translation → seas → augmented)", {
        "uid": "the candidate's uid (EDA, CWE: md5 of source and text, as a labelled row; back-translation: "
               "md5 of parent_uid and text)",
        "parent_uid": "uid of the original row it augments",
        "source": _SOURCE, "line": _LINE + " (of the original)",
        "label": "the original's label (kept by every DA algorithm)",
        "text": "the candidate t",
        "method": "the operation: eda_sr, eda_ri, eda_rs, eda_rd (EDA), cwe, back_translation",
        "algorithm": "the DA algorithm T: eda, cwe or back_translation (m are kept per row and algorithm)",
        "candidate": "index of the candidate among the row's K·m of this algorithm (back-translation: the draw)",
        "round": "0: one-time augmentation (and the first online round); r: the r-th online round",
        "p_label": "p_y(t): the classifier's probability of the label",
        "s_div": "REM, Eq. 7: −log max(p_y(t), 1e-10)",
        "s_qua": "CEM, Eq. 10 as the authors' code computes it: 1 + I(P) − H(p(t)), P the symmetrised outer "
                 "product of p(t) and p(x)",
        "s_tot": "Eq. 11: α·s_div + (1 − α)·s_qua after min-max normalisation within the row and algorithm",
        "selected": "among the m highest s_tot of its row and algorithm (ties: smaller uid)",
        "classifier": "fingerprint of the classifier whose feedback scored it (models.fingerprint)",
    }),
}


def describe(docs: Mapping[str, Doc], name: str, column: str) -> str:
    """The description of ``name.column`` in ``docs`` (or of one it has ``SOMETIMES``), or "(undocumented)"."""
    doc = docs.get(name)
    return doc.columns.get(column, SOMETIMES.get((name, column), UNDOCUMENTED)) if doc else UNDOCUMENTED


def _objects(catalog: Catalog) -> dict[str, str]:
    """name -> table | view, tables first, then views, each by name."""
    return {r["name"]: r["kind"] for r in catalog.query(
        "SELECT table_name AS name, CASE table_type WHEN 'VIEW' THEN 'view' ELSE 'table' END AS kind "
        "FROM information_schema.tables WHERE table_schema = 'main' ORDER BY kind, name").to_pylist()}


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
    return pa.table({"name": pa.array(names, pa.string()), "kind": pa.array(list(kinds.values()), pa.string()),
                     "rows": pa.array([rows[i] for i in range(len(names))], pa.int64()),
                     "description": pa.array(what, pa.string())})


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
        {"name": name}).to_pylist()
    order = {n: i for i, n in enumerate(kinds)}
    cols.sort(key=lambda c: order[c["name"]])  # stable: the column order within each name is kept
    return pa.table({"name": pa.array([c["name"] for c in cols], pa.string()),
                     "kind": pa.array([kinds[c["name"]] for c in cols], pa.string()),
                     "column": pa.array([c["column"] for c in cols], pa.string()),
                     "type": pa.array([c["type"] for c in cols], pa.string()),
                     "description": pa.array([describe(docs, c["name"], c["column"]) for c in cols], pa.string())})
