"""OpusTrainer's modifier list, typed: ``[{UpperCase: 0.05}, {Typos: 0.05, char_swap: 0.1}, {Tags: 0.02, augment: 0.0}]``.

Each entry is a mapping whose first key names the modifier and holds its probability p; its other keys are that
modifier's parameters, with OpusTrainer 0.5's names and defaults (its curriculum loader, ``trainer.py``
``_load_modifier``). ``parse_modifiers`` turns the list into frozen pydantic specs (``conf.base.ConfModel``: unknown
keys refused) and raises one ``ConfError`` naming the entry, the modifier and the key:
``modifiers[1] (Typos): char_swp is not a key of Typos; expected one of p, char_swap, …``. A spec runs its stage
function with ``spec.apply(rows, seed=…)``. Only conf/ is imported, so the models can move to a conf section as
they are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, ClassVar

import pyarrow as pa
from pydantic import Field, ValidationError, model_validator

from conf.base import ConfModel
from conf.errors import ConfError
from tasks.robustness.casing import title_case, upper_case
from tasks.robustness.merge import merge
from tasks.robustness.noise import noise
from tasks.robustness.prefix import TEMPLATE as PREFIX_TEMPLATE
from tasks.robustness.prefix import prefix
from tasks.robustness.punctuation import remove_end_punctuation
from tasks.robustness.tags import TEMPLATE as TAGS_TEMPLATE
from tasks.robustness.tags import modes_of, tags
from tasks.robustness.typos import KINDS, typo_kinds, typos

Probability = Annotated[float, Field(ge=0.0, le=1.0)]
Count = Annotated[int, Field(ge=1)]


class ModifierSpec(ConfModel):
    """One modifier: its probability ``p`` (the value of its name's key) and its parameters."""

    name: ClassVar[str]
    stage: ClassVar[Callable[..., pa.Table]]
    p: Probability

    def kwargs(self) -> dict[str, Any]:
        """The stage function's keyword arguments."""
        return self.model_dump()

    def apply(self, rows: pa.Table, *, seed: int = 0) -> pa.Table:
        """The rows this modifier changes or makes (``tasks.robustness.rows.ROBUST_BITEXT``)."""
        return type(self).stage(rows, seed=seed, **self.kwargs())


class UpperCase(ModifierSpec):
    name = "UpperCase"
    stage = staticmethod(upper_case)


class TitleCase(ModifierSpec):
    name = "TitleCase"
    stage = staticmethod(title_case)


class Typos(ModifierSpec):
    """The kinds named, in their order (none: all nine at 0.1)."""

    name = "Typos"
    stage = staticmethod(typos)
    order: tuple[str, ...] = ()
    char_swap: Probability | None = None
    missing_char: Probability | None = None
    extra_char: Probability | None = None
    nearby_char: Probability | None = None
    similar_char: Probability | None = None
    skipped_space: Probability | None = None
    random_space: Probability | None = None
    repeated_char: Probability | None = None
    unichar: Probability | None = None

    @model_validator(mode="before")
    @classmethod
    def _keep_order(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "order" not in data:
            return {**data, "order": tuple(k for k in data if k in KINDS)}
        return data

    def kinds(self) -> dict[str, float]:
        """{kind: probability} as OpusTrainer applies them, in their order."""
        return typo_kinds({k: getattr(self, k) for k in self.order if getattr(self, k) is not None})

    def kwargs(self) -> dict[str, Any]:
        """``typos``' keyword arguments."""
        return {"p": self.p, "kinds": self.kinds()}


UNSUPPORTED_TAGS = ("custom_detok_src", "custom_detok_trg", "spm_vocab_src", "spm_vocab_trg")


class Tags(ModifierSpec):
    name = "Tags"
    stage = staticmethod(tags)
    augment: Probability = 0.0
    replace: Probability = 0.0
    tag: Annotated[float, Field(ge=0.0)] = 1.0
    template: str = TAGS_TEMPLATE

    @model_validator(mode="before")
    @classmethod
    def _supported(cls, data: Any) -> Any:
        for key in UNSUPPORTED_TAGS:
            if isinstance(data, Mapping) and data.get(key) is not None:
                raise ValueError(f"{key} is OpusTrainer's but not supported here (whitespace tokens only)")
        return {k: v for k, v in data.items() if k not in UNSUPPORTED_TAGS} if isinstance(data, Mapping) else data

    @model_validator(mode="after")
    def _modes(self) -> Tags:
        modes_of(self.augment, self.replace, self.tag)
        words = self.template.split()
        if not any("{src}" in w for w in words) or not any("{trg}" in w for w in words):
            raise ValueError(f"template {self.template!r} must hold {{src}} and {{trg}}")
        return self


class Noise(ModifierSpec):
    name = "Noise"
    stage = staticmethod(noise)
    min_word_length: Count = 2
    max_word_length: Count = 5
    max_words: Count = 6

    @model_validator(mode="after")
    def _lengths(self) -> Noise:
        if self.min_word_length > self.max_word_length:
            raise ValueError(f"min_word_length {self.min_word_length} > max_word_length {self.max_word_length}")
        return self


class Merge(ModifierSpec):
    name = "Merge"
    stage = staticmethod(merge)
    min_lines: Annotated[int, Field(ge=2)] = 2
    max_lines: Annotated[int, Field(ge=2)] = 4

    @model_validator(mode="after")
    def _lines(self) -> Merge:
        if self.min_lines > self.max_lines:
            raise ValueError(f"min_lines {self.min_lines} > max_lines {self.max_lines}")
        return self


class Prefix(ModifierSpec):
    name = "Prefix"
    stage = staticmethod(prefix)
    min_words: Count = 2
    max_words: Count = 5
    template: str = PREFIX_TEMPLATE

    @model_validator(mode="after")
    def _words(self) -> Prefix:
        if self.min_words > self.max_words:
            raise ValueError(f"min_words {self.min_words} > max_words {self.max_words}")
        if "{trg}" not in self.template:
            raise ValueError(f"template {self.template!r} must hold {{trg}}")
        return self


class RemoveEndPunct(ModifierSpec):
    name = "RemoveEndPunct"
    stage = staticmethod(remove_end_punctuation)


SPECS: dict[str, type[ModifierSpec]] = {
    s.name: s for s in (UpperCase, TitleCase, Typos, Tags, Noise, Merge, Prefix, RemoveEndPunct)
}
ALIASES = {"RemoveEndPunctuation": "RemoveEndPunct"}  # the name for it


def _problem(err: Mapping[str, Any], name: str, model: type[ModifierSpec]) -> str:
    key = ".".join(str(x) for x in err["loc"]) or name
    key = name if key == "p" else key
    if err["type"] == "extra_forbidden":
        keys = [name if k == "p" else k for k in model.model_fields if k != "order"]
        return f"{key} is not a key of {name}; expected one of {', '.join(keys)}"
    if err["type"] == "missing":
        return f"{key} is required"
    message = str(err["msg"]).removeprefix("Value error, ").removeprefix(f"{name}: ")
    return f"{message}" if not err["loc"] else f"{key} = {err['input']!r}: {message}"


def parse_modifier(entry: Any, where: str = "modifiers[0]") -> ModifierSpec:
    """One entry, ``{Name: p, key: value, …}``, as its spec."""
    if not isinstance(entry, Mapping) or not entry:
        raise ConfError(f"{where}: expected a mapping such as {{UpperCase: 0.05}}, found {entry!r}")
    (given, p), *rest = entry.items()
    name = ALIASES.get(str(given), str(given))
    if name not in SPECS:
        raise ConfError(f"{where}: unknown modifier {given!r}; expected one of {', '.join(SPECS)}")
    model = SPECS[name]
    data = {"p": p, **dict(rest)}
    if name == "Typos" and "order" in data:
        raise ConfError(f"{where} (Typos): order is not a key of Typos; expected one of Typos, {', '.join(KINDS)}")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfError(f"{where} ({name}): " + "; ".join(_problem(err, name, model) for err in e.errors())) from None


def parse_modifiers(entries: Sequence[Any], where: str = "modifiers") -> list[ModifierSpec]:
    """OpusTrainer's ``modifiers:`` list as specs, in order; a ConfError names the first wrong entry and key."""
    if isinstance(entries, (str, bytes, Mapping)) or not isinstance(entries, Sequence):
        raise ConfError(f"{where}: expected a list such as [{{UpperCase: 0.05}}, {{Typos: 0.05}}], found {entries!r}")
    return [parse_modifier(entry, f"{where}[{i}]") for i, entry in enumerate(entries)]
