"""Bad input is rejected at the library's boundary, with a message naming expected and given values.

Each case asserts the exception type and, with ``match``, that the message contains both what was
expected and what was given (so a bare "invalid input" would fail the test).
"""
from __future__ import annotations

import math

import pytest
import torch

import transformer_lib as tl

pytestmark = pytest.mark.usefixtures("one_thread")


def _model(**kwargs):
    options = dict(d_model=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=16,
                   max_len=8)
    options.update(kwargs)
    return tl.Transformer(13, 13, **options).eval()


def _sdpa(mask):
    q = k = v = torch.randn(2, 3, 4, 5)  # scores (2, 3, 4, 4)
    return tl.scaled_dot_product_attention(q, k, v, mask)


def _mha(query, key=None, mask=None):
    mha = tl.MultiHeadAttention(8, 2)
    key = query if key is None else key
    return mha(query, key, key, mask=mask)


TOKENS = torch.tensor([[1, 2, 3], [4, 5, 0]])

# (id, callable, exception type, regex that must match the message)
CASES = [
    ("d_model_not_divisible", lambda: tl.MultiHeadAttention(10, 4),
     ValueError, r"d_model=10 is not divisible by num_heads=4"),
    ("d_model_not_divisible_in_model", lambda: _model(d_model=10, num_heads=4),
     ValueError, r"d_model=10 is not divisible by num_heads=4"),
    ("float_mask", lambda: _sdpa(torch.zeros(2, 1, 1, 4)),
     TypeError, r"mask must be bool.*got torch\.float32"),
    ("int_mask", lambda: _sdpa(torch.zeros(2, 1, 1, 4, dtype=torch.long)),
     TypeError, r"mask must be bool.*got torch\.int64"),
    ("int_mask_multihead", lambda: _mha(torch.randn(2, 3, 8), mask=torch.ones(2, 1, 1, 3, dtype=torch.int32)),
     TypeError, r"mask must be bool.*got torch\.int32"),
    ("mask_does_not_broadcast", lambda: _sdpa(torch.zeros(2, 5, dtype=torch.bool)),
     ValueError, r"mask of shape \(2, 5\) does not broadcast.*\(2, 3, 4, 4\)"),
    ("mask_wrong_heads", lambda: _mha(torch.randn(2, 3, 8), mask=torch.zeros(2, 3, 3, 3, dtype=torch.bool)),
     ValueError, r"mask of shape \(2, 3, 3, 3\) does not broadcast.*\(2, 2, 3, 3\)"),
    ("src_longer_than_max_len", lambda: _model(max_len=8)(torch.ones(1, 10, dtype=torch.long), TOKENS[:1]),
     ValueError, r"sequence length 10 exceeds max_len=8"),
    ("tgt_longer_than_max_len", lambda: _model(max_len=8)(TOKENS[:1], torch.ones(1, 9, dtype=torch.long)),
     ValueError, r"sequence length 9 exceeds max_len=8"),
    ("token_id_too_large", lambda: _model()(torch.tensor([[1, 13]]), TOKENS[:1]),
     ValueError, r"< vocab_size=13, got a token id of 13"),
    ("negative_token_id", lambda: _model()(torch.tensor([[1, -1]]), TOKENS[:1]),
     ValueError, r">= 0, got a token id of -1"),
    ("float_tokens", lambda: _model()(TOKENS.float(), TOKENS),
     TypeError, r"integer token ids \(torch\.int64\), got torch\.float32"),
    ("tokens_not_a_tensor", lambda: _model()([[1, 2]], TOKENS),
     TypeError, r"src must be a torch\.Tensor, got list"),
    ("dot_score_width_mismatch", lambda: tl.DotScore()(torch.randn(2, 3, 4), torch.randn(2, 5, 6)),
     ValueError, r"same width, got d_q=4 and d_k=6"),
    ("sdpa_qk_width_mismatch", lambda: tl.scaled_dot_product_attention(
        torch.randn(2, 3, 4), torch.randn(2, 5, 6), torch.randn(2, 5, 6)),
     ValueError, r"same last dimension d_k, got q 4 and k 6"),
    ("share_embeddings_different_vocab", lambda: tl.Transformer(10, 12, d_model=8, num_heads=2,
                                                                share_embeddings=True),
     ValueError, r"src_vocab_size=10 and tgt_vocab_size=12"),
    ("multihead_2d_input", lambda: _mha(torch.randn(3, 8)),
     ValueError, r"query must have 3 dimensions, got 2 \(shape \(3, 8\)\)"),
    ("transformer_3d_src", lambda: _model()(torch.ones(2, 3, 4, dtype=torch.long), TOKENS),
     ValueError, r"src must have 2 dimensions, got 3"),
    ("multihead_wrong_width", lambda: _mha(torch.randn(2, 3, 6)),
     ValueError, r"query must have last dimension d_model=8, got 6"),
    ("multihead_key_wrong_width", lambda: _mha(torch.randn(2, 3, 8), key=torch.randn(2, 4, 5)),
     ValueError, r"key must have last dimension d_model=8, got 5"),
    ("layernorm_wrong_width", lambda: tl.LayerNorm(8)(torch.randn(2, 7)),
     ValueError, r"last dimension d_model=8, got 7"),
    ("label_smoothing_too_large", lambda: tl.masked_cross_entropy(torch.randn(2, 5), torch.tensor([1, 2]),
                                                                  label_smoothing=1.5),
     ValueError, r"label_smoothing must be in \[0, 1\), got 1\.5"),
    ("label_smoothing_negative", lambda: tl.masked_cross_entropy(torch.randn(2, 5), torch.tensor([1, 2]),
                                                                 label_smoothing=-0.1),
     ValueError, r"label_smoothing must be in \[0, 1\), got -0\.1"),
    ("loss_shape_mismatch", lambda: tl.masked_cross_entropy(torch.randn(2, 3, 5),
                                                            torch.ones(2, 4, dtype=torch.long)),
     ValueError, r"expected targets of shape \(2, 3\)"),
    ("unknown_activation", lambda: tl.PositionwiseFeedForward(8, 16, activation="swish"),
     ValueError,
     r"activation must be one of \['gelu', 'gelu_tanh', 'relu', 'silu'\], got 'swish'"),
    ("dropout_too_large", lambda: tl.MultiHeadAttention(8, 2, dropout=1.5),
     ValueError, r"dropout must be in \[0, 1\), got 1\.5"),
    ("dropout_negative_in_model", lambda: _model(dropout=-0.1),
     ValueError, r"dropout must be in \[0, 1\), got -0\.1"),
    ("beam_size_zero", lambda: tl.beam_search(_model(), TOKENS, beam_size=0, max_len=3, bos_id=1, eos_id=2),
     ValueError, r"beam_size must be >= 1, got 0"),
    ("greedy_max_len_zero", lambda: tl.greedy_decode(_model(), TOKENS, max_len=0, bos_id=1, eos_id=2),
     ValueError, r"max_len must be >= 1, got 0"),
    ("batch_size_mismatch", lambda: _model()(TOKENS, TOKENS[:1]),
     ValueError, r"same batch size, got 2 and 1"),
    ("noam_warmup_zero", lambda: tl.noam_lr(10, 512, 0),
     ValueError, r"warmup must be >= 1, got 0"),
    ("pad_id_outside_vocab", lambda: tl.TokenEmbedding(5, 8, pad_id=5),
     ValueError, r"pad_id must be in \[0, vocab_size=5\), got 5"),
]


@pytest.mark.parametrize("call, error, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_rejected_clearly(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_there_are_enough_cases():
    assert len(CASES) >= 14
    assert len({c[0] for c in CASES}) == len(CASES)


# ---------------------------------------------------------------------------------------------
# Supported, not errors
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("d_model", [1, 5, 7])
def test_odd_d_model_is_supported_by_sinusoidal_table(d_model):
    table = tl.sinusoidal_table(20, d_model)
    assert table.shape == (20, d_model)
    for pos in range(20):
        for j in range(d_model):
            angle = pos / 10000 ** ((j - j % 2) / d_model)  # column j uses frequency index 2i = j - j%2
            expected = math.sin(angle) if j % 2 == 0 else math.cos(angle)
            assert table[pos, j].item() == pytest.approx(expected, abs=1e-5)
    # and the module built on it works
    x = torch.zeros(2, 20, d_model)
    torch.testing.assert_close(tl.PositionalEncoding(d_model, max_len=20)(x), table.expand(2, -1, -1))


def test_sequence_of_exactly_max_len_is_fine():
    model = _model(max_len=8)
    logits = model(torch.ones(1, 8, dtype=torch.long), torch.ones(1, 8, dtype=torch.long))
    assert logits.shape == (1, 8, 13)
