"""mt_paraphrase's stages (Hu et al. 2019): constrained paraphrases of one side of a bitext."""
