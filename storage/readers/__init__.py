"""Input readers: a configured dataset (text, tsv, jsonl, parquet, a saved HF dataset; compressed or not, in
any codec) as batches of typed rows plus the rows refused, with a reason."""
