"""fast_align (Dyer, Chahuneau & Smith 2013): IBM Model 2 with a diagonal tension prior, hot loops in numba.

    p(a_j = 0 | j, m, n) = p0                                                        (NULL, p0 = 0.08)
    p(a_j = i | j, m, n) = (1 − p0) · exp(λ·h(j, i, m, n)) / Z_λ(j, m, n),  h = −|i/n − j/m|   (i, j 1-based)
    p(f | e_{a_j})       = θ(f | e),  θ = exp(ψ(c_ef + α) − ψ(Σ_f' (c_ef' + α)))  (variational Bayes, α=0.01)
    λ ← clamp(λ + 20·(E_post[h] − E_λ[h]), 0.1, 14), 8 steps after each iteration but the first and last

Hand-written: no maintained PyPI package ships clab's fast_align (the tool is C++ built from source;
`systran-align` is a 2023 fork with its own changes, `eflomal` a different model), so this package
re-implements clab/fast_align's `fast_align.cc`, `da.h` (`DiagonalAlignment`) and `ttables.h` (`TTable`,
`Md::digamma`) with the reference's quirks kept, and `atools -c grow-diag-final-and`. Where it differs on
purpose (whitespace, empty sides, summation order, printed floats) is said in the module concerned.
`tests/fixtures/fast_align/` holds the reference tool's output that the tests compare with.

Modules, bottom up: `maths` (da.h, ttables.h scalar maths), `table` (the CSR θ table over co-occurring
pairs), `kernels` (EM, normalisation, tension, scores), `pool` (the thread pool), `encoding` (tokens -> ids),
`direction` (one direction's corpus, the prior cache, chunks), `alignment` (`Alignment`, Pharaoh I/O),
`symmetrise` (grow-diag-final-and), `model` (`FastAlign`: train, align, tables; `align_both`, `symmetrize`),
`sharded` (the EM over a bitext's parts: E-step per part, M-step a sum of their counts; issue 51).
"""

from models.aligner.alignment import Alignment
from models.aligner.encoding import encode_stream
from models.aligner.maths import diagonal_prior, log_poisson, vb_normalize
from models.aligner.model import FastAlign, align_both, align_encoded, symmetrize
from models.aligner.symmetrise import grow_diag_final_and

__all__ = [
    "Alignment",
    "FastAlign",
    "align_both",
    "align_encoded",
    "diagonal_prior",
    "encode_stream",
    "grow_diag_final_and",
    "log_poisson",
    "symmetrize",
    "vb_normalize",
]
