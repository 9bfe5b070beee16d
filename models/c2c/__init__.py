"""C2C-GenDA's cluster-to-cluster generator (Hou et al., AAAI 2021): one causal GPT-2 over the serialised cluster pair,
with duplication-aware attention, diverse-oriented regularisation and diversity-rank tokens.

Hand-written here: the serialisation (``serialise``), the duplication-aware attention and the regulariser
(``attention``), the training loop (``train``) and the joint decoding loop (``generate``). From transformers
and tokenizers: the GPT-2 network (or a local checkpoint's causal LM), its KV cache, the tokenizers, saving
and loading. Imports ``conf``, ``storage`` and ``models.nmt.base`` only (model families are independent).
"""

from models.c2c.attention import DuplicationAwareAttention, diverse_regulariser, diverse_terms
from models.c2c.generate import C2CGenerator
from models.c2c.model import C2CModel, C2CSettings
from models.c2c.serialise import BOS, EOS, PAD, UNK, rank_token
from models.c2c.train import train_c2c

__all__ = [
    "BOS",
    "EOS",
    "PAD",
    "UNK",
    "C2CGenerator",
    "C2CModel",
    "C2CSettings",
    "DuplicationAwareAttention",
    "diverse_regulariser",
    "diverse_terms",
    "rank_token",
    "train_c2c",
]
