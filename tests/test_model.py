"""The full Transformer: parameter count of the paper's base model, weight tying, modes, outputs."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import transformer_lib as tl
from conftest import PAD

pytestmark = pytest.mark.usefixtures("one_thread")

# The paper's base configuration (Table 3) with a shared 37000-token vocabulary (section 5.1).
BASE = dict(d_model=512, num_heads=8, num_encoder_layers=6, num_decoder_layers=6, d_ff=2048)
VOCAB = 37000


@pytest.fixture
def no_init(monkeypatch):
    """Build big models fast: skip the random initialisation (counting needs no values)."""
    def keep(tensor, *args, **kwargs):
        return tensor

    monkeypatch.setattr(nn.Linear, "reset_parameters", lambda self: None)
    monkeypatch.setattr(nn.Embedding, "reset_parameters", lambda self: None)
    for name in ("normal_", "xavier_uniform_", "zeros_"):
        monkeypatch.setattr(nn.init, name, keep)


def base_parameter_formula(vocab: int, d: int = 512, d_ff: int = 2048, n_enc: int = 6,
                           n_dec: int = 6, shared: bool = True) -> int:
    """Parameters of a post-norm Transformer, counted by hand.

    attention block: W_q, W_k, W_v, W_o, each d x d plus a bias of d        -> 4 (d^2 + d)
    feed-forward:    d x d_ff + d_ff,  then d_ff x d + d                     -> 2 d d_ff + d_ff + d
    LayerNorm:       a gain and a bias of d each                             -> 2 d
    encoder layer = 1 attention + 1 FFN + 2 norms; decoder layer = 2 attention + 1 FFN + 3 norms.
    Post-norm: no final norm after the stacks. Output layer: no bias.
    Embeddings: one V x d matrix if source, target and output share it, else three.
    """
    attention = 4 * (d * d + d)
    ffn = 2 * d * d_ff + d_ff + d
    norm = 2 * d
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    embeddings = (1 if shared else 3) * vocab * d
    return n_enc * encoder_layer + n_dec * decoder_layer + embeddings


def test_base_model_parameter_count(no_init):
    """The base model with tied embeddings has exactly 63,082,496 parameters.

    Table 3 of the paper says "65M" (x 10^6). The difference is not an error in either:
    - the paper rounds, and does not say which vocabulary size it counted with (the shared
      byte-pair vocabulary of section 5.1 is "about 37000" tokens);
    - under this formula, 65M would correspond to a vocabulary of
      (65,000,000 - 44,138,496) / 512 = 40,745.1, i.e. about 40,745 tokens
      (44,138,496 being the count without embeddings);
    - implementations also differ in small terms: biases in the projections, LayerNorm gains
      and biases, a final LayerNorm after each stack (pre-norm), a bias in the output layer.
    """
    model = tl.Transformer(VOCAB, VOCAB, share_embeddings=True, **BASE)
    count = model.num_parameters()
    assert count == 63_082_496
    assert count == base_parameter_formula(VOCAB)
    without_embeddings = base_parameter_formula(0)
    assert without_embeddings == 44_138_496
    assert round((65_000_000 - without_embeddings) / 512) == 40_745
    # and the formula is right part by part, not only in total
    encoder = sum(p.numel() for p in model.encoder.parameters())
    assert encoder == 6 * (4 * (512 * 512 + 512) + 2 * 512 * 2048 + 2048 + 512 + 4 * 512)
    assert model.generator.bias is None


def test_unshared_base_model_has_two_more_embedding_matrices(no_init):
    shared = tl.Transformer(VOCAB, VOCAB, share_embeddings=True, **BASE).num_parameters()
    separate = tl.Transformer(VOCAB, VOCAB, share_embeddings=False, **BASE).num_parameters()
    assert separate - shared == 2 * VOCAB * 512
    assert separate == base_parameter_formula(VOCAB, shared=False)


def test_share_embeddings_ties_the_three_matrices(small_model):
    model = small_model(share_embeddings=True)
    src_w = model.src_embed.weight
    tgt_w = model.tgt_embed.weight
    out_w = model.generator.weight
    assert src_w is tgt_w is out_w
    assert src_w.data_ptr() == tgt_w.data_ptr() == out_w.data_ptr()
    # A change through one name is seen through the others.
    with torch.no_grad():
        out_w[3, 0] = 123.0
    assert src_w[3, 0].item() == tgt_w[3, 0].item() == 123.0
    # and num_parameters counts the shared matrix once: two (V, d_model) matrices fewer
    unshared = small_model(share_embeddings=False)
    vocab, d_model = out_w.shape
    assert unshared.num_parameters() - model.num_parameters() == 2 * vocab * d_model


def test_unshared_embeddings_are_separate(small_model):
    model = small_model(share_embeddings=False)
    ptrs = {model.src_embed.weight.data_ptr(), model.tgt_embed.weight.data_ptr(),
            model.generator.weight.data_ptr()}
    assert len(ptrs) == 3


def test_norm_first_model_adds_two_final_norms(small_model):
    post = small_model(norm_first=False).num_parameters()
    pre = small_model(norm_first=True).num_parameters()
    assert pre - post == 2 * (2 * 16)  # a final LayerNorm after the encoder and the decoder


def test_options_for_models_trained_elsewhere(small_model, tokens):
    """activation, scale_embedding, output_bias, interleaved_pe reach the modules they
    set; the defaults are the paper's."""
    paper = small_model()
    assert paper.generator.bias is None
    assert paper.src_embed.scale and paper.pos_enc.interleaved
    assert paper.encoder.layers[0].ffn.activation == "relu"
    other = small_model(activation="silu", scale_embedding=False, output_bias=True,
                        interleaved_pe=False)
    extra = other.num_parameters() - paper.num_parameters()
    assert extra == other.generator.out_features  # the output bias
    assert torch.equal(other.generator.bias, torch.zeros(13))  # starts neutral
    assert not other.tgt_embed.scale and not other.pos_enc.interleaved
    for layer in [*other.encoder.layers, *other.decoder.layers]:
        assert layer.ffn.activation == "silu"
    assert other.config["activation"] == "silu" and other.config["output_bias"] is True
    src, tgt = tokens(2, 5, 13, lengths=[5, 3]), tokens(2, 4, 13)
    assert other(src, tgt).shape == (2, 4, 13)
    with pytest.raises(TypeError, match="output_bias must be True or False, got int"):
        small_model(output_bias=1)


# ---------------------------------------------------------------------------------------------
# Shapes, attention maps, modes
# ---------------------------------------------------------------------------------------------

def test_forward_shapes_and_attention_maps(small_model, tokens):
    model = small_model(vocab=13, num_heads=2, layers=2)
    src = tokens(3, 6, 13, lengths=[6, 2, 4])
    tgt = tokens(3, 5, 13, lengths=[5, 5, 3])
    logits = model(src, tgt)
    assert logits.shape == (3, 5, 13)
    logits2, maps = model(src, tgt, return_attention=True)
    # The explicit path (which returns weights) equals the fused path.
    torch.testing.assert_close(logits2, logits, atol=1e-5, rtol=1e-5)
    assert set(maps) == {"encoder", "decoder", "cross"}
    assert all(len(maps[key]) == 2 for key in maps)
    assert maps["encoder"][0].shape == (3, 2, 6, 6)
    assert maps["decoder"][0].shape == (3, 2, 5, 5)
    assert maps["cross"][0].shape == (3, 2, 5, 6)
    # Attention respects the masks: no weight on padded source keys or on future target keys.
    for w in maps["encoder"] + maps["cross"]:
        assert (w[1, ..., 2:] == 0).all() and (w[2, ..., 4:] == 0).all()
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))
    for w in maps["decoder"]:
        assert (w.masked_select(tl.causal_mask(5).expand_as(w)) == 0).all()
        assert (w[2, ..., 3:] == 0).all()


def test_dropout_acts_in_training_and_eval_is_deterministic(small_model, tokens):
    model = small_model(dropout=0.3)
    src, tgt = tokens(2, 5, 13), tokens(2, 4, 13)
    model.train()
    a, b = model(src, tgt), model(src, tgt)
    assert not torch.allclose(a, b)
    model.eval()
    c, d = model(src, tgt), model(src, tgt)
    assert torch.equal(c, d)
    assert not torch.allclose(a, c)


def test_attention_dropout_acts_in_training():
    mha = tl.MultiHeadAttention(8, 2, dropout=0.5)
    x = torch.randn(2, 6, 8)
    for need_weights in (False, True):
        mha.train()
        assert not torch.allclose(mha(x, x, x, need_weights=need_weights)[0],
                                  mha(x, x, x, need_weights=need_weights)[0])
        mha.eval()
        assert torch.equal(mha(x, x, x, need_weights=need_weights)[0],
                           mha(x, x, x, need_weights=need_weights)[0])


@pytest.mark.parametrize("share", [False, True])
def test_backward_reaches_every_parameter(small_model, tokens, share):
    model = small_model(share_embeddings=share).train()
    src, tgt = tokens(2, 5, 13, lengths=[5, 3]), tokens(2, 4, 13)
    loss = tl.masked_cross_entropy(model(src, tgt[:, :-1]), tgt[:, 1:])
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name
    if not share:
        # The padding row of an embedding gets no gradient (padding_idx). With tied weights it
        # does, through the output layer's logit for the pad class; harmless, since padded keys
        # are always masked.
        assert (model.src_embed.weight.grad[PAD] == 0).all()
        assert (model.tgt_embed.weight.grad[PAD] == 0).all()


@pytest.mark.skipif(tl.get_device().type == "cpu", reason="no accelerator on this machine")
def test_accelerator_matches_cpu(small_model, tokens):
    """The model runs on the best device and gives the CPU's numbers and decoded tokens."""
    device = tl.get_device()
    model = small_model()
    src = tokens(3, 6, 13, lengths=[6, 2, 4])
    tgt = tokens(3, 5, 13)
    expected = model(src, tgt)
    expected_tokens = tl.greedy_decode(model, src, max_len=6, bos_id=1, eos_id=2)
    model.to(device)
    logits = model(src.to(device), tgt.to(device))
    torch.testing.assert_close(logits.cpu(), expected, atol=1e-4, rtol=1e-4)
    decoded = tl.greedy_decode(model, src.to(device), max_len=6, bos_id=1, eos_id=2)
    assert decoded.device.type == device.type
    assert torch.equal(decoded.cpu(), expected_tokens)
