"""augdag's public Python API: read a cache's views as Arrow, pandas, polars, Hugging Face or PyTorch data.

A training job outside augdag reads what the pipelines made, pinned to the run it trains on::

    import augdag

    cache = augdag.open(".augdag")                 # a cache directory, read-only (as `augdag --cache`)
    cache.views()                                  # name, rows, description of every view
    night = cache.latest("nightly")                # or cache.run("nightly-20261202T030000-1a2b3c")
    bitext = night.view("bitext", columns=["src", "tgt"], where="length(src) < 200")
    table = bitext.to_arrow()                      # pyarrow.Table; .to_pandas(), .to_polars(), .dataset()
    loader = night.view("bitext").to_torch(batch_size=64, shuffle_seed=1)   # streaming IterableDataset

A pinned cache reads exactly the artifacts that run used, however many nights write meanwhile (augdag/pins.py);
every part is proven against its manifest before it is read (augdag/view.py). Errors are ``augdag.Error``
(``CatalogError``: a wrong name, condition or run; ``IntegrityError``: a part that is not as recorded), each one
line naming what is wrong and what to do.
"""

from __future__ import annotations

from augdag.cache import Cache, open_cache
from augdag.pins import Artifact
from augdag.view import View
from conf.errors import AugdagError as Error
from conf.errors import CatalogError, ConfError
from storage.integrity import IntegrityError

open = open_cache  # noqa: A001 — `augdag.open(path)`, as the issue asks (shadows the builtin inside this module only)

__all__ = ["Artifact", "Cache", "CatalogError", "ConfError", "Error", "IntegrityError", "View", "open"]
