"""Robustness augmentation for MT (issue 30): OpusTrainer 0.5's modifiers as pure stage functions over a bitext.

Each modifier is a function ``(rows: pa.Table, *, p, seed, <its parameters>) -> pa.Table`` returning only the rows it
changes or makes, with their lineage (rows.py ``ROBUST_BITEXT``); every draw is a function of (seed, row uid,
modifier) (draws.py), so a row's output does not depend on its shard. ``spec.parse_modifiers`` reads OpusTrainer's
``modifiers:`` list into typed specs.

| OpusTrainer | function | module |
| --- | --- | --- |
| UpperCase, TitleCase | ``upper_case``, ``title_case`` | casing.py |
| Typos | ``typos`` | typos.py (keyboard.py: typo's tables) |
| Tags | ``tags`` | tags.py |
| Noise | ``noise`` | noise.py |
| Merge | ``merge`` | merge.py |
| Prefix | ``prefix`` | prefix.py |
| RemoveEndPunct | ``remove_end_punctuation`` | punctuation.py |
"""
