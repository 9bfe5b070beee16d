"""Per-row draws: every number a modifier draws for a row is a function of (seed, row uid, modifier) and a counter.

    state(row) = fmix(fmix(fmix(fmix(fmix(w₀ ⊕ k₀) ⊕ w₁) ⊕ w₂) ⊕ w₃) ⊕ k₁)    k = blake2b-128(seed ␟ modifier)
    draw(row, j) = fmix(state + (j + 1)·γ)      SplitMix64's j-th output from that state (γ = 0x9E37…7C15)
    uniform(row, j) = (draw >> 11) · 2⁻⁵³       in [0, 1)

``w₀ … w₃`` are the uid's 32 bytes as four little-endian 64-bit words: the md5 uids every record kind has
(``storage.schemas.with_uid``) are 32 hex digits, read for the whole column with one view of its data buffer; a
uid of another length is replaced by its blake2b-256 first. ``fmix`` is SplitMix64's output function (Steele, Lea
& Flood 2014; the seeding generator of xoshiro and Java's SplittableRandom), a bijection of 64-bit words. A row's
draws therefore depend on nothing else: not on its shard, its position, the other rows, or what else runs in the
process (no global generator is touched).

Counters are split into lanes (``lane(n) + i``) so that a modifier's kinds of draws never share a counter: the
row's decision, one per candidate, the characters of a random word. Written by hand because numpy's generators
draw one stream per object: a ``Generator(Philox(key))`` per row costs ~19 µs to build here, 19 s for a million
rows, where OpusTrainer spends 0.3 s on the whole UpperCase pass. ``uniform`` computes one draw for every row
(or any array of rows and counters) in a few vectorised operations; ``Stream`` gives the same numbers one at a
time to the per-row code (typos, tags), and the tests check that the two agree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TypeVar

import numpy as np
import pyarrow as pa

GAMMA = 0x9E3779B97F4A7C15
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_MASK = (1 << 64) - 1
LANE = 1 << 32  # counters of one lane: lane(n) .. lane(n) + 2³² − 1
T = TypeVar("T")


def lane(n: int) -> int:
    """The first counter of lane ``n``."""
    return n * LANE


def fmix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's output function over uint64 words (wrapping arithmetic)."""
    with np.errstate(over="ignore"):  # a 0-d operand warns where an array silently wraps
        z = (z ^ (z >> np.uint64(30))) * np.uint64(_M1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(_M2)
    return z ^ (z >> np.uint64(31))


def _fmix_int(z: int) -> int:
    z = ((z ^ (z >> 30)) * _M1) & _MASK
    z = ((z ^ (z >> 27)) * _M2) & _MASK
    return z ^ (z >> 31)


def modifier_key(seed: int, modifier: str) -> tuple[int, int]:
    """k = blake2b-128(seed ␟ modifier) as two 64-bit words."""
    digest = hashlib.blake2b(f"{seed}\x1f{modifier}".encode(), digest_size=16).digest()
    return int.from_bytes(digest[:8], "big"), int.from_bytes(digest[8:], "big")


def _uid_words(uid: str) -> tuple[int, int, int, int]:
    raw = uid.encode()
    if len(raw) != 32:
        raw = hashlib.blake2b(raw, digest_size=32).digest()
    return tuple(int.from_bytes(raw[i : i + 8], "little") for i in range(0, 32, 8))  # type: ignore[return-value]


def uid_words(uids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Every uid as four 64-bit words (n × 4, uint64): its 32 UTF-8 bytes (an md5 uid's hex digits), or the 32
    bytes of its blake2b-256 when it has another length. A column of 32-byte uids is one view of its data buffer."""
    strings = uids.combine_chunks() if isinstance(uids, pa.ChunkedArray) else uids
    n = len(strings)
    if n and strings.null_count == 0 and pa.types.is_string(strings.type):
        offsets = np.frombuffer(strings.buffers()[1], dtype=np.int32)[strings.offset : strings.offset + n + 1]
        if offsets[-1] - offsets[0] == 32 * n and np.all(np.diff(offsets) == 32):
            data = np.frombuffer(strings.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
            return data.view("<u8").reshape(n, 4).astype(np.uint64)
    return np.array([_uid_words(str(u)) for u in strings.to_pylist()], dtype=np.uint64).reshape(n, 4)


def row_states(uids: pa.Array | pa.ChunkedArray, *, seed: int, modifier: str) -> np.ndarray:
    """state(row) for every uid (uint64), the origin of all that row's draws for ``modifier``."""
    w = uid_words(uids)
    k0, k1 = modifier_key(seed, modifier)
    z = fmix(w[:, 0] ^ np.uint64(k0))
    for i in (1, 2, 3):
        z = fmix(z ^ w[:, i])
    return fmix(z ^ np.uint64(k1))


def row_state(uid: str, *, seed: int, modifier: str) -> int:
    """state(row) of one uid, as ``row_states`` computes it."""
    w, (k0, k1) = _uid_words(uid), modifier_key(seed, modifier)
    z = _fmix_int(w[0] ^ k0)
    for i in (1, 2, 3):
        z = _fmix_int(z ^ w[i])
    return _fmix_int(z ^ k1)


def uniform(states: np.ndarray, counters: np.ndarray | int) -> np.ndarray:
    """uniform(row, j) ∈ [0, 1) for arrays of states and counters (broadcast)."""
    with np.errstate(over="ignore"):
        z = np.asarray(states, dtype=np.uint64) + (np.asarray(counters, dtype=np.uint64) + np.uint64(1)) * np.uint64(GAMMA)
    return (fmix(z) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def integers(states: np.ndarray, counters: np.ndarray | int, low: int | np.ndarray, high: int | np.ndarray) -> np.ndarray:
    """An integer in [low, high] (both included, as ``random.randint``) per state: ⌊low + u·(high − low + 1)⌋."""
    low, high = np.asarray(low, dtype=np.int64), np.asarray(high, dtype=np.int64)
    return low + np.floor(uniform(states, counters) * (high - low + 1)).astype(np.int64)


class Stream:
    """One row's draws one at a time: ``uniform()`` returns uniform(row, start), uniform(row, start + 1), …"""

    __slots__ = ("counter", "state")

    def __init__(self, state: int, start: int = 0) -> None:
        self.state, self.counter = int(state), start

    def uniform(self) -> float:
        """The next uniform(row, j) ∈ [0, 1)."""
        z = _fmix_int((self.state + (self.counter + 1) * GAMMA) & _MASK)
        self.counter += 1
        return (z >> 11) * 2.0**-53

    def below(self, n: int) -> int:
        """An integer in [0, n)."""
        return int(self.uniform() * n)

    def randint(self, low: int, high: int) -> int:
        """An integer in [low, high], both included (``random.randint``)."""
        return low + self.below(high - low + 1)

    def choice(self, options: Sequence[T]) -> T:
        """One of ``options``, uniformly (``random.choice``)."""
        return options[self.below(len(options))]
