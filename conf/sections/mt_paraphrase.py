"""The MT paraphrase-augmentation section (Hu et al. 2019, appendix C): paraphrase one side of a bitext
under lexical constraints, keep the unique ones with token Jaccard < 0.65, pair each with the other side."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from conf.base import ConfModel


class MtParaphraseConf(ConfModel):
    """Paraphrased pairs for train_nmt's mixes (view `paraphrased_bitext`), drawn with the product's
    paraphraser (`paraphrase.generator`: a round trip or a Hugging Face model)."""

    bitext: str | None = None  # the bitext whose pairs are paraphrased (default: the profile's only bitext)
    side: Literal["src", "tgt"] = "src"  # the side in the paraphraser's language (the paper: the English side)
    n: int = Field(10, ge=1)  # drawn per pair (constrained: the return decoder's n best; sample: n samples)
    keep: int = Field(10, ge=1)  # kept per pair at most (the paper kept about 10 on average)
    max_jaccard: float = Field(0.65, gt=0, le=1)  # keep iff token Jaccard to the original < this (the paper's 0.65)
    negative_top: int = Field(1, ge=0)  # the sentence's top-IDF words forbidden (0: no negative constraint)
    positive: bool = True  # keep numbers and capitalised non-initial words (names)
    # constrained: a round trip whose return model is native fairseq decodes with fairseq's lexically
    # constrained beam search and the bans; sample: top-k/top-p samples (bans in transformers; checked after)
    decode: Literal["constrained", "sample"] = "constrained"
    top_k: int = Field(120, ge=0)  # sample
    top_p: float = Field(0.95, gt=0, le=1)  # sample
    temperature: float = Field(1.0, gt=0)  # sample
    # paraphrase only the pairs whose uid falls in the first `share` of the uid space: about share × N, the
    # same pairs every night (a uid is an md5), chosen per shard
    share: float = Field(1.0, gt=0, le=1)
    seed: int = 0
