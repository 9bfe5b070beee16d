"""The held-out sets' guard (issue 47): no training input of any pipeline may hold a test or dev line.

    heldout:
      threshold: 0.8            # decontaminate's rule: equal after normalising, or Jaccard >= threshold (MinHash LSH)
      allow_overlap: [dev_set]  # held-out sets a training input may overlap on purpose, by name (none by default)

Every training input assembled after ingest (a train_nmt arm's SQL mix and its continued-training mix, the
classifier's training rows, the slot tagger's) is compared with every held-out set (conf/roles.py) before a model
learns from it (flows/pipelines/heldout.py); an overlap fails the run with one line naming the input, the set and
the count, unless the set is named here.
"""

from __future__ import annotations

from conf.sections.filters import DecontaminateConf


class HeldoutConf(DecontaminateConf):
    """decontaminate's parameters (``threshold``, ``shingle``, ``n``, ``num_perm``, ``seed``) for the check, and the
    held-out sets a training input may overlap (``allow_overlap``)."""

    allow_overlap: list[str] = []
