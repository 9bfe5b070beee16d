"""The documentation of the translation pipelines' views (self_training, rejuvenation, train_nmt); see
storage/views/docs.py."""

from __future__ import annotations

from storage.views.docs import BITEXT, LINE, SOURCE, UID, WHERE, Doc

# self_training (thesis ch. 6)
SELF_TRAINING_VIEWS: dict[str, Doc] = {
    "alignments": Doc(
        "fast_align both ways over the bitext, grow-diag-final-and; one row per pair (stage align)",
        {
            **WHERE,
            "links": "the symmetrised links as Pharaoh text, i-j (0-based source-target positions)",
            "src_pos": "source position of each link",
            "tgt_pos": "target position of each link",
            "src_tokens": "source tokens (whitespace)",
            "tgt_tokens": "target tokens (whitespace)",
            "aligned_src": "source positions with at least one link",
            "coverage": "aligned_src / src_tokens: share of source words linked (0 for an empty source)",
        },
    ),
    "lexicon": Doc(
        "the bilingual lexicon: linked word pairs of the symmetrised alignment (stage lexicon)",
        {
            "src": "source word",
            "tgt": "a target word linked to it",
            "count": "count[x][y]: links between the two words over the bitext",
            "p": "p(y | x) = count[x][y] / Σ_y' count[x][y']",
        },
    ),
    "word_uncertainty": Doc(
        "every source word of the bitext with its translation entropy (stage word_uncertainty)",
        {
            "src": "source word",
            "H": "translation entropy H(x) = −Σ_y p(y|x) ln p(y|x) from the lexicon (Eq. 6.4); 0 if never linked",
            "links": "links of the word in the alignment (Σ_y count[x][y]; 0 if never linked)",
            "freq": "its tokens in the bitext source side (for word rarity, Eq. 6.5)",
        },
    ),
    "uncertainty": Doc(
        "sentence uncertainty of the bitext sources and of every monolingual sentence (stage uncertainty)",
        {
            **WHERE,
            "tokens": "tokens T of the sentence (whitespace)",
            "uncertainty": "U(x) = 1/T Σ_t H(x_t) (Eq. 6.3; a word missing from the lexicon adds 0)",
            "word_rarity": "WR(x) = −1/T Σ_t ln p(x_t), word frequencies of the bitext source (Eq. 6.5)",
        },
    ),
    "sampled_mono": Doc(
        "the monolingual sentences drawn for the teacher, p ∝ (α·U)^β without replacement (Eq. 6.6–6.7; stage sampled_mono)",
        {
            "uid": UID,
            "text": "the sentence",
            "source": SOURCE,
            "line": LINE,
            "uncertainty": "U(x) (Eq. 6.3)",
            "p": "its probability under Eq. 6.6 over all monolingual rows (method uncertainty); 1/N for the others",
            "rank": "1 = the largest A-ES key: drawn first",
            "method": "uncertainty, random, word_rarity or srclm",
        },
    ),
    "uncertainty_bins": Doc(
        "properties per uncertainty bin, bitext sources and monolingual sentences (Fig. 6.3; stage uncertainty_bins)",
        {
            "source": "the dataset(s) binned, comma-separated",
            "bin": "1..bins, equal-size bins by U ascending (ties by uid)",
            "rows": "sentences in the bin",
            "u_min": "smallest U in the bin",
            "u_max": "largest U in the bin",
            "u_mean": "mean U in the bin",
            "length": "mean tokens",
            "word_rarity": "mean WR (Eq. 6.5)",
            "coverage": "mean share of source words aligned (monolingual: force-aligned with the teacher's translation)",
        },
    ),
    "synthetic": Doc(
        "the teacher's translations of sampled_mono after the length/ratio and target-LM filters",
        {
            "uid": UID + " of the synthetic pair",
            "src": "the sampled monolingual sentence",
            "tgt": "the teacher's beam translation",
            "source": SOURCE + " (the monolingual dataset)",
            "line": LINE,
            "parent_uid": "uid of the monolingual sentence (sampled_mono.uid)",
            "model": "the teacher's fingerprint (models.fingerprint)",
        },
    ),
}

# rejuvenation (thesis ch. 5)
REJUVENATION_VIEWS: dict[str, Doc] = {
    "pair_scores": Doc(
        "every bitext pair force-decoded by the identification model (stage pair_score)",
        {
            "uid": "the pair's uid (bitext.uid)",
            "tokens": "target tokens scored, EOS included (null if the model could not score the pair)",
            "logprob": "Σ_t log p(y_t | y_<t, x)",
            "cross_entropy": "−logprob / tokens",
            "prob": "exp(logprob / tokens): the length-normalised sentence probability",
        },
    ),
    "inactive": Doc(
        "the ⌊R·N⌋ scored pairs of lowest probability (R = inactive_ratio; stage inactive)",
        {
            "uid": UID,
            **BITEXT,
            "source": SOURCE,
            "line": LINE,
            "tokens": "target tokens scored (pair_scores.tokens)",
            "cross_entropy": "pair_scores.cross_entropy",
            "prob": "pair_scores.prob",
            "state": "always inactive here",
        },
    ),
    "rejuvenated": Doc(
        "active pairs ∪ the inactive sources with new targets from the rejuvenation model (stage rejuvenated)",
        {
            "uid": UID,
            **BITEXT,
            "source": SOURCE,
            "line": LINE,
            "origin": "original (an active pair) or rejuvenated (a new pair)",
            "parent_uid": "uid of the inactive pair it replaces (null for original)",
            "direction": "forward (x, f(x)) or backward (b(y), y); null for original",
            "prob": "the (parent) pair's probability under the identification model",
            "rejuvenated_prob": "the new pair's probability under the identification model (null for original)",
            "model": "fingerprint of the model that made the new pair (null for original)",
        },
    ),
    "probability_bins": Doc(
        "pair probability per bin (Fig. 5.2; stage probability_bins)",
        {
            "bin": "1..bins, equal-size bins by probability ascending (bin 1: the inactive end)",
            "rows": "pairs in the bin",
            "p_min": "lowest probability",
            "p_max": "highest probability",
            "p_mean": "mean probability",
        },
    ),
    "rejuvenation_states": Doc(
        "inactive vs active pairs (ch. 5; stage state_properties)",
        {
            "state": "active or inactive",
            "rows": "pairs",
            "prob": "mean probability",
            "length": "mean source tokens",
            "coverage": "mean share of source words aligned (alignments.coverage)",
            "uncertainty": "mean source uncertainty U (Eq. 6.3)",
        },
    ),
}

# train_nmt
TRAIN_NMT_VIEWS: dict[str, Doc] = {
    "training_mix": Doc(
        "the students' data per arm: its mix queries, each repeated copies times (train_nmt)",
        {
            "uid": "md5 of (mix name, src, tgt)",
            **BITEXT,
            "source": "the mix entry's name (a key of the arm's mix)",
            "line": "1-based row in the mix",
            "copy": "0-based repeat of the row (the arm's copies)",
            "arm": "the arm (experiments key; `mix` without)",
            "phase": "train, or continue (its continue_on mix)",
        },
    ),
    "heldout_overlap": Doc(
        "training rows that reach a held-out line, per input (an arm's mix, a classifier's data): the run failed "
        "unless heldout.allow_overlap names the set",
        {
            "row": "0-based row of the input (its first occurrence)",
            "side": "the input's field that matched (src, tgt, text, tokens)",
            "text": "that field's text",
            "heldout": "the held-out set",
            "heldout_line": "the held-out set's line (1-based)",
            "heldout_text": "that line's text (the side that matched)",
            "jaccard": "1 for equal after normalising, else the Jaccard similarity (>= heldout.threshold)",
            "input": "the training input, by its profile key (train_nmt.experiments.all.mix)",
        },
    ),
    "test_translations": Doc(
        "every student's translations of each test set (stage arm_translations)",
        {
            "uid": "the test pair's uid",
            "src": "test source sentence",
            "ref": "the reference (test target)",
            "hyp": "the student's translation",
            "testset": "the test dataset",
            "arm": "the student's arm",
            "seed": "the student's seed",
            "model": "the student's fingerprint (models.fingerprint)",
        },
    ),
}
