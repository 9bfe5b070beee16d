"""Stages several pipelines run: translate and score with an NMT model, score with a KenLM model, BLEU/chrF
with sacrebleu, a model's validation score, a training mix selected from the catalog with SQL."""
