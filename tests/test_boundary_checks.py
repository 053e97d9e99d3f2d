"""Every public entry point checks its arguments at the boundary (issue 14).

Each case asserts the exception type (TypeError for the wrong kind of value, ValueError
for a wrong value of the right kind) and that the message names the argument the caller
wrote, with what was expected and what was given. ``tests/test_bad_input.py`` holds the
earlier cases. Tensors on the "meta" device stand in for a tensor on another device than
the module's weights.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import transformer_lib as tl
from transformer_lib import viz, widgets
from transformer_lib.data import BucketBatcher, Vocab, detokenize_words, pad_sequences
from transformer_lib.data.numbers import (
    NumberWordsData,
    magnitude_buckets,
    split_numbers,
)

pytestmark = pytest.mark.usefixtures("one_thread")

TOKENS = torch.tensor([[1, 2, 3], [4, 5, 0]])


def _model(**kwargs):
    options = dict(
        d_model=8,
        num_heads=2,
        num_encoder_layers=1,
        num_decoder_layers=1,
        d_ff=16,
        max_len=8,
    )
    options.update(kwargs)
    return tl.Transformer(13, 13, **options).eval()


def _mha(query, key=None, **kwargs):
    key = query if key is None else key
    return tl.MultiHeadAttention(8, 2)(query, key, key, **kwargs)


def _decoder_layer(x, memory, **kwargs):
    return tl.DecoderLayer(8, 2, 16, dropout=0.0)(x, memory, **kwargs)


def _decode(tgt_in, memory, src):
    return _model().decode(tgt_in, memory, src)


def _train_step(src=TOKENS, tgt=TOKENS, optimizer="adam", **kwargs):
    model = _model()
    if optimizer == "adam":
        optimizer = torch.optim.Adam(model.parameters())
    return tl.train_step(model, src, tgt, optimizer, **kwargs)


def _train(batches=None, **kwargs):
    model = _model()
    batches = [(TOKENS, TOKENS)] * 3 if batches is None else batches
    return tl.train(
        model, batches, torch.optim.Adam(model.parameters()), progress=False, **kwargs
    )


def _greedy(model=None, src=TOKENS, bos_id=1, eos_id=2, **kwargs):
    return tl.greedy_decode(model or _model(), src, 4, bos_id, eos_id, **kwargs)


def _x(*shape, dtype=torch.float32, device="cpu"):
    return torch.randn(*shape, dtype=dtype, device=device)


HISTORY = {"step": [1, 2], "loss": [2.0, 1.0]}

# (id, callable, exception type, regex: it names the argument and says what was wrong)
ISSUE_CASES = [
    (
        "padding_mask_pad_id_none",
        lambda: tl.padding_mask(TOKENS, pad_id=None),
        TypeError,
        r"pad_id must be an int, got NoneType",
    ),
    (
        "transformer_pad_id_float",
        lambda: _model(pad_id=1.5),
        TypeError,
        r"pad_id must be an int, got float 1\.5",
    ),
    (
        "attention_batch_mismatch_q_k",
        lambda: tl.scaled_dot_product_attention(_x(2, 3, 4), _x(3, 5, 4), _x(3, 5, 4)),
        ValueError,
        r"q, k and v must have the same leading \(batch\) dimensions.*q \(2, 3, 4\)",
    ),
    (
        "multihead_float64_input_float32_weights",
        lambda: _mha(_x(2, 3, 8, dtype=torch.float64)),
        TypeError,
        r"query has dtype torch\.float64, but the module's weights are torch\.float32",
    ),
    (
        "noam_lr_d_model_zero",
        lambda: tl.noam_lr(10, d_model=0, warmup=4000),
        ValueError,
        r"d_model must be >= 1, got 0",
    ),
    (
        "train_log_every_zero",
        lambda: _train(log_every=0),
        ValueError,
        r"log_every must be >= 1, got 0",
    ),
    (
        "train_max_steps_zero",
        lambda: _train(max_steps=0),
        ValueError,
        r"max_steps must be >= 1, got 0",
    ),
    (
        "beam_search_empty_batch",
        lambda: tl.beam_search(
            _model(), TOKENS[:0], beam_size=2, max_len=3, bos_id=1, eos_id=2
        ),
        ValueError,
        r"src must hold at least one sequence.*got shape \(0, 3\)",
    ),
    (
        "label_smoothing_string",
        lambda: tl.masked_cross_entropy(
            _x(2, 5), torch.tensor([1, 2]), label_smoothing="0.1"
        ),
        TypeError,
        r"label_smoothing must be a number, got str",
    ),
    (
        "message_names_tgt_in",
        lambda: _model()(TOKENS, torch.tensor([[1, 13, 2], [1, 2, 0]])),
        ValueError,
        r"tgt_in must be < vocab_size=13, got a token id of 13",
    ),
    (
        "message_names_bos_id",
        lambda: _greedy(bos_id=13),
        ValueError,
        r"bos_id must be in \[0, vocab_size=13\), got 13",
    ),
]

OWN_CASES = [
    # attention
    (
        "sdpa_int_q",
        lambda: tl.scaled_dot_product_attention(TOKENS, _x(2, 3), _x(2, 3)),
        TypeError,
        r"q must be a floating-point tensor, got torch\.int64",
    ),
    (
        "sdpa_dtype_mismatch",
        lambda: tl.scaled_dot_product_attention(
            _x(2, 3, 4), _x(2, 3, 4, dtype=torch.float64), _x(2, 3, 4)
        ),
        TypeError,
        r"q, k and v must have the same dtype, got torch\.float32, torch\.float64",
    ),
    (
        "sdpa_k_v_length",
        lambda: tl.scaled_dot_product_attention(_x(2, 3, 4), _x(2, 5, 4), _x(2, 6, 4)),
        ValueError,
        r"k and v must have the same length Lk, got k 5 and v 6",
    ),
    (
        "sdpa_dropout_one",
        lambda: tl.scaled_dot_product_attention(
            _x(2, 3, 4), _x(2, 3, 4), _x(2, 3, 4), dropout_p=1.0
        ),
        ValueError,
        r"dropout_p must be in \[0, 1\), got 1\.0",
    ),
    (
        "sdpa_mask_on_other_device",
        lambda: tl.scaled_dot_product_attention(
            _x(2, 3, 4),
            _x(2, 3, 4),
            _x(2, 3, 4),
            torch.zeros(2, 1, 3, dtype=torch.bool, device="meta"),
        ),
        ValueError,
        r"mask is on meta, but the attention scores are on cpu",
    ),
    (
        "masked_softmax_int_scores",
        lambda: tl.masked_softmax(TOKENS),
        TypeError,
        r"scores must be a floating-point tensor, got torch\.int64",
    ),
    (
        "dot_score_2d_q",
        lambda: tl.DotScore()(_x(3, 4), _x(2, 3, 4)),
        ValueError,
        r"q must have 3 dimensions, got 2",
    ),
    (
        "dot_score_batch",
        lambda: tl.DotScore()(_x(2, 3, 4), _x(3, 3, 4)),
        ValueError,
        r"q and k must have the same batch size, got 2 and 3",
    ),
    (
        "general_score_d_q_zero",
        lambda: tl.GeneralScore(0, 4),
        ValueError,
        r"d_q must be >= 1, got 0",
    ),
    (
        "general_score_k_width",
        lambda: tl.GeneralScore(4, 6)(_x(2, 3, 4), _x(2, 3, 5)),
        ValueError,
        r"k must have last dimension d_k=6, got 5",
    ),
    (
        "general_score_float64",
        lambda: tl.GeneralScore(4, 4)(
            _x(2, 3, 4, dtype=torch.float64), _x(2, 3, 4, dtype=torch.float64)
        ),
        TypeError,
        r"q has dtype torch\.float64, but the module's weights are torch\.float32",
    ),
    (
        "additive_score_d_hidden",
        lambda: tl.AdditiveScore(4, 4, 0),
        ValueError,
        r"d_hidden must be >= 1, got 0",
    ),
    (
        "attention_score_not_module",
        lambda: tl.Attention("dot"),
        TypeError,
        r"score must be a score module such as tl\.ScaledDotScore\(\), got str",
    ),
    (
        "attention_v_batch",
        lambda: tl.Attention(tl.DotScore())(_x(2, 3, 4), _x(2, 5, 4), _x(3, 5, 4)),
        ValueError,
        r"k and v must have the same batch size and length Lk",
    ),
    # multi-head attention
    (
        "multihead_bias_int",
        lambda: tl.MultiHeadAttention(8, 2, bias=1),
        TypeError,
        r"bias must be True or False, got int",
    ),
    (
        "multihead_need_weights_str",
        lambda: _mha(_x(2, 3, 8), need_weights="yes"),
        TypeError,
        r"need_weights must be True or False, got str",
    ),
    (
        "multihead_cache_list",
        lambda: _mha(_x(2, 3, 8), cache=[]),
        TypeError,
        r"cache must be a dict or a StaticKVCache \(or None\), got list",
    ),
    (
        "multihead_key_value_length",
        lambda: tl.MultiHeadAttention(8, 2)(_x(2, 3, 8), _x(2, 4, 8), _x(2, 5, 8)),
        ValueError,
        r"key and value must have the same length, got 4 and 5",
    ),
    (
        "multihead_batch",
        lambda: _mha(_x(2, 3, 8), key=_x(3, 3, 8)),
        ValueError,
        r"query, key and value must have the same batch size, got 2, 3 and 3",
    ),
    (
        "multihead_other_device",
        lambda: _mha(_x(2, 3, 8, device="meta")),
        ValueError,
        r"query is on meta, but the module's weights are on cpu",
    ),
    (
        "multihead_int_query",
        lambda: _mha(torch.ones(2, 3, 8, dtype=torch.long)),
        TypeError,
        r"query must be a floating-point tensor, got torch\.int64",
    ),
    # feed-forward, LayerNorm, embedding, positional encoding
    (
        "ffn_d_ff_zero",
        lambda: tl.PositionwiseFeedForward(8, 0),
        ValueError,
        r"d_ff must be >= 1, got 0",
    ),
    (
        "ffn_float64_input",
        lambda: tl.PositionwiseFeedForward(8, 16)(_x(2, 8, dtype=torch.float64)),
        TypeError,
        r"x has dtype torch\.float64, but the module's weights are torch\.float32",
    ),
    (
        "layernorm_eps_zero",
        lambda: tl.LayerNorm(8, eps=0.0),
        ValueError,
        r"eps must be in \(0, inf\), got 0\.0",
    ),
    (
        "layernorm_eps_string",
        lambda: tl.LayerNorm(8, eps="1e-5"),
        TypeError,
        r"eps must be a number, got str",
    ),
    (
        "layernorm_int_input",
        lambda: tl.LayerNorm(3)(TOKENS),
        TypeError,
        r"x must be a floating-point tensor, got torch\.int64",
    ),
    (
        "layernorm_other_device",
        lambda: tl.LayerNorm(8)(_x(2, 8, device="meta")),
        ValueError,
        r"x is on meta, but the module's weights are on cpu",
    ),
    (
        "embedding_vocab_zero",
        lambda: tl.TokenEmbedding(0, 8),
        ValueError,
        r"vocab_size must be >= 1, got 0",
    ),
    (
        "embedding_pad_id_float",
        lambda: tl.TokenEmbedding(10, 8, pad_id=1.5),
        TypeError,
        r"pad_id must be an int, got float 1\.5",
    ),
    (
        "embedding_tokens_other_device",
        lambda: tl.TokenEmbedding(10, 8)(TOKENS.to("meta")),
        ValueError,
        r"tokens is on meta, but the module's weights are on cpu",
    ),
    (
        "sinusoidal_max_len_zero",
        lambda: tl.sinusoidal_table(0, 8),
        ValueError,
        r"max_len must be >= 1, got 0",
    ),
    (
        "sinusoidal_d_model_float",
        lambda: tl.sinusoidal_table(8, 2.5),
        TypeError,
        r"d_model must be an int, got float 2\.5",
    ),
    (
        "positional_offset_negative",
        lambda: tl.PositionalEncoding(8, 16)(_x(1, 3, 8), offset=-1),
        ValueError,
        r"offset must be >= 0, got -1",
    ),
    (
        "positional_int_input",
        lambda: tl.PositionalEncoding(3, 16)(TOKENS[None]),
        TypeError,
        r"x must be a floating-point tensor, got torch\.int64",
    ),
    # masks
    (
        "causal_mask_length_zero",
        lambda: tl.causal_mask(0),
        ValueError,
        r"length must be >= 1, got 0",
    ),
    (
        "causal_mask_bad_device_name",
        lambda: tl.causal_mask(3, device="gpu0"),
        ValueError,
        r"device must name a device such as 'cpu' or 'cuda', got 'gpu0'",
    ),
    (
        "causal_mask_device_int",
        lambda: tl.causal_mask(3, device=3.5),
        TypeError,
        r"device must be a torch\.device, a string or None, got float",
    ),
    (
        "decoder_self_mask_float_tgt",
        lambda: tl.decoder_self_mask(TOKENS.float()),
        TypeError,
        r"tgt must hold integer token ids \(torch\.int64\), got torch\.float32",
    ),
    (
        "cross_mask_tgt_len_zero",
        lambda: tl.cross_mask(TOKENS, 0),
        ValueError,
        r"tgt_len must be >= 1, got 0",
    ),
    (
        "cross_mask_1d_src",
        lambda: tl.cross_mask(TOKENS[0], 3),
        ValueError,
        r"src must have 2 dimensions, got 1",
    ),
    # encoder, decoder
    (
        "encoder_layer_norm_first_str",
        lambda: tl.EncoderLayer(8, 2, 16, norm_first="yes"),
        TypeError,
        r"norm_first must be True or False, got str",
    ),
    (
        "encoder_layer_2d_x",
        lambda: tl.EncoderLayer(8, 2, 16)(_x(3, 8)),
        ValueError,
        r"x must have 3 dimensions, got 2",
    ),
    (
        "encoder_num_layers_zero",
        lambda: tl.Encoder(0, 8, 2, 16),
        ValueError,
        r"num_layers must be >= 1, got 0",
    ),
    (
        "encoder_x_width",
        lambda: tl.Encoder(1, 8, 2, 16)(_x(2, 3, 6)),
        ValueError,
        r"x must have last dimension d_model=8, got 6",
    ),
    (
        "decoder_layer_memory_width",
        lambda: _decoder_layer(_x(2, 3, 8), _x(2, 4, 6)),
        ValueError,
        r"memory must have last dimension d_model=8, got 6",
    ),
    (
        "decoder_layer_batch",
        lambda: _decoder_layer(_x(2, 3, 8), _x(3, 4, 8)),
        ValueError,
        r"x and memory must have the same batch size, got 2 and 3",
    ),
    (
        "decoder_layer_memory_dtype",
        lambda: _decoder_layer(_x(2, 3, 8), _x(2, 4, 8, dtype=torch.float64)),
        TypeError,
        r"x and memory must have the same dtype, got torch\.float32 and torch\.float64",
    ),
    (
        "decoder_layer_cache_type",
        lambda: _decoder_layer(_x(2, 3, 8), _x(2, 4, 8), cache={}),
        TypeError,
        r"cache must be one layer's entry of Decoder\.new_cache\(\)",
    ),
    (
        "decoder_cache_length",
        lambda: tl.Decoder(2, 8, 2, 16)(_x(2, 1, 8), _x(2, 4, 8), cache=[{}]),
        ValueError,
        r"cache must have one entry per layer \(2\), got 1",
    ),
    # the model
    (
        "transformer_src_vocab_zero",
        lambda: tl.Transformer(0, 10),
        ValueError,
        r"src_vocab_size must be >= 1, got 0",
    ),
    (
        "transformer_encoder_layers_zero",
        lambda: _model(num_encoder_layers=0),
        ValueError,
        r"num_encoder_layers must be >= 1, got 0",
    ),
    (
        "transformer_share_embeddings_int",
        lambda: _model(share_embeddings=1),
        TypeError,
        r"share_embeddings must be True or False, got int",
    ),
    (
        "transformer_pad_id_outside_tgt_vocab",
        lambda: tl.Transformer(20, 10, d_model=8, num_heads=2, pad_id=15),
        ValueError,
        r"pad_id must be in \[0, vocab_size=10\), got 15",
    ),
    (
        "transformer_return_attention_str",
        lambda: _model()(TOKENS, TOKENS, return_attention="yes"),
        TypeError,
        r"return_attention must be True or False, got str",
    ),
    (
        "transformer_empty_tgt_in",
        lambda: _model()(TOKENS, TOKENS[:, :0]),
        ValueError,
        r"tgt_in must hold at least one token per row, got shape \(2, 0\)",
    ),
    (
        "transformer_src_other_device",
        lambda: _model().encode(TOKENS.to("meta")),
        ValueError,
        r"src is on meta, but the module's weights are on cpu",
    ),
    (
        "decode_memory_batch",
        lambda: _decode(TOKENS, _x(1, 3, 8), TOKENS),
        ValueError,
        r"tgt_in, memory and src must have the same batch size, got 2, 1 and 2",
    ),
    (
        "decode_memory_length",
        lambda: _decode(TOKENS, _x(2, 5, 8), TOKENS),
        ValueError,
        r"memory and src must have the same length Ls, got 5 and 3",
    ),
    (
        "decode_memory_int",
        lambda: _decode(TOKENS, torch.ones(2, 3, 8, dtype=torch.long), TOKENS),
        TypeError,
        r"memory must be a floating-point tensor, got torch\.int64",
    ),
    # loss
    (
        "loss_int_logits",
        lambda: tl.masked_cross_entropy(TOKENS, TOKENS[:, 0]),
        TypeError,
        r"logits must be a floating-point tensor, got torch\.int64",
    ),
    (
        "loss_pad_id_none",
        lambda: tl.masked_cross_entropy(_x(2, 5), torch.tensor([1, 2]), pad_id=None),
        TypeError,
        r"pad_id must be an int, got NoneType",
    ),
    (
        "loss_target_out_of_vocab",
        lambda: tl.masked_cross_entropy(_x(2, 5), torch.tensor([1, 5])),
        ValueError,
        r"targets must be < vocab_size=5, got a token id of 5",
    ),
    (
        "accuracy_float_targets",
        lambda: tl.token_accuracy(_x(2, 5), torch.tensor([1.0, 2.0])),
        TypeError,
        r"targets must hold integer token ids \(torch\.int64\), got torch\.float32",
    ),
    # decoding
    (
        "greedy_model_not_transformer",
        lambda: _greedy(model=nn.Linear(2, 2)),
        TypeError,
        r"model must be a tl\.Transformer or have its decoding interface.*Linear has no "
        r"encode, decode, pad_id, decoder\.new_cache",
    ),
    (
        "greedy_eos_id_out_of_vocab",
        lambda: _greedy(eos_id=99),
        ValueError,
        r"eos_id must be in \[0, vocab_size=13\), got 99",
    ),
    (
        "greedy_use_cache_str",
        lambda: _greedy(use_cache="no"),
        TypeError,
        r"use_cache must be True or False, got str",
    ),
    (
        "greedy_src_out_of_vocab",
        lambda: _greedy(src=torch.tensor([[1, 20]])),
        ValueError,
        r"src must be < vocab_size=13, got a token id of 20",
    ),
    (
        "beam_length_penalty_negative",
        lambda: tl.beam_search(_model(), TOKENS, 2, 3, 1, 2, length_penalty=-1.0),
        ValueError,
        r"length_penalty must be in \[0, inf\), got -1\.0",
    ),
    (
        "beam_length_penalty_nan",
        lambda: tl.beam_search(
            _model(), TOKENS, 2, 3, 1, 2, length_penalty=float("nan")
        ),
        ValueError,
        r"length_penalty must be finite, got nan",
    ),
    # training
    (
        "noam_step_negative",
        lambda: tl.noam_lr(-1, 512, 4000),
        ValueError,
        r"step must be >= 0, got -1",
    ),
    (
        "noam_step_float",
        lambda: tl.noam_lr(1.5, 512, 4000),
        TypeError,
        r"step must be an int, got float 1\.5",
    ),
    (
        "train_step_tgt_one_column",
        lambda: _train_step(tgt=TOKENS[:, :1]),
        ValueError,
        r"tgt must hold at least 2 tokens per row.*got shape \(2, 1\)",
    ),
    (
        "train_step_optimizer_none",
        lambda: _train_step(optimizer=None),
        TypeError,
        r"optimizer must be a torch\.optim\.Optimizer, got NoneType",
    ),
    (
        "train_step_clip_zero",
        lambda: _train_step(clip_grad_norm=0.0),
        ValueError,
        r"clip_grad_norm must be in \(0, inf\), got 0\.0",
    ),
    (
        "train_step_batch_mismatch",
        lambda: _train_step(tgt=TOKENS[:1]),
        ValueError,
        r"src and tgt must have the same batch size, got 2 and 1",
    ),
    (
        "train_step_label_smoothing_one",
        lambda: _train_step(label_smoothing=1.0),
        ValueError,
        r"label_smoothing must be in \[0, 1\), got 1\.0",
    ),
    (
        "train_max_seconds_zero",
        lambda: _train(max_seconds=0),
        ValueError,
        r"max_seconds must be in \(0, inf\), got 0",
    ),
    (
        "train_callback_not_callable",
        lambda: _train(callback=3),
        TypeError,
        r"callback must be callable \(or None\), got int",
    ),
    (
        "train_batches_not_iterable",
        lambda: _train(batches=5),
        TypeError,
        r"batches must be an iterable of \(src, tgt\) pairs, got int",
    ),
    (
        "train_progress_str",
        lambda: tl.train(
            _model(), [], torch.optim.Adam([nn.Parameter(torch.ones(1))]), progress="no"
        ),
        TypeError,
        r"progress must be True or False, got str",
    ),
    # utilities
    (
        "set_seed_negative",
        lambda: tl.set_seed(-1),
        ValueError,
        r"seed must be >= 0, got -1",
    ),
    (
        "set_seed_too_large",
        lambda: tl.set_seed(2**40),
        ValueError,
        r"seed must be <= 4294967295, got 1099511627776",
    ),
    (
        "count_parameters_not_module",
        lambda: tl.count_parameters("model"),
        TypeError,
        r"module must be a torch\.nn\.Module, got str",
    ),
    (
        "show_source_int",
        lambda: tl.show_source(42),
        TypeError,
        r"obj must be a function, class or method with a source file, got int",
    ),
    # data
    (
        "pad_sequences_string",
        lambda: pad_sequences("abc"),
        TypeError,
        r"sequences must be a list of lists of token ids, got str",
    ),
    (
        "pad_sequences_string_row",
        lambda: pad_sequences([[1, 2], "ab"]),
        TypeError,
        r"sequences\[1\] must be a list of token ids, got str",
    ),
    (
        "pad_sequences_length_negative",
        lambda: pad_sequences([[1, 2]], length=-1),
        ValueError,
        r"length must be >= 0, got -1",
    ),
    (
        "pad_sequences_pad_id_str",
        lambda: pad_sequences([[1]], pad_id="0"),
        TypeError,
        r"pad_id must be an int, got str",
    ),
    (
        "batcher_float_src",
        lambda: BucketBatcher(TOKENS.float(), TOKENS, 2),
        TypeError,
        r"src must hold integer token ids \(torch\.int64\), got torch\.float32",
    ),
    (
        "batcher_empty",
        lambda: BucketBatcher(TOKENS[:0], TOKENS[:0], 2),
        ValueError,
        r"src and tgt must hold at least one example, got \(0, 3\)",
    ),
    (
        "batcher_bucket_str",
        lambda: BucketBatcher(TOKENS, TOKENS, 2, bucket="yes"),
        TypeError,
        r"bucket must be True or False, got str",
    ),
    (
        "batcher_pool_zero",
        lambda: BucketBatcher(TOKENS, TOKENS, 2, pool_batches=0),
        ValueError,
        r"pool_batches must be >= 1, got 0",
    ),
    (
        "magnitude_buckets_zero",
        lambda: magnitude_buckets(0),
        ValueError,
        r"max_number must be >= 1, got 0",
    ),
    (
        "split_numbers_n_test_zero",
        lambda: split_numbers(n_test=0),
        ValueError,
        r"n_test must be >= 1, got 0",
    ),
    (
        "split_numbers_max_fraction_zero",
        lambda: split_numbers(max_fraction=0.0),
        ValueError,
        r"max_fraction must be in \(0, 1\], got 0\.0",
    ),
    (
        "number_words_train_size_zero",
        lambda: NumberWordsData("de", train_size=0),
        ValueError,
        r"train_size must be >= 1, got 0",
    ),
    (
        "vocab_encode_str",
        lambda: Vocab(["a"]).encode("abc"),
        TypeError,
        r"tokens must be a list of token strings, got one str 'abc'",
    ),
    (
        "detokenize_words_str",
        lambda: detokenize_words("forty two"),
        TypeError,
        r"tokens must be a list of token strings, got 'forty two'",
    ),
    # plots and widgets
    (
        "plot_history_missing_key",
        lambda: viz.plot_history(HISTORY),
        ValueError,
        r"history has no \['acc'\]",
    ),
    (
        "positional_curves_dims",
        lambda: viz.plot_positional_curves(tl.sinusoidal_table(4, 8), dims=(0, 9)),
        ValueError,
        r"dims must be <= 7, got 9",
    ),
    (
        "show_masks_ncols_zero",
        lambda: viz.show_masks([tl.causal_mask(3)], ncols=0),
        ValueError,
        r"ncols must be >= 1, got 0",
    ),
    (
        "mask_explorer_src_len",
        lambda: widgets.mask_explorer(src_len=9, max_len=8),
        ValueError,
        r"src_len must be <= 8, got 9",
    ),
    (
        "positional_explorer_d_model",
        lambda: widgets.positional_explorer(d_model=4),
        ValueError,
        r"d_model must be >= 8, got 4",
    ),
    (
        "attention_explorer_maps_list",
        lambda: widgets.attention_explorer([], [], []),
        TypeError,
        r"maps must be the dict of Transformer\(.*return_attention=True\), got list",
    ),
]

CASES = ISSUE_CASES + OWN_CASES


@pytest.mark.parametrize(
    "call, error, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_names_the_argument(call, error, message):
    with pytest.raises(error, match=message) as caught:
        call()
    assert type(caught.value) is error  # exactly that type, not a subclass of it


def test_the_case_list():
    assert len(OWN_CASES) >= 30
    assert len({c[0] for c in CASES}) == len(CASES)


# --------------------------------------------------------------------------------------
# Behaviour the issue named besides bad arguments
# --------------------------------------------------------------------------------------


def test_static_cross_attention_cache_refuses_a_new_memory():
    mha = tl.MultiHeadAttention(8, 2).eval()
    x, memory = _x(2, 1, 8), _x(2, 5, 8)
    cache = {"static": True}
    first, _ = mha(x, memory, memory, cache=cache)
    again, _ = mha(
        x, memory, memory, cache=cache
    )  # the same memory: served from the cache
    torch.testing.assert_close(again, first)
    view = memory[:, :]  # another view of the same memory is the same memory
    mha(x, view, view, cache=cache)
    other = _x(2, 5, 8)
    with pytest.raises(
        ValueError, match="differ from the memory this static cross-attention"
    ):
        mha(x, other, other, cache=cache)
    fresh = {"static": True}  # a new cache serves the new memory
    torch.testing.assert_close(
        mha(x, other, other, cache=fresh)[0], mha(x, other, other)[0]
    )


def test_decoding_cache_refuses_a_new_memory_through_the_model():
    model = _model()
    src = torch.tensor([[3, 4, 5]])
    cache = model.decoder.new_cache()
    model.decode(torch.tensor([[1]]), model.encode(src), src, cache=cache)
    with pytest.raises(ValueError, match="use a new cache"):
        model.decode(torch.tensor([[6]]), model.encode(src), src, cache=cache)


def test_self_attention_cache_refuses_another_batch_size():
    mha = tl.MultiHeadAttention(8, 2).eval()
    cache = {}
    x = _x(2, 1, 8)
    mha(x, x, x, cache=cache)
    y = _x(3, 1, 8)
    with pytest.raises(
        ValueError, match="cache holds a batch of 2, but query has batch size 3"
    ):
        mha(y, y, y, cache=cache)


def test_train_max_steps_stops_exactly():
    history = _train(batches=[(TOKENS, TOKENS)] * 5, max_steps=2, log_every=1)
    assert history["step"] == [1, 2]


# --------------------------------------------------------------------------------------
# interop: copying weights between layers built differently is refused
# --------------------------------------------------------------------------------------

D, H, D_FF = 16, 4, 32
MISMATCHED_PAIRS = [
    (
        "norm_first",
        lambda: (
            tl.EncoderLayer(D, H, D_FF),
            nn.TransformerEncoderLayer(D, H, D_FF, norm_first=True),
        ),
        r"norm_first differs: ours norm_first=False, theirs norm_first=True",
    ),
    (
        "activation",
        lambda: (
            tl.DecoderLayer(D, H, D_FF),
            nn.TransformerDecoderLayer(D, H, D_FF, activation="gelu"),
        ),
        r"the activation differs: ours 'relu', theirs 'gelu'",
    ),
    (
        "tanh_gelu",
        lambda: (
            tl.EncoderLayer(D, H, D_FF, activation="gelu"),
            nn.TransformerEncoderLayer(D, H, D_FF, activation=nn.GELU("tanh")),
        ),
        r"the activation differs: ours 'gelu', theirs GELU\(approximate='tanh'\)",
    ),
    (
        "layer_bias",
        lambda: (
            tl.EncoderLayer(D, H, D_FF),
            nn.TransformerEncoderLayer(D, H, D_FF, bias=False),
        ),
        r"bias differs: ours bias=True .*theirs bias=False",
    ),
    (
        "attention_bias",
        lambda: (tl.MultiHeadAttention(D, H, bias=False), nn.MultiheadAttention(D, H)),
        r"attention bias differs: ours bias=False, theirs bias=True",
    ),
    (
        "kdim",
        lambda: (
            tl.MultiHeadAttention(D, H),
            nn.MultiheadAttention(D, H, kdim=8, vdim=8),
        ),
        r"theirs uses kdim/vdim, add_bias_kv or add_zero_attn",
    ),
    (
        "d_ff",
        lambda: (
            tl.EncoderLayer(D, H, D_FF),
            nn.TransformerEncoderLayer(D, H, 2 * D_FF),
        ),
        r"size mismatch: ours d_ff=32, theirs dim_feedforward=64",
    ),
    (
        "eps",
        lambda: (
            tl.DecoderLayer(D, H, D_FF),
            nn.TransformerDecoderLayer(D, H, D_FF, layer_norm_eps=1e-6),
        ),
        r"LayerNorm eps differs: ours eps=1e-05, theirs eps=1e-06",
    ),
]


@pytest.mark.parametrize("direction", ["copy_to_torch", "copy_from_torch"])
@pytest.mark.parametrize(
    "make, message",
    [c[1:] for c in MISMATCHED_PAIRS],
    ids=[c[0] for c in MISMATCHED_PAIRS],
)
def test_interop_refuses_layers_built_differently(direction, make, message):
    from transformer_lib import interop

    ours, theirs = make()
    before = [p.clone() for p in (*ours.parameters(), *theirs.parameters())]
    with pytest.raises(ValueError, match=message):
        getattr(interop, direction)(ours, theirs)
    after = list((*ours.parameters(), *theirs.parameters()))
    assert all(
        torch.equal(a, b) for a, b in zip(before, after)
    )  # refused before copying


def test_interop_copies_attention_without_bias():
    from transformer_lib.interop import copy_from_torch, copy_to_torch

    ours = tl.MultiHeadAttention(D, H, bias=False).eval()
    theirs = nn.MultiheadAttention(D, H, bias=False, batch_first=True).eval()
    copy_to_torch(ours, theirs)
    x = _x(2, 5, D)
    torch.testing.assert_close(ours(x, x, x)[0], theirs(x, x, x, need_weights=False)[0])
    back = tl.MultiHeadAttention(D, H, bias=False)
    copy_from_torch(back, theirs)
    torch.testing.assert_close(back(x, x, x)[0], ours(x, x, x)[0])
