"""The documentation of the catalog's `dropped` view (storage/dropped.py), listed in storage/views/docs.py's TABLES.

Plain text here (no ``Doc``, which storage/views/docs.py defines and which imports this): the catalog's own views
(``evaluation_summary``, ``dropped``) are documented with its tables, not by a pipeline. ``SOMETIMES``: the
columns a view has only when one of its artifacts has them (`sampled_mono`'s and `synthetic`'s ``sentence``: a
dataset split into sentences); `mono` always has ``sentence`` (``MONO_SENTENCE``, null where not split).
"""

from __future__ import annotations

SENTENCE = "1-based sentence of its line, for a dataset split into sentences (split_sentences: true); else null"
MONO_SENTENCE = {"sentence": SENTENCE}
SOMETIMES: dict[tuple[str, str], str] = {
    (view, "sentence"): SENTENCE + " (the column is there once a dataset is split)" for view in ("sampled_mono", "synthetic")
}
DROPPED_WHAT = "every row a stage dropped, with stage, reason and its text: per stage, input rows = kept + rejected + dropped"
DROPPED_COLUMNS: dict[str, str] = {
    "stage": "the stage that dropped it: split_sentences and clean (ingest), synthetic_clean and lm_filter "
    "(self_training), curriculum (PCC Eq. 3), paraphrased_bitext (mt_paraphrase), delexicalise and c2c_select "
    "(c2c), active (rejuvenation's inactive pairs: reason inactive, detail their probability), ...",
    "reason": "why: duplicate, too_few_tokens, too_many_tokens, length_ratio and the corpus filters' names (length, "
    "long_word, alphabet_ratio, character_score, html_tags, terminal_punctuation, non_zero_numerals, repetition, "
    "language_id, test_overlap, near_duplicates) (clean), no_sentence (split_sentences), lm_score, "
    "not_mi_below_beta, inactive, no_slots, empty, in_training, ... (each stage's filter)",
    "detail": "the value the row was cut on: the stage's detail column (clean: first_line=N of the kept copy for a "
    "duplicate, the side's tokens=N for a length, ratio=R (src_tokens=N, tgt_tokens=M) for length_ratio, a corpus "
    "filter's score with the side that failed (tgt:character_score=0, near_duplicate_of=demo_bitext:12 "
    "jaccard=0.8571, test_overlap=demo_test:17 side=src jaccard=1); "
    "active: the probability), else the measure it cut on (lm_cross_entropy, jaccard, mi, sim as "
    "name=value); null when the stage gives none",
    "source": "dataset name the row (or the row it derives from) was read from",
    "line": "1-based line of that row in its input; null for a generated row without one",
    "sentence": SENTENCE,
    "uid": "the dropped row's uid (null where the stage's rows have none, e.g. MT paraphrase candidates)",
    "parent_uid": "a derived row's original (paraphrase, synthetic pair); null for an input row",
    "run": "the run that made the artifact (artifacts.created_run)",
    "fingerprint": "the artifact whose dropped part holds it (artifacts.fingerprint)",
    "src": "the dropped pair's source side (bitext stages); null for a row without one",
    "tgt": "the dropped pair's target side (bitext stages); null for a row without one",
    "text": "the dropped row's text (mono, labeled, curriculum candidates; a slots row's tokens joined by spaces); "
    "null for a pair",
}
