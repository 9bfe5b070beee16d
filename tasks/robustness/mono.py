"""The `robust_mono` stage: the modifiers that make sense on one side, over monolingual text, with lineage.

``UpperCase``, ``TitleCase``, ``Typos`` and ``RemoveEndPunct`` change a sentence in place and need nothing but the
sentence; ``Tags`` and ``Prefix`` need a target and an alignment, ``Noise`` and ``Merge`` make new pairs, so they
apply to a bitext only (``robustness.mono`` takes the one-sided modifiers of ``robustness.modifiers`` and says which
in the run's summary). Each text is read as a pair whose target is a copy of it, so every modifier applies its own
rule, draws and parameters to that one side (RemoveEndPunct: the sentence ends with one mark, not two), and the
same row of a monolingual dataset gets the same change every night: the draws are (seed, uid, modifier)'s, as for
a pair. Only the rows a modifier changed are emitted (``ROBUST_MONO``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from tasks.robustness.rows import column, row_uids
from tasks.robustness.spec import ModifierSpec, parse_modifiers
from tasks.robustness.stage import RobustParams
from tasks.runtime.stage import Stage

MONO_MODIFIERS = ("UpperCase", "TitleCase", "Typos", "RemoveEndPunct")  # one sentence in, one changed sentence out

ROBUST_MONO = pa.schema(
    [
        pa.field("uid", pa.string(), metadata={"doc": "md5(modifier, params, parent uid, text)"}),
        pa.field("parent_uid", pa.string(), metadata={"doc": "the input row"}),
        pa.field("source", pa.string(), metadata={"doc": "the parent's dataset"}),
        pa.field("line", pa.int64(), metadata={"doc": "the parent's 1-based line"}),
        pa.field("text", pa.string()),
        pa.field("modifier", pa.string(), metadata={"doc": "OpusTrainer's name, e.g. UpperCase"}),
        pa.field("params", pa.string(), metadata={"doc": "JSON of the modifier's parameters"}),
    ]
)


def mono_specs(modifiers: Sequence[Mapping[str, Any]], where: str) -> list[ModifierSpec]:
    """The specs of ``modifiers`` that apply to one side (``MONO_MODIFIERS``), in list order."""
    return [s for s in parse_modifiers(list(modifiers), where) if s.name in MONO_MODIFIERS]


def robust_text(rows: pa.Table, *, seed: int = 0, modifiers: Sequence[Mapping[str, Any]] = ()) -> pa.Table:
    """The rows each one-sided modifier of ``modifiers`` changes in the monolingual shard ``rows`` (uid, text,
    source, line), in list order."""
    text = column(rows, "text")
    pairs = pa.table({"uid": column(rows, "uid"), "src": text, "tgt": text, "source": rows["source"], "line": rows["line"]})
    out = []
    for spec in mono_specs(modifiers, "robustness.modifiers"):
        made = spec.apply(pairs, seed=seed)
        params, text = made["params"].combine_chunks(), made["src"].combine_chunks()
        given = params[0].as_py() if len(params) else ""
        uids = row_uids(spec.name, given, made["parents"], text, pa.nulls(len(text), pa.string()))  # concat_ws skips the null
        out.append(
            pa.table([uids, made["parent_uid"], made["source"], made["line"], text, made["modifier"], params], schema=ROBUST_MONO)
        )
    return pa.concat_tables(out) if out else ROBUST_MONO.empty_table()


ROBUST_TEXT = Stage("robust_mono", "1", robust_text, view="robust_mono", params=RobustParams)
