"""The held-out sets' guard (issue 47): no training input of any pipeline may hold a test or dev line.

    heldout:
      threshold: 0.8            # decontaminate's rule: equal after normalising, or Jaccard >= threshold (MinHash LSH)
      allow_overlap: [dev_set]  # held-out sets a training input may overlap on purpose, by name (none by default)
      on_overlap: drop          # a train_nmt mix's overlapping rows left out of it, each a `dropped` row (default: fail)

Every training input assembled after ingest (a train_nmt arm's SQL mix and its continued-training mix, the
classifier's training rows, the slot tagger's) is compared with every held-out set (conf/roles.py) before a model
learns from it (flows/pipelines/heldout.py); an overlap fails the run with one line naming the input, the set and
the count, unless the set is named here. With ``on_overlap: drop`` a train_nmt arm's mix (generated rows: a
paraphrase of a training sentence can land within Jaccard 0.8 of a test sentence) loses those rows instead: each is
a row of `dropped` (reason ``test_overlap``, the set and line in ``detail``) and of `heldout_overlap`, and the run's
warnings count them. Every other input (a teacher's bitext, the classifier's and the slot tagger's rows) still fails.
"""

from __future__ import annotations

from typing import Literal

from conf.sections.filters import DecontaminateConf


class HeldoutConf(DecontaminateConf):
    """decontaminate's parameters (``threshold``, ``shingle``, ``n``, ``num_perm``, ``seed``) for the check, and the
    held-out sets a training input may overlap (``allow_overlap``), and what an overlap of a train_nmt mix does
    (``on_overlap``: fail the run, or drop those rows from the mix)."""

    allow_overlap: list[str] = []
    on_overlap: Literal["fail", "drop"] = "fail"
