"""The keyboard tables of typo 0.1.5 (``typo/keyboardlayouts/en_default.py``), which OpusTrainer's ``Typos`` uses, and
its neighbour rule as OpusTrainer patches it (digits without a numpad entry stay as they are, OpusTrainer issue 40).

Copied, not imported: typo comes with OpusTrainer (the ``bench`` extra), and these tables are the whole of what
``Typos`` needs from it.
"""

from __future__ import annotations

from tasks.robustness.draws import Stream

NEIGHBOURING_LETTERS = {
    "a": "qwsz", "b": "vghn", "c": "xdfv", "d": "serfcx", "e": "rdsw", "f": "drtgvc", "g": "ftyhbv", "h": "nbgyuj",
    "i": "okju", "j": "huikmn", "k": "jiolm", "l": "kop", "m": "njk", "n": "bhjm", "o": "iklp", "p": "ol", "q": "aw",
    "r": "edft", "s": "azxdew", "t": "rfgy", "u": "yhji", "v": "cfgb", "w": "qasde", "x": "zsdc", "y": "tghu",
    "z": "asx",
}  # fmt: skip
NEIGHBOURING_NUMPAD_DIGITS = {
    "0": "12", "1": "4520", "2": "014563", "3": "256", "4": "78521", "5": "78946123", "6": "98523", "7": "854",
    "8": "74569", "9": "856",
}  # fmt: skip
VISUALLY_SIMILAR = {
    "0": "689oDOU", "1": "7I", "2": "7QZ", "3": "589", "4": "9U", "5": "38S", "6": "08bG", "7": "12TZ", "8": "0356BS",
    "9": "034gq", "b": "6", "c": "e", "e": "c", "g": "9q", "i": "I", "m": "n", "n": "mp", "o": "0", "p": "n", "q": "9g",
    "u": "v", "v": "u", "y": "z", "z": "y", "B": "8P", "C": "G", "D": "0O", "E": "F", "F": "7ER", "G": "6C", "I": "1iLT",
    "L": "I", "M": "N", "N": "M", "O": "0DU", "P": "B", "Q": "2", "S": "58", "T": "I7", "U": "04OV", "V": "UW", "W": "U",
    "X": "Y", "Y": "5X", "Z": "27",
}  # fmt: skip


def neighbour(char: str, stream: Stream) -> str:
    """``get_random_neighbor`` as OpusTrainer patches it: a digit: a numpad neighbour or, half the time, the digit
    one up or down (0 → 9, 1 → 2); a letter a-z: a keyboard neighbour in its case; anything else: itself."""
    if char.isdecimal():
        if char not in NEIGHBOURING_NUMPAD_DIGITS:
            return char
        if stream.below(2) == 0:  # random.choice([True, False]): the numpad
            return stream.choice(NEIGHBOURING_NUMPAD_DIGITS[char])
        if char in "01":
            return "9" if char == "0" else "2"
        return str(int(char) + (-1) ** stream.randint(0, 1))
    letters = NEIGHBOURING_LETTERS.get(char.lower())
    if letters is None:
        return char
    near = stream.choice(letters)
    return near.upper() if char.isupper() else near


def similar(char: str, stream: Stream) -> str:
    """``get_random_visually_similar_char``: a look-alike from the table, else the character itself."""
    options = VISUALLY_SIMILAR.get(char)
    return stream.choice(options) if options else char
