"""The configuration sections a pipeline or a dataset brings: cleaning, decoding, sentences, tokenizer, NMT
models, experiments, classifiers, slots, MT paraphrases."""
