"""The full encoder-decoder Transformer (paper section 3, figure 1)."""
from __future__ import annotations

import torch
from torch import nn

from ._checks import (
    check_activations,
    check_bool,
    check_on_device,
    check_positive_int,
    check_probability,
    check_same_size,
    check_tensor,
    check_token_id,
    check_token_ids,
)
from .decoder import Decoder
from .embedding import TokenEmbedding
from .encoder import Encoder
from .masks import causal_mask, decoder_self_mask, padding_mask
from .positional import PositionalEncoding
from .utils import count_parameters


class Transformer(nn.Module):
    """Embeddings + positional encoding, an encoder, a decoder and a linear output layer.

    src (B, Ls) and tgt_in (B, Lt) int64 token ids -> logits (B, Lt, tgt_vocab_size).
    ``tgt_in`` is the target shifted right (it starts with BOS): position t predicts token t + 1.

    ``share_embeddings=True`` ties the source embedding, the target embedding and the output layer
    to one matrix (paper section 3.4); it needs ``src_vocab_size == tgt_vocab_size``.
    The output layer has no bias, so a tied model has exactly the paper's weight sharing.

    Options for models trained elsewhere (``transformer_lib.interop.from_marian``); the
    defaults are the paper's: ``activation`` of the feed-forward layers ("relu", "gelu",
    "gelu_tanh", "silu"); ``scale_embedding=False`` drops the sqrt(d_model) embedding
    factor; ``output_bias=True`` gives the output layer a bias (initialised to zeros);
    ``interleaved_pe=False`` orders the positional table's columns: sines, then cosines.

    ``dropout`` is the paper's P_drop: on the embeddings and on every sublayer's output, and
    here also on the attention weights and inside the feed-forward layers, unless
    ``attention_dropout`` or ``activation_dropout`` sets those apart (None, the default:
    ``dropout``; ``config`` lists them only when they are given, so a model built without
    them has the configuration it always had).
    """

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8,
                 num_encoder_layers=6, num_decoder_layers=6, d_ff=2048, dropout=0.1,
                 max_len=5000, pad_id=0, norm_first=False, share_embeddings=False,
                 activation="relu", scale_embedding=True, output_bias=False,
                 interleaved_pe=True, attention_dropout=None, activation_dropout=None):
        super().__init__()
        check_positive_int("src_vocab_size", src_vocab_size)
        check_positive_int("tgt_vocab_size", tgt_vocab_size)
        check_positive_int("num_encoder_layers", num_encoder_layers)
        check_positive_int("num_decoder_layers", num_decoder_layers)
        check_token_id("pad_id", pad_id, min(src_vocab_size, tgt_vocab_size))
        check_bool("norm_first", norm_first)
        check_bool("share_embeddings", share_embeddings)
        check_bool("output_bias", output_bias)
        if share_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError(
                "share_embeddings=True needs one shared vocabulary, got "
                f"src_vocab_size={src_vocab_size} and tgt_vocab_size={tgt_vocab_size}"
            )
        self.config = dict(
            src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, d_model=d_model,
            num_heads=num_heads, num_encoder_layers=num_encoder_layers,
            num_decoder_layers=num_decoder_layers, d_ff=d_ff, dropout=dropout, max_len=max_len,
            pad_id=pad_id, norm_first=norm_first, share_embeddings=share_embeddings,
            activation=activation, scale_embedding=scale_embedding,
            output_bias=output_bias, interleaved_pe=interleaved_pe,
        )
        for name, value in (("attention_dropout", attention_dropout),
                            ("activation_dropout", activation_dropout)):
            if value is not None:
                check_probability(name, value)
                self.config[name] = value
        self.pad_id = pad_id
        scale = scale_embedding
        self.src_embed = TokenEmbedding(src_vocab_size, d_model, pad_id, scale)
        # With shared embeddings the target side uses the very same module (one weight matrix).
        self.tgt_embed = (self.src_embed if share_embeddings
                          else TokenEmbedding(tgt_vocab_size, d_model, pad_id, scale))
        self.pos_enc = PositionalEncoding(d_model, max_len, dropout, interleaved_pe)
        layer_args = (d_model, num_heads, d_ff, dropout, norm_first, activation)
        self.encoder = Encoder(num_encoder_layers, *layer_args)
        self.decoder = Decoder(num_decoder_layers, *layer_args)
        # The layers take one rate (as the chapters show them); the rates on the attention
        # weights and inside the feed-forward layers are set apart here, if asked for.
        for layer in [*self.encoder.layers, *self.decoder.layers]:
            if attention_dropout is not None:
                layer.self_attn.dropout = attention_dropout  # a rate, passed on at each call
                if hasattr(layer, "cross_attn"):
                    layer.cross_attn.dropout = attention_dropout
            if activation_dropout is not None:
                layer.ffn.dropout.p = activation_dropout
        self.generator = nn.Linear(d_model, tgt_vocab_size, bias=output_bias)
        if output_bias:
            nn.init.zeros_(self.generator.bias)
        if share_embeddings:
            self.generator.weight = self.tgt_embed.weight

    def encode(self, src: torch.Tensor, need_weights: bool = False):
        """src (B, Ls) -> memory (B, Ls, d_model) (and the per-layer self-attention maps)."""
        self._check_tokens("src", src, self.src_embed)
        check_bool("need_weights", need_weights)
        x = self.pos_enc(self.src_embed(src))  # (B, Ls, d_model)
        return self.encoder(x, padding_mask(src, self.pad_id), need_weights=need_weights)

    def decode(self, tgt_in, memory, src, cache=None, need_weights=False):
        """tgt_in (B, Lt), memory (B, Ls, d_model), src (B, Ls) -> logits (B, Lt, V).

        With a ``cache`` (from ``self.decoder.new_cache()``), ``tgt_in`` holds only the *new* tokens;
        the keys and values of earlier steps come from the cache, and positions continue from there.
        """
        self._check_tokens("tgt_in", tgt_in, self.tgt_embed)
        self._check_tokens("src", src, self.src_embed)
        check_activations("memory", memory, self.src_embed.d_model)
        check_same_size(0, "batch size", tgt_in=tgt_in, memory=memory, src=src)
        check_same_size(1, "length Ls", memory=memory, src=src)
        check_bool("need_weights", need_weights)
        self.decoder.check_cache(cache)
        offset = 0
        if cache is not None and "k" in cache[0]["self"]:
            offset = cache[0]["self"]["k"].size(2)
        new = tgt_in.size(1)
        if cache is None:
            self_mask = decoder_self_mask(tgt_in, self.pad_id)  # (B, 1, Lt, Lt)
            # Position 0 holds the start token, never padding, even if its id is pad_id
            # (Marian starts from its pad token): keep it visible, as the cache does.
            self_mask[..., 0] = False
        elif new == 1:  # one new query, the last position: it may see every key
            self_mask = None  # (the usual decoding step: no mask to build and apply)
        else:  # new query i sits at position offset + i and may see keys 0 .. offset + i
            self_mask = causal_mask(new, device=tgt_in.device, offset=offset)  # (1, 1, new, offset+new)
        x = self.pos_enc(self.tgt_embed(tgt_in), offset=offset)
        out = self.decoder(x, memory, self_mask, padding_mask(src, self.pad_id),
                           need_weights=need_weights, cache=cache)
        if need_weights:
            x, self_maps, cross_maps = out
            return self.generator(x), self_maps, cross_maps
        return self.generator(out)  # (B, Lt, V)

    def forward(self, src, tgt_in, return_attention=False):
        self._check_tokens("src", src, self.src_embed)
        self._check_tokens("tgt_in", tgt_in, self.tgt_embed)
        check_same_size(0, "batch size", src=src, tgt_in=tgt_in)
        check_bool("return_attention", return_attention)
        if not return_attention:
            return self.decode(tgt_in, self.encode(src), src)
        memory, enc_maps = self.encode(src, need_weights=True)
        logits, dec_maps, cross_maps = self.decode(tgt_in, memory, src, need_weights=True)
        return logits, {"encoder": enc_maps, "decoder": dec_maps, "cross": cross_maps}

    @staticmethod
    def _check_tokens(name, tokens, embed):
        """(B, L) ids below the embedding's vocabulary size, at least one per row."""
        check_tensor(name, tokens, ndim=2)
        check_on_device(name, tokens, embed.weight)
        check_token_ids(name, tokens, embed.vocab_size)
        if tokens.size(1) == 0:
            raise ValueError(f"{name} must hold at least one token per row, got shape "
                             f"{tuple(tokens.shape)}")

    def num_parameters(self) -> int:
        """Trainable parameters, each shared tensor counted once."""
        return count_parameters(self)
