"""The drafter's loss through the target's frozen head: the position-weighted KL (or CE) over the whole vocabulary,
and its cheap sparse form over the target's top-k tokens plus shared negatives. Each returns the loss value with
the exact gradient for the drafter's rows, computed chunk by chunk, without keeping (rows x vocab) logits."""
from __future__ import annotations

import torch


@torch.no_grad()
def _head_loss_and_grad(hd, ht, labels, weights, W, kl, chunk, at=None):
    """Weighted soft cross-entropy through the frozen head W, with its gradient w.r.t. the drafter rows hd,
    chunk by chunk so that no (rows x vocab) logits are ever kept (the vocabulary is 49152 wide). With `at`,
    also the target's log-prob of token at[r] per row (0 where at[r] < 0), from the same target logits."""
    loss = torch.zeros((), device=hd.device, dtype=torch.float32)
    grad = torch.empty_like(hd)
    hit = torch.zeros(len(hd), dtype=torch.bool, device=hd.device)
    logp_at = None if at is None else torch.zeros(len(hd), device=hd.device)
    for s in range(0, len(hd), chunk):
        e = min(len(hd), s + chunk)
        logp = torch.log_softmax((hd[s:e].to(W.dtype) @ W.T).float(), dim=-1)
        t_logits = (ht[s:e].to(W.dtype) @ W.T).float()
        # target distribution q = kl * p_target + (1 - kl) * onehot(label); dL/dlogits = softmax - q
        q = torch.softmax(t_logits, dim=-1).mul_(kl) if kl > 0 else torch.zeros_like(logp)
        if kl < 1:
            q.scatter_add_(1, labels[s:e, None], torch.full((e - s, 1), 1.0 - kl, device=q.device))
        w = weights[s:e]
        loss += (-(q * logp).sum(-1) * w).sum()
        hit[s:e] = logp.argmax(-1) == t_logits.argmax(-1)  # vs the target's greedy token: the T=0 label
        if at is not None and (sel := (at[s:e] >= 0).nonzero()[:, 0]).numel():
            logp_at[s + sel] = torch.log_softmax(t_logits[sel], -1).gather(-1, at[s + sel, None])[:, 0]
        g = logp.exp_().sub_(q).mul_(w[:, None])            # in place: logp is not needed any more
        grad[s:e] = (g.to(W.dtype) @ W).to(grad.dtype)
    return loss, grad, hit, logp_at


def head_loss(hd: torch.Tensor, ht: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor, W: torch.Tensor,
              kl: float = 1.0, chunk: int = 4096, at: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """(loss with the right gradient for hd, top-1 hits vs the target's argmax per row). `weights` sum to 1.
    With `at` (a token id per row, -1 = none), a third item: the target's log-prob of those tokens (no second
    pass through the 49152-wide head for a caller that needs them on these rows)."""
    loss, grad, hit, logp_at = _head_loss_and_grad(hd.detach(), ht, labels, weights, W, kl, chunk, at)
    return (_with_grad(hd, loss, grad), hit) + ((logp_at,) if at is not None else ())


def _with_grad(hd: torch.Tensor, loss: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """`loss`'s value, with gradient `grad` for hd when backpropagated."""
    surrogate = (hd * grad).sum()  # d/dhd = grad; its value is swapped for the true loss
    return surrogate - surrogate.detach() + loss


@torch.no_grad()
def _sparse_head_loss_and_grad(hd, top_ids, top_logits, weights, W, neg, chunk):
    """KL to the target's top-k distribution (renormalised) with the drafter's softmax over only each row's k
    target tokens plus M shared negatives `neg`: k + M head columns per row instead of the whole vocabulary."""
    loss = torch.zeros((), device=hd.device, dtype=torch.float32)
    grad = torch.empty_like(hd)
    hit = torch.zeros(len(hd), dtype=torch.bool, device=hd.device)
    Wn = W[neg]                                                    # (M, H)
    K = top_ids.shape[1]
    for s in range(0, len(hd), chunk):
        e = min(len(hd), s + chunk)
        h, ids = hd[s:e].to(W.dtype), top_ids[s:e].long()
        Wk = W[ids]                                                # (r, k, H)
        zk = torch.bmm(Wk, h[:, :, None])[:, :, 0].float()
        zn = (h @ Wn.T).float()
        zn.masked_fill_((ids[:, :, None] == neg[None, None, :]).any(1), float("-inf"))  # each token once
        logp = torch.log_softmax(torch.cat([zk, zn], dim=1), dim=-1)
        q = torch.softmax(top_logits[s:e].float(), dim=-1)
        w = weights[s:e]
        loss += (-(q * logp[:, :K]).sum(-1) * w).sum()
        hit[s:e] = logp.argmax(-1) == 0                            # column 0: the target's greedy token
        g = logp.exp_()
        g[:, :K] -= q
        g.mul_(w[:, None])
        gk, gn = g[:, :K].to(W.dtype), g[:, K:].to(W.dtype)
        grad[s:e] = (torch.bmm(gk[:, None, :], Wk)[:, 0] + gn @ Wn).to(grad.dtype)
    return loss, grad, hit


def sparse_head_loss(hd: torch.Tensor, top_ids: torch.Tensor, top_logits: torch.Tensor, weights: torch.Tensor,
                     W: torch.Tensor, neg: torch.Tensor, chunk: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    """head_loss's cheap form (`--head-topk`): the same contract, over the target's top-k plus negatives."""
    loss, grad, hit = _sparse_head_loss_and_grad(hd.detach(), top_ids, top_logits, weights, W, neg, chunk)
    return _with_grad(hd, loss, grad), hit


def negatives(top_ids: torch.Tensor, vocab: int, n: int, gen: torch.Generator | None = None) -> torch.Tensor:
    """n shared negative token ids for a step: half drawn from the batch's own top-k tokens (plausible
    competitors), half uniform over the vocabulary; unique."""
    flat = top_ids.reshape(-1).long()
    pick = flat[torch.randint(len(flat), (n // 2,), generator=gen, device="cpu").to(flat.device)]
    uni = torch.randint(vocab, (n - n // 2,), generator=gen, device="cpu").to(flat.device)
    return torch.unique(torch.cat([pick, uni]))
