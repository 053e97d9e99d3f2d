"""Hugging Face Marian translation models to ``tl.Transformer`` and back, same weights.

``transformers.MarianMTModel`` is the architecture of the Helsinki-NLP ``opus-mt-*``
models: the paper's post-norm Transformer with sinusoidal positions and tied embeddings.
``from_marian`` copies one into a ``tl.Transformer``, ``to_marian`` does the reverse;
the logits agree to float rounding. ``transformers`` is optional
(``pip install transformer_lib[hf]``) and is imported only inside these two functions.

Where the two differ, and what we do:

- **Positional table.** Marian puts all sines first, then all cosines; the paper (and
  our default) interleaves them. ``from_marian`` builds ``interleaved_pe=False``.
  ``to_marian`` of an interleaved model reorders the d_model coordinates of every weight
  that reads or writes the residual stream, in the same way as the table's columns.
  LayerNorm and attention do not depend on the order of the coordinates, so the
  reordered model computes the same function.
- **Activation.** Marian's ``swish`` is our ``silu``; ``gelu`` and ``relu`` are the
  same; ``gelu_new`` and ``gelu_pytorch_tanh`` are our ``gelu_tanh``.
- **Embedding scale.** Marian's ``scale_embedding`` (sqrt(d_model) or 1) is ours.
- **Output bias.** Marian adds a ``final_logits_bias`` buffer (never trained). We add a
  trainable ``generator.bias`` (``output_bias=True``) unless it is all zeros.
- **Tied embeddings.** We tie the encoder, decoder and output embeddings
  (``share_embeddings=True``) or none of them. The tying is read from the tensors, not
  the config, because transformers 4 and 5 read the config differently (below). A model
  that ties two of the three (e.g. ``share_encoder_decoder_embeddings=True`` with
  ``tie_word_embeddings=False`` in transformers 4) loads as three separate matrices
  holding the same values, with a warning: the logits are equal, but training the copy
  no longer keeps the two tied.
- **Decoding starts from the pad token** (``decoder_start_token_id == pad_token_id``):
  pass it as ``bos_id``; ``Transformer.decode`` never treats position 0 as padding.
- **Dropout.** Marian has ``dropout``, ``attention_dropout``, ``activation_dropout`` and
  LayerDrop; we have one ``dropout`` for all. They act only in training mode.

transformers 4 (>= 4.40) and 5 build different models from the same ``MarianConfig``:

- ``share_encoder_decoder_embeddings=True, tie_word_embeddings=False``: transformers 4
  shares the encoder and decoder embeddings (``model.shared``) and unties only the
  output layer; transformers 5 unties all three (and keeps an unused ``model.shared``).
- ``share_encoder_decoder_embeddings=False``: transformers 5 gives the decoder embedding
  ``decoder_vocab_size`` rows, transformers 4 ``vocab_size`` rows (it copies the
  encoder's). ``from_marian`` keeps the decoder rows of the ids the output layer can
  emit. ``to_marian`` of an untied model sets ``vocab_size=max(src_vocab_size,
  tgt_vocab_size)`` on either version and fills the rows that no id of ours reaches
  with zeros: its logits are ours, it writes the same vocabulary sizes on both
  versions, and where ``tgt_vocab_size >= src_vocab_size`` the directory it saves
  loads into either (the converted model then reports the larger source vocabulary).
  With a smaller target vocabulary it loads only into the major version that wrote it
  (transformers refuses the other's shapes).
- Either version ties ``lm_head`` to the decoder embedding when
  ``tie_word_embeddings=True``, and nothing when both flags are False; ``to_marian``
  only writes these two agreed cases, so both versions build what it means.

Refused with a ``ValueError`` naming the setting: encoder and decoder with different
``*_attention_heads`` or ``*_ffn_dim``; an activation not listed above; a decoder
embedding with fewer rows than the output layer; a config asking for a variant that
``MarianMTModel`` does not implement (``normalize_before``, ``layernorm_embedding``,
``add_final_layer_norm``: pre-norm Marian models cannot be loaded into it either); and,
in ``to_marian``, a pre-norm model (``norm_first=True``).
"""
from __future__ import annotations

import warnings

import torch

from .model import Transformer

# Marian's activation_function -> ours, and back.
_FROM_MARIAN_ACTIVATION = {"relu": "relu", "gelu": "gelu", "swish": "silu",
                           "silu": "silu", "gelu_new": "gelu_tanh",
                           "gelu_pytorch_tanh": "gelu_tanh"}
_TO_MARIAN_ACTIVATION = {"relu": "relu", "gelu": "gelu", "silu": "swish",
                         "gelu_tanh": "gelu_pytorch_tanh"}
# Settings of related models (BART, FSMT, mBART) that MarianMTModel silently ignores.
_UNSUPPORTED_FLAGS = ("normalize_before", "layernorm_embedding", "add_final_layer_norm")

# Inside one layer: (Marian module, our module, how it meets the residual stream): "in"
# reads it (input columns), "out" writes it (output rows, bias), "norm" is a LayerNorm.
_ATTENTION = [(f"{p}_proj", f"{p}_proj", "in") for p in "qkv"] + [
    ("out_proj", "out_proj", "out")]
_FFN = [("fc1", "ffn.linear1", "in"), ("fc2", "ffn.linear2", "out")]
_ENCODER_LAYER = (
    [(f"self_attn.{m}", f"self_attn.{o}", side) for m, o, side in _ATTENTION]
    + [("self_attn_layer_norm", "norm1", "norm")]
    + _FFN + [("final_layer_norm", "norm2", "norm")]
)
_DECODER_LAYER = (
    [(f"self_attn.{m}", f"self_attn.{o}", side) for m, o, side in _ATTENTION]
    + [("self_attn_layer_norm", "norm1", "norm")]
    + [(f"encoder_attn.{m}", f"cross_attn.{o}", side) for m, o, side in _ATTENTION]
    + [("encoder_attn_layer_norm", "norm2", "norm")]
    + _FFN + [("final_layer_norm", "norm3", "norm")]
)


def marian_weight_map(num_encoder_layers: int, num_decoder_layers: int):
    """[(Marian name, our name, axis)] for every tensor that the conversions copy.

    ``axis`` is the tensor's d_model axis facing the residual stream (0 or 1), or None
    where it has none (a bias inside a layer, ``final_logits_bias``). Positional tables
    are not listed: they are not weights, each side computes its own.
    """
    pairs = [("model.encoder.embed_tokens.weight", "src_embed.embedding.weight", 1),
             ("model.decoder.embed_tokens.weight", "tgt_embed.embedding.weight", 1),
             ("lm_head.weight", "generator.weight", 1),
             ("final_logits_bias", "generator.bias", None)]
    for stack, count, layer in (("encoder", num_encoder_layers, _ENCODER_LAYER),
                                ("decoder", num_decoder_layers, _DECODER_LAYER)):
        for i in range(count):
            for theirs, ours, side in layer:
                # weight (out, in) and bias (out,); a LayerNorm's are both (d_model,)
                axes = {"in": (1, None), "out": (0, 0), "norm": (0, 0)}[side]
                for kind, axis in zip(("weight", "bias"), axes):
                    pairs.append((f"model.{stack}.layers.{i}.{theirs}.{kind}",
                                  f"{stack}.layers.{i}.{ours}.{kind}", axis))
    return pairs


def _tensor(module, name):
    """The parameter or buffer ``name`` of ``module``, or None where it has none."""
    for get in (module.get_parameter, module.get_buffer):
        try:
            return get(name)
        except AttributeError:
            pass
    return None


# Embeddings whose number of rows (token ids) may differ between the two sides: see
# the module's notes on transformers 4 and 5.
_VOCABULARY_ROWS = {"model.encoder.embed_tokens.weight",
                    "model.decoder.embed_tokens.weight"}


@torch.no_grad()
def _copy(source, target, pairs, perm=None):
    """Copy ``pairs`` (source name, target name, axis) from ``source`` into ``target``;
    ``perm`` reorders the d_model axis: target coordinate j = source coordinate perm[j].

    An embedding in ``_VOCABULARY_ROWS`` copies the rows both sides have; the target's
    extra rows (ids the source has no row for) become zeros.
    """
    for src_name, dst_name, axis in pairs:
        src, dst = _tensor(source, src_name), _tensor(target, dst_name)
        if src is None or dst is None:
            # Only the output bias is optional: ours may have none.
            if {src_name, dst_name} != {"final_logits_bias", "generator.bias"}:
                raise ValueError(f"cannot copy {src_name} to {dst_name}: one is absent")
            if dst is not None:  # no bias in ours: Marian's is zeros
                dst.zero_()
            continue
        if _VOCABULARY_ROWS & {src_name, dst_name}:
            rows = min(src.size(0), dst.size(0))
            dst[rows:].zero_()
            src, dst = src[:rows], dst[:rows]
        src = src.reshape(dst.shape)  # final_logits_bias is (1, V), generator.bias (V,)
        if perm is not None and axis is not None:
            src = src.index_select(axis, perm.to(src.device))
        dst.copy_(src)


def _marian_classes():
    try:
        from transformers import MarianConfig, MarianMTModel
    except ImportError as error:
        raise ImportError("from_marian and to_marian need Hugging Face transformers: "
                          "pip install 'transformer_lib[hf]'") from error
    return MarianConfig, MarianMTModel


def _embeddings(hf_model):
    """The encoder embedding, decoder embedding and output weights: (rows, d_model)."""
    return (hf_model.model.encoder.embed_tokens.weight,
            hf_model.model.decoder.embed_tokens.weight, hf_model.lm_head.weight)


def _check_representable(config) -> None:
    for flag in _UNSUPPORTED_FLAGS:
        if getattr(config, flag, False):
            value = getattr(config, flag)
            raise ValueError(f"hf_model's config sets {flag}={value!r}, a variant that "
                             "MarianMTModel does not implement")
    for name in ("attention_heads", "ffn_dim"):
        enc = getattr(config, f"encoder_{name}")
        dec = getattr(config, f"decoder_{name}")
        if enc != dec:
            raise ValueError(f"tl.Transformer needs encoder_{name} == decoder_{name}, "
                             f"got {enc} and {dec}")
    if config.activation_function not in _FROM_MARIAN_ACTIVATION:
        raise ValueError(f"activation_function must be one of "
                         f"{sorted(_FROM_MARIAN_ACTIVATION)}, "
                         f"got {config.activation_function!r}")
    if config.pad_token_id is None:
        raise ValueError("tl.Transformer needs a pad id, got pad_token_id=None")


def _shares_embeddings(hf_model) -> bool:
    """True if encoder, decoder and output embeddings are one tensor. False otherwise,
    with a warning where two of the three are one: the copy has three matrices."""
    enc, dec, out = _embeddings(hf_model)
    if enc is dec is out:
        return True
    pairs = {"encoder embedding and decoder embedding": enc is dec,
             "decoder embedding and output layer": dec is out,
             "encoder embedding and output layer": enc is out}
    for names in (names for names, tied in pairs.items() if tied):
        config = hf_model.config
        warnings.warn(
            f"hf_model ties its {names} but not all three "
            "(share_encoder_decoder_embeddings="
            f"{config.share_encoder_decoder_embeddings}, tie_word_embeddings="
            f"{config.tie_word_embeddings}); tl.Transformer ties all three or none, so "
            "the copy holds the same values in three matrices: equal logits, but "
            "training it will not keep them tied", UserWarning, stacklevel=3)
    return False


def from_marian(hf_model) -> Transformer:
    """A ``tl.Transformer`` that computes what ``hf_model``, a ``MarianMTModel``, does.

    Decode it with ``bos_id=hf_model.config.decoder_start_token_id`` and
    ``eos_id=hf_model.config.eos_token_id``. The copy has the same dtype, device and
    training mode; its weights are Marian's as they are (``interleaved_pe=False``).
    """
    _, MarianMTModel = _marian_classes()
    if not isinstance(hf_model, MarianMTModel):
        raise TypeError(f"hf_model must be a transformers.MarianMTModel, got "
                        f"{type(hf_model).__name__}")
    config = hf_model.config
    _check_representable(config)
    bias = hf_model.final_logits_bias
    encoder_rows, decoder_rows, tgt_vocab = (w.size(0) for w in _embeddings(hf_model))
    if decoder_rows < tgt_vocab or bias.numel() != tgt_vocab:
        raise ValueError(
            f"hf_model's output layer has {tgt_vocab} rows, but its decoder embedding "
            f"has {decoder_rows} and its final_logits_bias {bias.numel()}: every id it "
            "emits must have an embedding row and a bias")
    model = Transformer(
        encoder_rows, tgt_vocab,
        d_model=config.d_model, num_heads=config.encoder_attention_heads,
        num_encoder_layers=config.encoder_layers,
        num_decoder_layers=config.decoder_layers,
        d_ff=config.encoder_ffn_dim, dropout=float(config.dropout),
        max_len=config.max_position_embeddings, pad_id=config.pad_token_id,
        share_embeddings=_shares_embeddings(hf_model),
        activation=_FROM_MARIAN_ACTIVATION[config.activation_function],
        scale_embedding=bool(config.scale_embedding), output_bias=bool(bias.any()),
        interleaved_pe=False,
    )
    table = hf_model.model.encoder.embed_positions.weight  # (max_len, d_model)
    if not torch.allclose(table.detach().float().cpu(), model.pos_enc.table, atol=1e-3):
        raise ValueError("hf_model's positional table is not Marian's sinusoidal table")
    model.to(device=bias.device, dtype=hf_model.lm_head.weight.dtype)
    pairs = marian_weight_map(config.encoder_layers, config.decoder_layers)
    _copy(hf_model, model, pairs)
    return model.train(hf_model.training)


def _check_built(hf_model, rows: int, tgt_vocab: int, shared: bool) -> None:
    """Raise unless ``hf_model`` has the embeddings ``to_marian`` asked for: ``rows``
    source rows, a row for every target id, ``tgt_vocab`` outputs, all tied or none."""
    enc, dec, out = _embeddings(hf_model)
    ties = {enc is dec, dec is out, enc is out}
    sizes = enc.size(0), dec.size(0), out.size(0)
    if sizes[0] != rows or sizes[2] != tgt_vocab or sizes[1] < tgt_vocab or (
            ties != {shared}):
        import transformers

        raise RuntimeError(
            f"transformers {transformers.__version__} built a MarianMTModel whose "
            f"embeddings have {sizes} rows and ties {sorted(ties)}; to_marian needs "
            f"({rows}, >= {tgt_vocab}, {tgt_vocab}) and ties [{shared}]")


def to_marian(model: Transformer, bos_id: int | None = None, eos_id: int | None = None):
    """A ``transformers.MarianMTModel`` that computes what ``model`` computes.

    ``bos_id`` becomes Marian's ``decoder_start_token_id`` (default: ``model.pad_id``,
    as in Marian) and ``eos_id`` its ``eos_token_id``. The generation config mirrors
    ``tl.greedy_decode``: start from ``bos_id``, never emit the pad token, stop at
    ``eos_id``. Same dtype, device and training mode as ``model``; the global random
    state is left as it was.
    """
    MarianConfig, MarianMTModel = _marian_classes()
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a tl.Transformer, got {type(model).__name__}")
    cfg = model.config
    if cfg["norm_first"]:
        raise ValueError("MarianMTModel is post-norm, got a model with norm_first=True")
    pad, shared, dropout = cfg["pad_id"], cfg["share_embeddings"], float(cfg["dropout"])
    bos = pad if bos_id is None else bos_id
    src_vocab, tgt_vocab = cfg["src_vocab_size"], cfg["tgt_vocab_size"]
    # transformers 4 gives the decoder embedding vocab_size rows: make room for ours
    # there, and on 5 too, so that both versions write the same shapes where they can
    rows = max(src_vocab, tgt_vocab)
    config = MarianConfig(
        vocab_size=rows, decoder_vocab_size=tgt_vocab,
        d_model=cfg["d_model"], encoder_layers=cfg["num_encoder_layers"],
        decoder_layers=cfg["num_decoder_layers"],
        encoder_attention_heads=cfg["num_heads"],
        decoder_attention_heads=cfg["num_heads"], encoder_ffn_dim=cfg["d_ff"],
        decoder_ffn_dim=cfg["d_ff"], max_position_embeddings=cfg["max_len"],
        activation_function=_TO_MARIAN_ACTIVATION[cfg["activation"]],
        dropout=dropout, attention_dropout=dropout, activation_dropout=dropout,
        scale_embedding=cfg["scale_embedding"], pad_token_id=pad,
        decoder_start_token_id=bos, eos_token_id=eos_id, forced_eos_token_id=None,
        share_encoder_decoder_embeddings=shared, tie_word_embeddings=shared,
    )
    # Its random initialisation is overwritten below. Keep the global random state as it
    # was (transformers 4 and 5 draw different amounts), so that seeded code after
    # to_marian draws the same numbers on either version.
    with torch.random.fork_rng(devices=[]):
        hf_model = MarianMTModel(config)
    _check_built(hf_model, rows, tgt_vocab, shared)
    generation = hf_model.generation_config
    generation.decoder_start_token_id, generation.pad_token_id = bos, pad
    generation.eos_token_id, generation.forced_eos_token_id = eos_id, None
    generation.bad_words_ids = [[pad]]  # as in our decoding: padding is never an output
    weight = model.generator.weight
    hf_model.to(device=weight.device, dtype=weight.dtype)
    perm = None
    if cfg["interleaved_pe"]:  # Marian's table is ours[:, perm]: even columns, then odd
        d_model = cfg["d_model"]
        perm = torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])
    pairs = marian_weight_map(cfg["num_encoder_layers"], cfg["num_decoder_layers"])
    _copy(model, hf_model, [(ours, theirs, axis) for theirs, ours, axis in pairs], perm)
    return hf_model.train(model.training)
