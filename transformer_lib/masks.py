"""Boolean attention masks. Convention: **True = blocked** (this key may not be attended to).

Every mask is shaped to broadcast against attention scores of shape (B, H, Lq, Lk).
"""
from __future__ import annotations

import torch

from ._checks import check_device, check_int, check_positive_int, check_token_ids


def padding_mask(tokens: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """Block the padded *keys* of a batch: (B, L) token ids -> (B, 1, 1, L) bool.

    The two singleton dimensions broadcast over heads and over query positions: every query may
    attend to every real token, and to no padding.
    """
    _check_tokens("tokens", tokens, pad_id)
    return (tokens == pad_id)[:, None, None, :]  # (B, 1, 1, L)


def _check_tokens(name: str, tokens, pad_id) -> None:
    # Each public function checks its own argument first, so messages name it.
    check_token_ids(name, tokens, ndim=2)
    check_int("pad_id", pad_id)


def causal_mask(length: int, device: torch.device | str | None = None, offset: int = 0) -> torch.Tensor:
    """Block the future: (1, 1, L, offset + L) bool, True strictly above the (shifted) diagonal.

    Row i (a query at position offset + i) may attend to columns 0..offset + i: the keys at or
    before it. ``offset`` > 0 is for decoding with a cache: the L new queries follow ``offset``
    cached positions, and the mask is the last L rows of ``causal_mask(offset + L)``.
    """
    check_positive_int("length", length)
    check_int("offset", offset, minimum=0)
    device = check_device("device", device)
    ones = torch.ones(length, offset + length, dtype=torch.bool, device=device)
    return torch.triu(ones, diagonal=offset + 1)[None, None]  # (1, 1, L, offset + L)


def decoder_self_mask(tgt: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """The decoder's self-attention mask: causal *or* padded key. (B, L) -> (B, 1, L, L) bool."""
    _check_tokens("tgt", tgt, pad_id)
    future = causal_mask(tgt.size(1), device=tgt.device)  # (1, 1, L, L)
    return future | padding_mask(tgt, pad_id)  # (1,1,L,L) | (B,1,1,L) -> (B, 1, L, L)


def cross_mask(src: torch.Tensor, tgt_len: int, pad_id: int = 0) -> torch.Tensor:
    """The encoder-decoder (cross) attention mask, made explicit: (B, 1, tgt_len, Ls) bool.

    Queries come from the decoder (tgt_len rows), keys from the encoder (Ls columns): only padded
    source tokens are blocked. ``padding_mask(src)`` (B, 1, 1, Ls) broadcasts to the same thing.
    """
    _check_tokens("src", src, pad_id)
    check_positive_int("tgt_len", tgt_len)
    return padding_mask(src, pad_id).expand(-1, -1, tgt_len, -1)  # (B, 1, Lt, Ls)
