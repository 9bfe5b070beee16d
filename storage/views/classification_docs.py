"""The documentation of the classification pipelines' views (paraphrase, train_classifier, epida); see
storage/views/docs.py."""

from __future__ import annotations

from storage.views.docs import LINE, SOURCE, Doc

# paraphrase (PCC)
PARAPHRASE_VIEWS: dict[str, Doc] = {
    "paraphrase_candidates": Doc(
        "every generated paraphrase with M and G (Alg. 2 lines 4-6; stage paraphrase_scores)",
        {
            "uid": "md5 of (parent_uid, text)",
            "parent_uid": "uid of the original sentence",
            "text": "the candidate x̄",
            "label": "the original's label (null for unlabeled input)",
            "source": SOURCE,
            "line": LINE + " (of the original)",
            "sampler": "top_k_top_p (easy, Eq. 1) or bottom_k (hard, Eq. 2)",
            "sample": "0-based index of the draw",
            "model": "the generator's fingerprint",
            "original": "the original sentence x",
            "mi": "M(x, x̄): mutual implication, entailment both ways (Eq. 3); null without an NLI model",
            "p_entail_fwd": "NLI entailment probability x ⇒ x̄",
            "p_entail_bwd": "NLI entailment probability x̄ ⇒ x",
            "sim": "G(x, x̄): similarity, chrF/100, a cross-encoder or embedding cosine (Eq. 3-4)",
        },
    ),
    "curriculum": Doc(
        "originals (level 0) and their kept paraphrases by difficulty level (Alg. 2 lines 7-8; stage curriculum)",
        {
            "uid": "the original's uid (level 0) or the candidate's",
            "parent_uid": "uid of the original sentence",
            "text": "the sentence or paraphrase",
            "label": "the original's label",
            "source": SOURCE,
            "line": LINE + " (of the original)",
            "level": "difficulty d = ⌈C · rank / |X|⌉ (Eq. 4), 1 = most similar; 0 = the original",
            "rank": "rank by G descending within the bag, ties by uid then copy (0 for the original)",
            "copy": "repeat number when a short bag is repeated (shortfall repeat); 0 otherwise",
            "sampler": "top_k_top_p, bottom_k or original",
            "mi": "M(x, x̄) (Eq. 3); null without an NLI model or for the original",
            "sim": "G(x, x̄) (Eq. 3-4); null for the original",
            "generator": "the generator's fingerprint (null for the original)",
            "nli": "the NLI model's fingerprint (null without one or for the original)",
            "similarity": "the similarity model's fingerprint, or its kind (chrf) without a model; null for the original",
        },
    ),
    "paraphrase_diversity": Doc(
        "diversity per sampler over every candidate (PCC Table 5, appendix F; stage paraphrase_diversity)",
        {
            "sampler": "top_k_top_p or bottom_k",
            "candidates": "candidates generated",
            **{f"distinct_{n}": f"Distinct-{n}: distinct {n}-grams / all {n}-grams" for n in range(1, 7)},
            "copies_first_token": "share of candidates starting with the original's first token",
        },
    ),
    "curriculum_levels": Doc(
        "per difficulty level of the curriculum (stage curriculum_levels)",
        {
            "level": "difficulty level (0 = originals)",
            "rows": "rows at the level",
            "sentences": "distinct originals (parent_uid) at the level",
            "sim_min": "min G",
            "sim_q25": "G's first quartile",
            "sim_median": "median G",
            "sim_q75": "G's third quartile",
            "sim_max": "max G",
            "sim_mean": "mean G",
            "mi_share": "share with M = 1 (null without an NLI model)",
            "bottom_k_share": "share drawn by the bottom-k sampler",
        },
    ),
}

# train_classifier
TRAIN_CLASSIFIER_VIEWS: dict[str, Doc] = {
    "test_predictions": Doc(
        "the classifier's predictions on the test set (stage classify_test)",
        {
            "uid": "the test row's uid",
            "text": "the sentence",
            "label": "the gold label",
            "predicted": "the classifier's label",
        },
    ),
}


# epida
EPIDA_VIEWS: dict[str, Doc] = {
    "augmented": Doc(
        "every EPiDA candidate of every round, scored by the classifier's feedback, the m kept per "
        "row and algorithm marked (Alg. 1; stages eda, cwe, back_translation → seas → augmented)",
        {
            "uid": "the candidate's uid (EDA, CWE: md5 of source and text, as a labelled row; back-translation: "
            "md5 of parent_uid and text)",
            "parent_uid": "uid of the original row it augments",
            "source": SOURCE,
            "line": LINE + " (of the original)",
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
        },
    ),
}
