"""C2C-GenDA's duplication-aware attention and diverse-oriented regularisation (both hand-written).

Duplication-aware attention (Hou et al., AAAI 2021, "Cluster Decoder with Duplication-aware Attention"), on the final
hidden states h′ (after GPT-2's last layer norm, before the LM head) of the M outputs of one cluster over
their aligned target window:

    h̄′_{r,t} = Σ_{j≠r, t′≤t} softmax_{j,t′}(q_{r,t}·k_{j,t′} / √d) v_{j,t′},   q, k, v = h′ W_q, h′ W_k, h′ W_v
    h_{r,t}  = h′_{r,t} − λ·h̄′_{r,t}                                            (λ = 0.01)

one head, keys and values from the *other* outputs' states at target positions t′ ≤ t that hold a real
token (padding masked). Where no key is allowed (one output alone) h̄′ = 0. As in the authors' code
(``IntraAttention``: one ``c_attn`` projection to q, k, v, no output projection),
t′ ≤ t: when all outputs are decoded together, every output's state at step t exists before any token of
step t + 1 is drawn. (The paper writes t′ ≤ t − 1.)

Diverse-oriented regularisation ("Model Training with Diverse-Oriented Regularization"):

    R_diverse = −Σ_{i≠j} Σ_t KL(p_{i,t} ‖ p_{j,t})

over the ordered pairs of the cluster's outputs at aligned target positions t where both hold a real
token. ``train`` adds γ·R_diverse / (number of (i, j, t) terms), the mean over terms, so γ does not
depend on the cluster's size or the targets' lengths, and takes p_i as a constant in KL(p_i ‖ p_j) (the
gradient flows through p_j only: the authors' KL(P_other ‖ Q_current), ``logits.detach()`` in their code).

R_diverse is unbounded below (a KL grows without limit as one output's probability of another's token goes
to 0). Against the mean NLL, predicting a *wrong* token with margin L where two outputs share a target token
costs ≈ L per token but gains ≈ 2γL per token in the mean over terms, so for γ > 1/2 the optimum is to
mispredict every shared token: measured on the 4-cluster toy set (tests/models/test_c2c_model.py, from scratch,
lr 1e-3, 600 steps), γ ≤ 0.4 reaches NLL < 0.1, γ = 0.6 ends near 0.9, γ = 1 near 43. (The authors average
their KL over every position of the padded sequence, prefix included, which scales γ down by the targets'
share of the positions.)
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class DuplicationAwareAttention(nn.Module):
    """h = h′ − λ·h̄′ over the target window (module docstring). ``lam`` is a fixed balance factor, not learnt."""

    def __init__(self, d: int, lam: float = 0.01):
        super().__init__()
        self.d, self.lam = d, float(lam)
        self.qkv = nn.Linear(d, 3 * d)

    def context(self, h: Tensor, mask: Tensor, q_start: int = 0) -> Tensor:
        """h̄′ for the positions ``q_start`` … T − 1 of ``h`` (M × T × d; ``mask`` M × T, True for a real
        token): each query attends to the other rows' real positions at or before its own position."""
        m, t, d = h.shape
        q, k, v = self.qkv(h).split(d, dim=-1)
        q = q[:, q_start:]  # M × Tq × d
        tq = q.shape[1]
        scores = torch.einsum("rtd,jsd->rtjs", q, k) / math.sqrt(d)  # M × Tq × M × T
        rows = torch.arange(m, device=h.device)
        pos = torch.arange(t, device=h.device)
        other = rows[:, None] != rows[None, :]  # r, j
        past = pos[None, :] <= (pos[q_start:])[:, None]  # t, t′
        allowed = other[:, None, :, None] & past[None, :, None, :] & mask.bool()[None, None, :, :]
        allowed = allowed.reshape(m, tq, m * t)
        scores = scores.reshape(m, tq, m * t).masked_fill(~allowed, torch.finfo(scores.dtype).min)
        weights = torch.softmax(scores, dim=-1) * allowed.any(-1, keepdim=True)  # nothing allowed: h̄′ = 0
        return weights @ v.reshape(m * t, d)

    def forward(self, h: Tensor, mask: Tensor, q_start: int = 0) -> Tensor:
        """h′ − λ·h̄′ for the positions ``q_start`` … T − 1."""
        if self.lam == 0:
            return h[:, q_start:]
        return h[:, q_start:] - self.lam * self.context(h, mask, q_start)


def diverse_regulariser(log_probs: Tensor, mask: Tensor, *, detach_other: bool = False) -> Tensor:
    """R_diverse = −Σ_{i≠j} Σ_t KL(p_{i,t} ‖ p_{j,t}) (a sum, not a mean; see ``diverse_terms``).

    Args:
        log_probs: M × T × V natural-log token distributions of the cluster's outputs at aligned positions.
        mask: M × T, True where the output has a real token at t; a pair counts at t only if both do.
        detach_other: take p_i (the first argument of each KL) as a constant: the same value, the gradient
            through p_j only (training uses this, as the authors' code does).
    """
    m = mask.to(log_probs.dtype)[..., None]  # M × T × 1
    lp = log_probs.detach() if detach_other else log_probs
    p = lp.exp()
    self_term = (p * lp * m).sum(-1)  # Σ_v p_i log p_i, M × T
    count = mask.to(log_probs.dtype).sum(0)  # c_t real outputs at t
    # Σ_{i,j} m_i m_j KL(p_i ‖ p_j) = c_t Σ_i m_i Σ_v p_i log p_i − Σ_v (Σ_i m_i p_i)(Σ_j m_j log p_j);
    # the i = j terms are KL(p ‖ p) = 0, so this is the sum over i ≠ j
    cross = ((p * m).sum(0) * (log_probs * m).sum(0)).sum(-1)  # T
    return -((count * self_term.sum(0)) - cross).sum()


def diverse_terms(mask: Tensor) -> int:
    """The number of (i, j, t) terms, i ≠ j, both real at t: Σ_t c_t (c_t − 1)."""
    count = mask.long().sum(0)
    return int((count * (count - 1)).sum())
