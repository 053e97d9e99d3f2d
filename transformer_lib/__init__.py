"""transformer_lib: the shared package of The Tested Transformer.

Modules follow the book's order: embedding, positional, masks, attention, multihead, feedforward,
norm, encoder, decoder, model, loss, decoding, training; past one process (chapter 13):
static_cache and fast_decoding (decoding off the host),
distributed, precision, stopping, checkpoint. Conventions: batch-first tensors; boolean
masks with True = blocked; a fully blocked query row gets zero weights, never NaN.
"""
from .attention import (
    AdditiveScore,
    Attention,
    DotScore,
    GeneralScore,
    ScaledDotScore,
    masked_softmax,
    scaled_dot_product_attention,
)
from .decoder import Decoder, DecoderLayer
from .decoding import beam_search, greedy_decode
from .embedding import TokenEmbedding
from .encoder import Encoder, EncoderLayer
from .fast_decoding import FastDecoder, fast_beam_search, fast_greedy_decode
from .feedforward import PositionwiseFeedForward
from .loss import masked_cross_entropy, token_accuracy
from .masks import causal_mask, cross_mask, decoder_self_mask, padding_mask
from .model import Transformer
from .multihead import MultiHeadAttention
from .norm import LayerNorm
from .positional import PositionalEncoding, sinusoidal_table
from .static_cache import StaticCache, StaticKVCache
from .training import noam_lr, train, train_step
from .utils import count_parameters, get_device, set_seed, show_source

__version__ = "0.1.0"

__all__ = [
    "AdditiveScore", "Attention", "Decoder", "DecoderLayer", "DotScore", "Encoder", "EncoderLayer",
    "FastDecoder", "GeneralScore", "LayerNorm", "MultiHeadAttention", "PositionalEncoding",
    "PositionwiseFeedForward", "ScaledDotScore", "StaticCache", "StaticKVCache", "TokenEmbedding", "Transformer", "beam_search",
    "causal_mask", "count_parameters", "cross_mask", "decoder_self_mask", "fast_beam_search", "fast_greedy_decode", "get_device", "greedy_decode",
    "masked_cross_entropy", "masked_softmax", "noam_lr", "padding_mask", "scaled_dot_product_attention",
    "set_seed", "show_source", "sinusoidal_table", "token_accuracy", "train", "train_step",
]
