"""Slot-filling taggers for measuring augmentation by slot F1 (C2C-GenDA, Hou et al., AAAI 2021): the paper's Bi-LSTM
(optionally with a CRF) or any Hugging Face token-classification model, trained with the best-dev-epoch
protocol and scored with conlleval's span F1.

    settings = TaggerSettings()                                   # the paper's Bi-LSTM (random embeddings)
    record = train_tagger(train_rows, tmp_dir, settings, dev=dev_rows)
    tagger = SlotTagger.load(final_dir)
    span_f1(test_tags, tagger.predict(test_tokens))

Modules: ``settings`` (settings, card), ``bilstm`` and ``hf`` (the two kinds), ``tagger`` (load, predict),
``train`` (the training loop), ``metrics`` (span scores).
"""

from models.tagger.metrics import span_f1, span_scores
from models.tagger.settings import TaggerSettings
from models.tagger.tagger import SlotTagger
from models.tagger.train import train_tagger

__all__ = ["SlotTagger", "TaggerSettings", "span_f1", "span_scores", "train_tagger"]
