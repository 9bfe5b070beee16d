"""The built-in demo corpora: a synthetic English→German-like bitext with known translation uncertainty.

One module per corpus kind: `grammar` (word classes, templates, the true translation table), `bitext`
(pairs and gold alignments), `mono` (with out-of-grammar lines), `labeled` (six topics), `slots` (BIO
tags), `corruptions` (the planted bad lines), `noise` (the planted noisy pairs the corpus filters drop) and
`writer` (`write_demo`); `draws` holds the seeded streams they share. `augdag demo` writes the demo data of
the demo profile and runs it.
"""

from demo.bitext import iter_bitext
from demo.corruptions import BAD_REASONS, MAX_LINE_CHARS, bad_lines
from demo.grammar import ambiguous_words, translation_table, word_entropy
from demo.labeled import iter_labeled
from demo.mono import iter_mono
from demo.noise import NOISE_REASONS, noise_lines
from demo.slots import iter_slots
from demo.writer import DemoPaths, write_demo

__all__ = [
    "BAD_REASONS",
    "MAX_LINE_CHARS",
    "NOISE_REASONS",
    "DemoPaths",
    "ambiguous_words",
    "bad_lines",
    "iter_bitext",
    "iter_labeled",
    "iter_mono",
    "iter_slots",
    "noise_lines",
    "translation_table",
    "word_entropy",
    "write_demo",
]
