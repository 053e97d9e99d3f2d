"""Sentences in, sentences out: the library's ``greedy_decode`` and ``beam_search``
applied to text, in batches of similar length."""
from __future__ import annotations

import torch

from .._checks import check_positive_int
from ..data.batching import pad_sequences
from ..decoding import beam_search, greedy_decode


@torch.no_grad()
def translate_texts(model, texts: list[str], beam_size: int = 1, length_penalty: float = 0.6,
                    batch_size: int = 64) -> list[str]:
    """Translate ``texts`` (a list of str) with ``model`` (a ``Translator``): greedy for
    ``beam_size=1``, else beam search with GNMT's ``length_penalty`` alpha (the paper's
    0.6). Sentences are sorted by length so a batch holds little padding; the
    translations come back in the order of ``texts``."""
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
        raise TypeError(f"texts must be a list of str, got {type(texts).__name__}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] must be a str, got {type(text).__name__}")
    check_positive_int("beam_size", beam_size)
    check_positive_int("batch_size", batch_size)
    tok = model.tokenizer
    limit = model.config["max_len"]
    ids = [model.encode_source(text)[-limit:] for text in texts]  # (tag,) pieces, EOS
    order = sorted(range(len(texts)), key=lambda i: len(ids[i]))
    device = next(model.parameters()).device
    out = [""] * len(texts)
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        src = pad_sequences([ids[i] for i in chunk], tok.pad_id).to(device)  # (B, Ls)
        longest = src.size(1)
        max_len = min(model.max_target_len, limit - 1, 2 * longest + 10)
        if beam_size == 1:
            ys = greedy_decode(model, src, max_len, tok.bos_id, tok.eos_id)
        else:
            ys = beam_search(model, src, beam_size, max_len, tok.bos_id, tok.eos_id,
                             length_penalty=length_penalty)
        for i, row in zip(chunk, ys.cpu().tolist()):
            out[i] = tok.decode(_strip(row, tok))
    return out


def _strip(row: list[int], tok) -> list[int]:
    """Output ids without BOS, and cut at the first EOS."""
    row = row[1:]
    if tok.eos_id in row:
        row = row[:row.index(tok.eos_id)]
    return [i for i in row if i != tok.pad_id]
