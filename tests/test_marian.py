"""from_marian / to_marian: Hugging Face Marian models and tl.Transformer agree.

Every Marian model here is a small one built from a ``MarianConfig``: nothing is
downloaded (``HF_HUB_OFFLINE=1``). Logits are compared on batches padded in the source
and in the target; decoding is compared with ``MarianMTModel.generate``.
"""
from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import torch
from torch.nn import functional as F

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # set before importing transformers

import transformer_lib as tl  # noqa: E402
from transformer_lib.decoding import length_penalty_power  # noqa: E402
from transformer_lib.interop import (  # noqa: E402
    from_marian, marian_weight_map, to_marian)
from conftest import need  # noqa: E402

try:
    import transformers
    from transformers import MarianConfig, MarianMTModel
except ImportError:  # the tests below then skip (or fail under TT_REQUIRE_ALL=1)
    transformers = None

# A model tying two of its three embeddings loads with a warning, tested on its own.
pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.filterwarnings("ignore:hf_model ties its:UserWarning")]

TOLERANCE = 2e-4  # largest absolute logit difference allowed, float32
EOS = 0


def _major():
    """transformers' major version: 4 and 5 read some MarianConfig settings
    differently."""
    return int(transformers.__version__.split(".")[0])


def _embeddings(hf_model):
    return (hf_model.model.encoder.embed_tokens.weight,
            hf_model.model.decoder.embed_tokens.weight, hf_model.lm_head.weight)


@pytest.fixture(autouse=True)
def _transformers():
    need(transformers is not None,
         "transformers is not installed (pip install 'transformer_lib[hf]')")
    transformers.logging.set_verbosity_error()


def _config(**overrides):
    """A small MarianConfig, with Marian's conventions: pad is the last id and starts
    decoding."""
    settings = dict(vocab_size=40, d_model=16, encoder_layers=2, decoder_layers=2,
                    encoder_attention_heads=4, decoder_attention_heads=4,
                    encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
                    pad_token_id=39, decoder_start_token_id=39, eos_token_id=EOS,
                    forced_eos_token_id=None, activation_function="swish",
                    scale_embedding=True)
    settings.update(overrides)
    return MarianConfig(**settings)


def _randomise(module, skip=("embed_positions",)):
    """Move every weight (LayerNorms start at 1 and 0, biases at 0), so a misplaced one
    shows; Marian's positional table stays as it is."""
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if not any(s in name for s in skip):
                p.add_(0.3 * torch.randn_like(p))
    return module.eval()


def _marian(seed=0, **overrides):
    torch.manual_seed(seed)
    model = MarianMTModel(_config(**overrides))
    _randomise(model)
    with torch.no_grad():
        model.final_logits_bias.normal_()
    return model


def _batch(src_vocab, tgt_vocab, pad, start):
    """src (4, 7) and tgt_in (4, 6), both padded; tgt_in starts with ``start``."""
    generator = torch.Generator().manual_seed(1)
    low = 1  # never EOS (0); ids are redrawn where they hit the pad id
    src = torch.randint(low, src_vocab, (4, 7), generator=generator)
    tgt = torch.randint(low, tgt_vocab, (4, 6), generator=generator)
    src[src == pad], tgt[tgt == pad] = low, low
    for row, n in enumerate([7, 3, 5, 1]):
        src[row, n:] = pad
    for row, n in enumerate([6, 2, 4, 3]):
        tgt[row, n:] = pad
    tgt[:, 0] = start
    return src, tgt


@torch.no_grad()
def _marian_logits(hf_model, src, tgt_in):
    """Marian's logits with the masks our model uses: padded source keys, and padded
    target keys after position 0 (the start token, which may be the pad id)."""
    pad = hf_model.config.pad_token_id
    target_mask = tgt_in != pad
    target_mask[:, 0] = True
    return hf_model(input_ids=src, attention_mask=(src != pad).long(),
                    decoder_input_ids=tgt_in,
                    decoder_attention_mask=target_mask.long()).logits


def _max_diff(hf_model, ours, src, tgt_in):
    with torch.no_grad():
        difference = _marian_logits(hf_model, src, tgt_in) - ours(src, tgt_in)
    return difference.abs().max().item()


# ------------------------------------------------------------------------------------
# Marian -> tl.Transformer -> Marian: equal logits
# ------------------------------------------------------------------------------------

MARIAN_CONFIGS = {
    "swish-tied-scaled": dict(encoder_layers=2, decoder_layers=1),
    "gelu-unscaled": dict(activation_function="gelu", scale_embedding=False, d_model=32,
                          encoder_attention_heads=2, decoder_attention_heads=2,
                          encoder_ffn_dim=64, decoder_ffn_dim=64, encoder_layers=1),
    "relu-two-vocabularies": dict(activation_function="relu", vocab_size=40,
                                  decoder_vocab_size=27, pad_token_id=26,
                                  decoder_start_token_id=26,
                                  share_encoder_decoder_embeddings=False,
                                  tie_word_embeddings=False, d_model=32,
                                  encoder_attention_heads=8, decoder_attention_heads=8,
                                  encoder_layers=3, decoder_layers=3),
    "gelu_new-odd-d_model": dict(activation_function="gelu_new", d_model=15,
                                 encoder_attention_heads=3, decoder_attention_heads=3,
                                 encoder_ffn_dim=20, decoder_ffn_dim=20),
    "pad-0-untied-lm-head": dict(activation_function="gelu_pytorch_tanh",
                                 pad_token_id=0, decoder_start_token_id=0,
                                 eos_token_id=1, tie_word_embeddings=False),
}


def _marian_and_batch(name):
    hf_model = _marian(**MARIAN_CONFIGS[name])
    config = hf_model.config
    batch = _batch(config.vocab_size, config.decoder_vocab_size, config.pad_token_id,
                   config.decoder_start_token_id)
    return hf_model, batch


@pytest.mark.parametrize("name", sorted(MARIAN_CONFIGS))
def test_from_marian_gives_equal_logits(name):
    hf_model, (src, tgt_in) = _marian_and_batch(name)
    ours = from_marian(hf_model)
    assert not ours.training and ours.config["interleaved_pe"] is False
    assert ours.config["output_bias"] is True  # final_logits_bias was randomised
    assert _max_diff(hf_model, ours, src, tgt_in) <= TOLERANCE


@pytest.mark.parametrize("name", sorted(MARIAN_CONFIGS))
def test_marian_round_trip_copies_every_weight_back(name):
    hf_model, (src, tgt_in) = _marian_and_batch(name)
    back = to_marian(from_marian(hf_model), eos_id=hf_model.config.eos_token_id)
    theirs, again = hf_model.state_dict(), back.state_dict()
    # share_encoder_decoder_embeddings=True, tie_word_embeddings=False has a
    # `model.shared` (used in transformers 4, not in 5); the untied copy has none
    assert set(theirs) - set(again) <= {"model.shared.weight"}
    assert set(again) <= set(theirs)
    targets = theirs["lm_head.weight"].size(0)
    for key, value in again.items():
        assert value.shape == theirs[key].shape, key
        if key == "model.decoder.embed_tokens.weight":
            # transformers 4 gives it vocab_size rows; no target id reaches those past
            # the output layer's, which the copy fills with zeros
            assert not value[targets:].any()
            value, theirs[key] = value[:targets], theirs[key][:targets]
        assert torch.equal(value, theirs[key]), key
    assert _max_diff(back, from_marian(hf_model), src, tgt_in) <= TOLERANCE


def test_marian_tying_becomes_ours():
    tied = from_marian(_marian())
    assert tied.src_embed is tied.tgt_embed
    assert tied.generator.weight is tied.src_embed.weight
    untied = from_marian(_marian(**MARIAN_CONFIGS["relu-two-vocabularies"]))
    sizes = untied.config["src_vocab_size"], untied.config["tgt_vocab_size"]
    assert sizes == (40, 27)
    assert untied.generator.weight is not untied.tgt_embed.weight


@pytest.mark.parametrize("share, tie", [(True, False), (False, True)])
def test_marian_tying_two_of_three_loads_untied_with_equal_logits(share, tie):
    """transformers 4 shares the encoder and decoder embeddings with share=True,
    tie=False (5 unties all three); both tie the decoder embedding and lm_head with
    share=False, tie=True. Two tied of three load as three matrices with a warning."""
    hf_model = _marian(**MARIAN_CONFIGS["swish-tied-scaled"],
                       share_encoder_decoder_embeddings=share, tie_word_embeddings=tie)
    enc, dec, out = _embeddings(hf_model)
    assert (enc is dec, dec is out, enc is out) == (
        (_major() < 5, False, False) if share else (False, True, False))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = from_marian(hf_model)
    warned = [str(w.message) for w in caught if "but not all three" in str(w.message)]
    tied = ("encoder embedding and decoder embedding" if enc is dec else
            "decoder embedding and output layer" if dec is out else None)
    assert [f"ties its {tied} but" in message for message in warned] == (
        [True] if tied else [])
    weights = ours.src_embed.weight, ours.tgt_embed.weight, ours.generator.weight
    assert ours.config["share_embeddings"] is False
    assert len({id(w) for w in weights}) == 3
    for mine, theirs in zip(weights, (enc, dec, out)):
        assert torch.equal(mine, theirs)
    src, tgt_in = _batch(40, 40, pad=39, start=39)
    assert _max_diff(hf_model, ours, src, tgt_in) <= TOLERANCE


def test_marian_positional_table_is_ours_with_sines_first():
    for d_model, heads in ((16, 4), (15, 3)):
        hf_model = MarianMTModel(_config(d_model=d_model, encoder_attention_heads=heads,
                                         decoder_attention_heads=heads))
        table = hf_model.model.encoder.embed_positions.weight
        sines_first = tl.sinusoidal_table(64, d_model, interleaved=False)
        torch.testing.assert_close(table, sines_first, atol=1e-5, rtol=0)
        assert not torch.allclose(table, tl.sinusoidal_table(64, d_model), atol=0.1)


def test_zero_final_logits_bias_gives_no_output_bias():
    hf_model = _marian()
    with torch.no_grad():
        hf_model.final_logits_bias.zero_()
    ours = from_marian(hf_model)
    assert ours.generator.bias is None and ours.config["output_bias"] is False


# ------------------------------------------------------------------------------------
# tl.Transformer -> Marian: equal logits, including the paper's interleaved table
# ------------------------------------------------------------------------------------

OUR_CONFIGS = {
    "paper-interleaved-tied": dict(share_embeddings=True),
    "gelu-unscaled-bias-two-vocabularies": dict(
        tgt_vocab_size=23, activation="gelu", scale_embedding=False, output_bias=True),
    "silu-odd-d_model": dict(d_model=15, num_heads=3, activation="silu"),
    "sines-first": dict(interleaved_pe=False, activation="gelu_tanh",
                        num_decoder_layers=3),
    "relu-larger-target-vocabulary": dict(src_vocab_size=17, activation="relu"),
}


def _ours(name):
    settings = dict(src_vocab_size=31, tgt_vocab_size=31, d_model=16, num_heads=4,
                    num_encoder_layers=2, num_decoder_layers=1, d_ff=24, dropout=0.1,
                    max_len=40, pad_id=0)
    settings.update(OUR_CONFIGS[name])
    torch.manual_seed(0)
    return _randomise(tl.Transformer(**settings), skip=())


@pytest.mark.parametrize("name", sorted(OUR_CONFIGS))
def test_to_marian_gives_equal_logits(name):
    ours = _ours(name)
    hf_model = to_marian(ours, bos_id=1, eos_id=2)
    cfg = ours.config
    src, tgt_in = _batch(cfg["src_vocab_size"], cfg["tgt_vocab_size"], pad=0, start=1)
    assert not hf_model.training and hf_model.config.decoder_start_token_id == 1
    assert _max_diff(hf_model, ours, src, tgt_in) <= TOLERANCE
    # and back: the same function again (the weights are reordered if ours interleaved)
    assert _max_diff(hf_model, from_marian(hf_model), src, tgt_in) <= TOLERANCE


@pytest.mark.parametrize("name", sorted(OUR_CONFIGS))
def test_to_marian_builds_the_embeddings_each_transformers_version_reads(name):
    """Read from the built tensors: transformers 5 gives the decoder embedding
    decoder_vocab_size rows, transformers 4 vocab_size rows, so to_marian makes
    vocab_size the larger vocabulary and fills the rows of ids ours lacks with zeros."""
    ours = _ours(name)
    cfg = ours.config
    src, tgt, d_model = cfg["src_vocab_size"], cfg["tgt_vocab_size"], cfg["d_model"]
    hf_model = to_marian(ours)
    enc, dec, out = _embeddings(hf_model)
    rows = max(src, tgt)
    assert hf_model.config.vocab_size == rows
    assert (enc.size(0), dec.size(0), out.size(0)) == (
        rows, rows if _major() < 5 else tgt, tgt)
    perm = torch.arange(d_model)
    if cfg["interleaved_pe"]:
        perm = torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])
    assert torch.equal(enc[:src], ours.src_embed.weight[:, perm])
    assert torch.equal(dec[:tgt], ours.tgt_embed.weight[:, perm])
    assert torch.equal(out, ours.generator.weight[:, perm])
    assert not enc[src:].any() and not dec[tgt:].any()
    tied = {enc is dec, dec is out, enc is out}
    assert tied == {cfg["share_embeddings"]}


def test_to_marian_leaves_the_random_state_alone():
    """Seeded code after to_marian draws the same numbers on any transformers version
    (4 and 5 initialise MarianMTModel with different numbers of draws)."""
    ours = _ours("sines-first")
    before = torch.random.get_rng_state()
    to_marian(ours)
    assert torch.equal(torch.random.get_rng_state(), before)


def test_to_marian_reorders_the_coordinates_of_an_interleaved_model():
    """Marian's table is ours with the even columns first: every weight that meets the
    residual stream is reordered the same way (this is what makes the logits equal)."""
    ours = _ours("paper-interleaved-tied")
    hf_model = to_marian(ours)
    perm = torch.cat([torch.arange(0, 16, 2), torch.arange(1, 16, 2)])
    layer, theirs = ours.encoder.layers[0], hf_model.model.encoder.layers[0]
    assert torch.equal(hf_model.model.shared.weight, ours.src_embed.weight[:, perm])
    q_proj = layer.self_attn.q_proj
    assert torch.equal(theirs.self_attn.q_proj.weight, q_proj.weight[:, perm])
    assert torch.equal(theirs.self_attn.q_proj.bias, layer.self_attn.q_proj.bias)
    assert torch.equal(theirs.fc2.weight, layer.ffn.linear2.weight[perm])
    assert torch.equal(theirs.final_layer_norm.bias, layer.norm2.bias[perm])
    unordered = to_marian(_ours("sines-first"))  # nothing to reorder
    assert torch.equal(unordered.model.encoder.embed_tokens.weight,
                       _ours("sines-first").src_embed.weight)


def test_to_marian_of_a_number_translator_checkpoint_model():
    """A subclass of tl.Transformer (the capstone's NumberTranslator) converts too."""
    pytest.importorskip("num2words")
    from transformer_lib.data import Vocab
    from transformer_lib.examples.number_words import NumberTranslator

    src_vocab = Vocab(["one", "two", "three"])
    tgt_vocab = Vocab(["eins", "zwei", "drei", "und"])
    torch.manual_seed(0)
    model = NumberTranslator(src_vocab, tgt_vocab, "de", d_model=16, num_heads=2,
                             num_encoder_layers=1, num_decoder_layers=1, d_ff=32,
                             max_len=16).eval()
    hf_model = to_marian(model, bos_id=Vocab.bos_id, eos_id=Vocab.eos_id)
    src, tgt_in = _batch(len(src_vocab), len(tgt_vocab), pad=Vocab.pad_id,
                         start=Vocab.bos_id)
    assert _max_diff(hf_model, model, src, tgt_in) <= TOLERANCE


@pytest.mark.parametrize("name", ["gelu-unscaled-bias-two-vocabularies",
                                  "relu-larger-target-vocabulary"])
def test_save_pretrained_directory_round_trips(tmp_path, name):
    """Two vocabularies, smaller and larger target: on transformers 4 the decoder
    embedding (and, for a larger target, the encoder's) has the rows that version's
    from_pretrained expects."""
    ours = _ours(name)
    to_marian(ours, bos_id=1, eos_id=2).save_pretrained(tmp_path)
    loaded = MarianMTModel.from_pretrained(tmp_path)  # a local directory: no download
    assert loaded.generation_config.bad_words_ids == [[0]]
    assert loaded.generation_config.decoder_start_token_id == 1
    assert loaded.generation_config.eos_token_id == 2
    again = from_marian(loaded)
    src, tgt_in = _batch(ours.config["src_vocab_size"], ours.config["tgt_vocab_size"],
                         pad=0, start=1)
    with torch.no_grad():
        difference = (again(src, tgt_in) - ours(src, tgt_in)).abs().max().item()
    assert difference <= TOLERANCE
    assert _max_diff(loaded, ours, src, tgt_in) <= TOLERANCE


@pytest.mark.skipif(tl.get_device().type == "cpu", reason="no accelerator here")
def test_conversions_keep_the_device():
    device = tl.get_device()
    hf_model, (src, tgt_in) = _marian_and_batch("swish-tied-scaled")
    expected = _marian_logits(hf_model, src, tgt_in)
    ours = from_marian(hf_model.to(device))
    assert ours.generator.weight.device.type == device.type
    back = to_marian(ours)
    assert back.lm_head.weight.device.type == device.type
    with torch.no_grad():
        logits = ours(src.to(device), tgt_in.to(device)).cpu()
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-4)
    logits = _marian_logits(back, src.to(device), tgt_in.to(device)).cpu()
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-4)


# ------------------------------------------------------------------------------------
# Decoding: generate() and our greedy decoding and beam search
# ------------------------------------------------------------------------------------

V, PAD = 20, 19  # the trained model's vocabulary; pad: the last id, starts decoding


def _reversal_pairs(n, generator):
    """Sources of 1..8 ids in [3, PAD); targets: reversed + EOS; decoder inputs start
    with PAD."""
    lengths = torch.randint(1, 9, (n,), generator=generator)
    src = torch.randint(3, PAD, (n, 8), generator=generator)
    src[torch.arange(8) >= lengths[:, None]] = PAD
    tgt = torch.full((n, 9), PAD)
    for row, length in enumerate(lengths.tolist()):
        tgt[row, :length] = src[row, :length].flip(0)
        tgt[row, length] = EOS
    tgt_in = torch.cat([torch.full((n, 1), PAD), tgt[:, :-1]], dim=1)
    return src, tgt_in, tgt


@pytest.fixture(scope="module")
def trained():
    """A model trained briefly (80 steps, a few seconds) to reverse sequences,
    Marian-style (start from the pad id): imperfect, so its outputs vary in content
    and length.
    Returns (ours, to_marian(ours), held-out sources)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = tl.Transformer(V, V, d_model=32, num_heads=4, num_encoder_layers=2,
                           num_decoder_layers=2, d_ff=64, dropout=0.0, max_len=16,
                           pad_id=PAD, share_embeddings=True, activation="silu")
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(80):
        src, tgt_in, tgt = _reversal_pairs(64, generator)
        loss = tl.masked_cross_entropy(model(src, tgt_in), tgt, pad_id=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    torch.set_num_threads(before)
    model.eval()
    sources = _reversal_pairs(32, torch.Generator().manual_seed(5))[0]
    return model, to_marian(model, eos_id=EOS), sources


def _until_eos(row):
    """The generated tokens of one output row, up to and including EOS."""
    tokens = []
    for token in row.tolist()[1:]:
        tokens.append(token)
        if token == EOS:
            break
    return tokens


def _generate(hf_model, src, **options):
    mask = (src != PAD).long()
    return hf_model.generate(input_ids=src, attention_mask=mask, **options)


def test_generate_greedy_equals_greedy_decode(trained):
    """The same ids, padding after EOS included (generate pads finished rows too), from
    our model and from its copy back from Marian, cached or not. to_marian's generation
    config (start from the pad id, never emit it, stop at EOS) needs no extras."""
    ours, hf_model, src = trained
    theirs = _generate(hf_model, src, num_beams=1, do_sample=False, max_new_tokens=10)
    for model in (ours, from_marian(hf_model)):
        for use_cache in (True, False):
            mine = tl.greedy_decode(model, src, 10, bos_id=PAD, eos_id=EOS,
                                    use_cache=use_cache)
            assert torch.equal(mine, theirs)  # all 32 sequences identical
    lengths = {len(_until_eos(row)) for row in theirs}
    assert len(lengths) >= 5  # the outputs stop at many different lengths


def test_generate_greedy_with_a_start_token_that_is_not_pad():
    torch.manual_seed(3)
    ours = tl.Transformer(12, 12, d_model=16, num_heads=2, num_encoder_layers=1,
                          num_decoder_layers=1, d_ff=32, max_len=20, output_bias=True)
    _randomise(ours, skip=())
    with torch.no_grad():
        ours.generator.bias[2] = 1.0  # EOS (id 2) sooner
    hf_model = to_marian(ours, bos_id=1, eos_id=2)
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(3, 12, (8, 6), generator=generator)
    src[4:, 3:] = 0  # padding
    theirs = hf_model.generate(input_ids=src, attention_mask=(src != 0).long(),
                               max_new_tokens=10)
    assert torch.equal(theirs, tl.greedy_decode(ours, src, 10, bos_id=1, eos_id=2))


@pytest.mark.parametrize("beam_size, alpha", [(2, 0.6), (4, 1.0), (3, 2.0)])
def test_beam_search_equals_generate_without_eos(beam_size, alpha):
    """Where no hypothesis can finish early, the two beam searches are one algorithm."""
    hf_model = _marian(0, d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64)
    with torch.no_grad():
        hf_model.final_logits_bias[0, EOS] = -1e4  # EOS impossible
    ours = from_marian(hf_model)
    src = _batch(40, 40, pad=39, start=39)[0]
    theirs = hf_model.generate(input_ids=src, attention_mask=(src != 39).long(),
                               num_beams=beam_size, length_penalty=alpha,
                               do_sample=False, max_new_tokens=10, bad_words_ids=[[39]])
    mine = tl.beam_search(ours, src, beam_size, 10, bos_id=39, eos_id=EOS,
                          length_penalty=alpha, length_penalty_fn=length_penalty_power)
    assert torch.equal(mine, theirs)


def _score(model, src_row, tokens, alpha):
    """sum of log-probabilities / |Y| ** alpha (Hugging Face's length penalty)."""
    tgt_in = torch.tensor([[PAD] + tokens[:-1]])
    with torch.no_grad():
        log_probs = F.log_softmax(model(src_row[None], tgt_in)[0], dim=-1)  # (|Y|, V)
    total = log_probs[torch.arange(len(tokens)), torch.tensor(tokens)].sum()
    return (total / length_penalty_power(torch.tensor(len(tokens)), alpha)).item()


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
def test_generate_sequence_scores_use_the_power_length_penalty(trained, alpha):
    """Hugging Face's ``sequences_scores`` is sum log p / |Y| ** alpha, |Y| counting
    EOS: ``length_penalty_power`` computes exactly that."""
    ours, hf_model, src = trained
    out = _generate(hf_model, src, num_beams=3, length_penalty=alpha, max_new_tokens=10,
                    return_dict_in_generate=True, output_scores=True)
    for row, src_row, score in zip(out.sequences, src, out.sequences_scores):
        assert _score(ours, src_row, _until_eos(row), alpha) == pytest.approx(
            score.item(), abs=1e-4)


def _plain_beam_search(hf_model, src, beam_size, alpha, early_stopping):
    """generate() running nothing but beam search. Each setting is spelled out, whatever
    the model's generation config holds (Marian checkpoints ship some of these): no
    sampling, no forced EOS at max_length (``forced_eos_token_id``), no minimum length
    (it would ban EOS), no n-gram or repetition rule (they change log-probabilities),
    padding banned as our decoding bans it (``bad_words_ids``), one sequence returned."""
    return _generate(hf_model, src, num_beams=beam_size, length_penalty=alpha,
                     early_stopping=early_stopping, max_new_tokens=10, do_sample=False,
                     num_return_sequences=1, forced_eos_token_id=None,
                     forced_bos_token_id=None, min_length=0, no_repeat_ngram_size=0,
                     repetition_penalty=1.0, bad_words_ids=[[PAD]])


@pytest.mark.parametrize("beam_size", [2, 3, 5])
def test_beam_search_equals_generate(trained, beam_size):
    """Ours with Hugging Face's length penalty (|Y| ** alpha, |Y| counting EOS) and its
    stopping rule gives generate()'s tokens exactly, padding included: 32 padded sources
    of 1 to 8 ids, each alpha, each ``early_stopping``."""
    ours, hf_model, src = trained
    greedy = tl.greedy_decode(ours, src, 10, bos_id=PAD, eos_id=EOS)
    not_greedy = 0
    by_rule = {}
    for alpha in (0.0, 0.6, 1.5):
        for early_stopping in (True, False, "never"):
            theirs = _plain_beam_search(hf_model, src, beam_size, alpha, early_stopping)
            by_rule[alpha, early_stopping] = [_until_eos(row) for row in theirs]
            mine, scores = tl.beam_search(
                ours, src, beam_size, 10, bos_id=PAD, eos_id=EOS, length_penalty=alpha,
                length_penalty_fn=length_penalty_power, early_stopping=early_stopping,
                return_scores=True)
            assert torch.equal(mine, theirs), (alpha, early_stopping)
            for src_row, row, score in zip(src, mine, scores):
                tokens = _until_eos(row)
                assert _score(ours, src_row, tokens, alpha) == pytest.approx(
                    score.item(), abs=1e-4)
            not_greedy += sum(_until_eos(a) != _until_eos(b) for a, b in zip(mine, greedy))
    assert not_greedy >= 100  # of 9 * 32: beam search often finds something else
    assert by_rule[1.5, True] != by_rule[1.5, "never"]  # the stopping rules matter


# ------------------------------------------------------------------------------------
# Refusals, and transformers stays optional
# ------------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, message", [
    (dict(decoder_attention_heads=2),
     r"encoder_attention_heads == decoder_attention_heads, got 4 and 2"),
    (dict(decoder_ffn_dim=48), r"encoder_ffn_dim == decoder_ffn_dim, got 32 and 48"),
    (dict(activation_function="tanh"), r"activation_function must be one of .*'tanh'"),
    (dict(normalize_before=True), r"normalize_before=True"),
    (dict(layernorm_embedding=True), r"layernorm_embedding=True"),
])
def test_from_marian_refuses_what_it_cannot_represent(overrides, message):
    with pytest.raises(ValueError, match=message):
        from_marian(MarianMTModel(_config(**overrides)))


def test_from_marian_refuses_output_ids_without_an_embedding_row():
    hf_model = MarianMTModel(_config(tie_word_embeddings=False))
    hf_model.lm_head = torch.nn.Linear(16, 41, bias=False)  # id 40 has no row
    message = ("output layer has 41 rows, but its decoder embedding has 40 and its "
               "final_logits_bias 40")
    with pytest.raises(ValueError, match=message):
        from_marian(hf_model)


def test_conversions_refuse_other_objects():
    message = "hf_model must be a transformers.MarianMTModel, got Transformer"
    with pytest.raises(TypeError, match=message):
        from_marian(_ours("sines-first"))
    message = "model must be a tl.Transformer, got MarianMTModel"
    with pytest.raises(TypeError, match=message):
        to_marian(_marian())
    pre_norm = tl.Transformer(10, 10, d_model=8, num_heads=2, num_encoder_layers=1,
                              num_decoder_layers=1, d_ff=16, norm_first=True)
    with pytest.raises(ValueError, match="MarianMTModel is post-norm, got a model with "
                                         "norm_first=True"):
        to_marian(pre_norm)


def test_weight_map_covers_every_parameter_once():
    ours = _ours("gelu-unscaled-bias-two-vocabularies")
    hf_model = to_marian(ours)
    pairs = marian_weight_map(2, 1)
    our_names = {name for name, _ in ours.named_parameters()}
    their_names = {name for name, p in hf_model.named_parameters()
                   if "embed_positions" not in name} | {"final_logits_bias"}
    assert {ours_name for _, ours_name, _ in pairs} == our_names
    assert {theirs for theirs, _, _ in pairs} == their_names


def test_import_transformer_lib_does_not_import_transformers():
    code = ("import sys, transformer_lib, transformer_lib.interop, "
            "transformer_lib.marian; sys.exit('transformers' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_missing_transformers_gives_a_clear_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # importing it now fails
    with pytest.raises(ImportError, match=r"pip install 'transformer_lib\[hf\]'"):
        to_marian(_ours("sines-first"))
