"""The documentation of the MT paraphrase pipeline's view (mt_paraphrase); see storage/views/docs.py."""

from __future__ import annotations

from storage.views.docs import Doc

MT_PARAPHRASE_VIEWS: dict[str, Doc] = {
    "paraphrased_bitext": Doc(
        "pairs whose one side is a constrained paraphrase of the original's (Hu et al. 2019, "
        "appendix C; stages side_idf → constrained_paraphrases → paraphrased_bitext): the "
        "constraints kept, unique per pair, token Jaccard to the original below the threshold",
        {
            "uid": "md5 of parent_uid and the paraphrase",
            "parent_uid": "uid of the original pair (bitext view)",
            "source": "dataset name of the original pair",
            "line": "1-based input line of the original pair",
            "side": "the paraphrased side: src or tgt (the other side is the original's)",
            "src": "source sentence (the paraphrase when side = src)",
            "tgt": "target sentence (the paraphrase when side = tgt)",
            "jaccard": "token Jaccard (lower-cased whitespace tokens) between the paraphrase and the original side",
            "constraints": "JSON {negative: the forbidden top-IDF words, positive: the kept names and numbers}",
            "sample": "the draw's index among the pair's n (constrained decoding: the rank in the n-best)",
            "model": "fingerprint of the paraphraser (round trip or Hugging Face model)",
        },
    ),
}

ROBUSTNESS_VIEWS: dict[str, Doc] = {
    "robust_bitext": Doc(
        "pairs changed or made by OpusTrainer 0.5's modifiers (UpperCase, TitleCase, Typos, Tags, Noise, Merge, "
        "Prefix, RemoveEndPunct; stage robust_bitext, issue 30), only the rows a modifier changed, each from the "
        "original pairs with its draws seeded by (seed, uid, modifier)",
        {
            "uid": "md5 of modifier, params, parents, src and tgt",
            "parent_uid": "uid of the original pair (bitext view; a merge: its first pair)",
            "parents": "uids of every original pair it was made from, in order (a merge: two or more)",
            "source": "dataset name of the original pair",
            "line": "1-based input line of the original pair",
            "src": "source sentence after the modifier",
            "tgt": "target sentence after the modifier",
            "links": "Pharaoh word alignment after the change (source-target positions of whitespace tokens); null: none",
            "modifier": "OpusTrainer's name of the modifier that made the row, e.g. UpperCase",
            "params": "JSON of the modifier's parameters, its probability first",
        },
    ),
    "robust_mono": Doc(
        "monolingual sentences changed by the one-sided modifiers of the list (UpperCase, TitleCase, Typos, "
        "RemoveEndPunct; stage robust_mono, for the datasets of robustness.mono), only the changed rows, draws "
        "seeded by (seed, uid, modifier)",
        {
            "uid": "md5 of modifier, params, parent uid and text",
            "parent_uid": "uid of the original sentence (mono view)",
            "source": "dataset name of the original sentence",
            "line": "1-based input line of the original sentence",
            "text": "the sentence after the modifier",
            "modifier": "OpusTrainer's name of the modifier that made the row, e.g. Typos",
            "params": "JSON of the modifier's parameters, its probability first",
        },
    ),
}
