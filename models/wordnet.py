"""WordNet 3.0 synonyms, offline: Debian's database files read with nltk's WordNet corpus reader.

Debian's ``wordnet-base`` (the database under ``/usr/share/wordnet``) and ``wordnet-sense-index`` (its
``index.sense``) hold WordNet 3.0; nltk's reader needs them as ``<root>/corpora/wordnet/`` in a directory
no other user can write, plus a ``lexnames`` table Debian does not ship, which is the one in the
lexnames(5WN) man page. ``wordnet_root`` lays that out once under the user's cache (a copy of the
database, ``lexnames`` from the man page) and nothing is downloaded. ``make install`` installs the
packages where they are missing.
"""

from __future__ import annotations

import functools
import gzip
import os
import re
import shutil
import threading
import warnings
from pathlib import Path
from typing import Any

from conf.errors import ModelError

DEBIAN_WORDNET = Path("/usr/share/wordnet")
LEXNAMES_MAN = Path("/usr/share/man/man5/lexnames.5WN.gz")
INSTALL_HINT = (
    "Hint: apt-get install wordnet-base wordnet-sense-index (Debian/Ubuntu; `make install` does it), "
    "or set AUGDAG_WORDNET to a directory holding the WordNet 3.0 database files"
)
_READING = threading.Lock()
CATEGORY = {"noun": 1, "verb": 2, "adj": 3, "adv": 4}  # the lexnames file's third column


def lexnames(man_page: Path = LEXNAMES_MAN) -> str:
    """The ``lexnames`` table (``NN<TAB>name<TAB>category``) from the lexnames(5WN) man page."""
    text = gzip.decompress(man_page.read_bytes()).decode("utf-8", "replace")
    rows = re.findall(r"^(\d\d)\t(\w+\.\w+)\s", text, flags=re.M)
    if len(rows) != 45:
        raise ModelError(f"{man_page}: expected the 45 lexicographer files of WordNet 3.0, found {len(rows)}")
    return "".join(f"{n}\t{name}\t{CATEGORY[name.split('.')[0]]}\n" for n, name in rows)


def wordnet_root(database: Path | None = None, cache: Path | None = None) -> Path:
    """A directory for ``nltk.data.path`` whose ``corpora/wordnet`` is the database (made once)."""
    database = Path(database or os.environ.get("AUGDAG_WORDNET") or DEBIAN_WORDNET)
    if not (database / "index.noun").is_file():
        raise ModelError(f"{database}: no WordNet 3.0 database (index.noun missing). {INSTALL_HINT}")
    root = Path(cache or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "augdag" / "nltk_data")
    target = root / "corpora" / "wordnet"
    if not (target / "lexnames").is_file():
        target.mkdir(parents=True, exist_ok=True, mode=0o755)
        for d in (root, root / "corpora", target):
            d.chmod(0o755)  # nltk refuses a directory others may write
        for f in database.iterdir():  # copies (36 MB): nltk 3.10 refuses symbolic and hard links alike
            if f.is_file() and not (target / f.name).exists():
                tmp = target / f".{f.name}.{os.getpid()}"
                shutil.copyfile(f, tmp)
                tmp.replace(target / f.name)
        source = database / "lexnames"
        text = source.read_text(encoding="utf-8") if source.is_file() else lexnames()
        tmp = target / f".lexnames.{os.getpid()}"
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(target / "lexnames")
    return root


@functools.cache
def wordnet(root: Path | None = None) -> Any:
    """nltk's WordNet reader over ``root`` (default ``wordnet_root()``), loaded once per process."""
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    root = root or wordnet_root()
    path = root / "corpora" / "wordnet"
    if str(root) not in nltk.data.path:
        nltk.data.path.append(str(root))  # nltk reads corpora only under its data path

    class EnglishWordNet(WordNetCorpusReader):
        """nltk's reader without ``map30``: at load it maps WordNet 3.0's senses onto the loaded version's for Open
        Multilingual Wordnet tab files (``custom_lemmas``, its only reader), reading ``index.sense`` twice: over half
        of the load's ~4 CPU-s, for data never asked for here (English only, no OMW reader)."""

        def map_wn(self, version: str = "wordnet") -> None:
            return None

    try:
        with warnings.catch_warnings():  # "multilingual functions are not available": no Open Multilingual
            warnings.simplefilter("ignore", UserWarning)  # Wordnet is asked for, English synonyms only
            return EnglishWordNet(str(path), None)
    except (OSError, LookupError) as e:
        raise ModelError(f"{path}: nltk cannot read the WordNet database: {e}. {INSTALL_HINT}") from e


def synonyms(word: str, reader: Any = None) -> list[str]:
    """WordNet synonyms of ``word`` (lemma names of all its synsets, '_' as a space), without the word
    itself, sorted: the order a seeded draw picks from."""
    wn = reader or wordnet()
    with _READING:  # nltk's reader seeks and reads shared file handles: one lookup at a time per process
        found = {lemma.name().replace("_", " ").lower() for s in wn.synsets(word) for lemma in s.lemmas()}
    found.discard(word.lower())
    return sorted(w for w in found if all(c.isalpha() or c in " -'" for c in w))


@functools.cache
def database_fingerprint(root: Path | None = None) -> str:
    """md5 of the database files under ``root`` (default ``wordnet_root()``), names and contents, in name
    order: what a stage that reads synonyms puts in its fingerprint (a new WordNet recomputes it)."""
    import hashlib

    path = (root or wordnet_root()) / "corpora" / "wordnet"
    h = hashlib.md5()
    for f in sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()
