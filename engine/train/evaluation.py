"""tau_sim, the proxy the trainer reports: greedy DFlash acceptance replayed teacher-forced on the target's own
greedy responses to held-out prompts. Each round at anchor p accepts the longest prefix of argmax drafts equal
to the greedy continuation, then jumps to p + accepted + 1; tau = mean(accepted + 1). It equals real greedy
DFlash up to numerics (the features here come from one full forward, not from the verify calls)."""
from __future__ import annotations



import torch

from .recipe import Features, draft_forward, make_batch


def rollout(accepted: list[int], prompt_len: int, seq_len: int) -> list[tuple[int, int]]:
    """Greedy DFlash rounds over a response: the first anchor is the prefill's token at prompt_len; a round at
    anchor p commits accepted[p - prompt_len] drafts plus the bonus. Returns (anchor, accepted) per round."""
    p, rounds = prompt_len, []
    while p < seq_len - 1:
        a = accepted[p - prompt_len]
        rounds.append((p, a))
        p += a + 1
    return rounds


def replay_rounds(accepted: list[int], prompt_len: int, seq_len: int) -> list[int]:
    """accepted + 1 per round of the greedy rollout (rollout)."""
    return [a + 1 for _, a in rollout(accepted, prompt_len, seq_len)]


def frozen_head(W: torch.Tensor, chunk: int):
    """The target's LM head as the drafter uses it: (..., H) -> (..., V) float logits, `chunk` rows per matmul."""
    def head(x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        out = torch.cat([(flat[r:r + chunk].to(W.dtype) @ W.T).float() for r in range(0, len(flat), chunk)])
        return out.view(*x.shape[:-1], -1)
    return head


@torch.no_grad()
def draft_matches(drafter, feats: Features, key: int, s: list[int], P: int, *, head, embed_w: torch.Tensor,
                  dtype: torch.dtype, autocast, anchors_per_forward: int = 64) -> torch.Tensor:
    """(anchors, B-1) bool for every anchor p in P..len(s)-2: the drafter's greedy draft at p+k equals x_{p+k}
    (False past the end). The drafts come from the engine's own token rule, a variant's head included."""
    from ..decode.drafting import propose

    B, mask_id = drafter.block_size, int(drafter.mask_token_id)
    anchors = list(range(P, len(s) - 1))
    out = []
    for c in range(0, len(anchors), anchors_per_forward):
        part = anchors[c:c + anchors_per_forward]
        batch = make_batch([s], [part], block_size=B, mask_id=mask_id, gamma=1.0)
        f, *_ = feats.get([key], [s], batch["T"])
        with autocast():
            h = draft_forward(drafter, embed_w, f, batch, dtype)
        hb = h.reshape(len(part), B, -1)[:, 1:].contiguous()  # the states predicting p+1 .. p+B-1
        toks = propose(drafter, hb, torch.tensor([s[p] for p in part], device=h.device), head, 0.0, None,
                       True).tokens.cpu()
        match = torch.zeros((len(part), B - 1), dtype=torch.bool)
        match[batch["slot"], batch["k"] - 1] = toks[batch["slot"], batch["k"] - 1] == batch["labels"]
        out.append(match)
    return torch.cat(out)


@torch.no_grad()
def eval_tau(drafter, feats: Features, seqs: list[tuple[list[int], int]], *, W: torch.Tensor, embed_w: torch.Tensor,
             dtype: torch.dtype, autocast, anchors_per_forward: int = 64, chunk: int = 4096,
             keys: list[int] | None = None) -> dict:
    """tau_sim: greedy DFlash replayed on the target's greedy responses (see the module docstring). `keys` name the
    sequences in the feature cache (default -1, -2, ...: apart from the training sequences' keys 0, 1, ...)."""
    keys = keys or [-1 - i for i in range(len(seqs))]
    B = drafter.block_size
    head = frozen_head(W, chunk)
    was_training = drafter.training
    drafter.eval()
    taus, rounds_all, acc_all, by_k = [], [], [], torch.zeros(B - 1)
    for si, (s, P) in enumerate(seqs):
        if len(s) - 1 <= P:
            continue
        match = draft_matches(drafter, feats, keys[si], s, P, head=head, embed_w=embed_w, dtype=dtype,
                              autocast=autocast, anchors_per_forward=anchors_per_forward)
        run = match.long().cumprod(dim=1)
        by_k += run.sum(dim=0)
        acc = run.sum(dim=1).tolist()
        acc_all += acc
        rounds = replay_rounds(acc, P, len(s))
        rounds_all += rounds
        taus.append(sum(rounds) / len(rounds))
    drafter.train(was_training)
    n = max(1, len(acc_all))
    return {"tau_sim": round(sum(rounds_all) / max(1, len(rounds_all)), 4),
            "tau_sim_mean_per_prompt": round(sum(taus) / max(1, len(taus)), 4),
            "mean_accept_all_anchors": round(sum(acc_all) / n, 4),
            "accept_rate_by_depth": [round(x / n, 4) for x in by_k.tolist()],
            "prompts": len(taus), "rounds": len(rounds_all),
            "label": "tau_sim: greedy DFlash replayed teacher-forced on the target's greedy responses to held-out prompts"}
