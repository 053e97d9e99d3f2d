"""The recipe's knobs beyond RECIPE (issue 35): each off by default, each has its effect,
each is recorded in the run's settings that --resume compares; and what ``--minutes``
means on the CPU clock. Small corpora the tests write (no Ding here), a few steps each."""
from __future__ import annotations

import json

import pytest
import torch

import transformer_lib as tl
from transformer_lib.data import Corpus, SubwordTokenizer
from transformer_lib.translate import __main__ as command
from transformer_lib.translate import checkpoints
from transformer_lib.translate.pipeline import (
    DICT_TAG,
    TrainingData,
    WordDropout,
    dictionary_coverage,
    tagged,
    train_corpus,
)
from transformer_lib.translate.trainer import ResumeMismatch, check_resumable

from test_translate import OBJECTS, SUBJECTS, VERBS, sentences

WORDS = [("Hund", "dog"), ("Katze", "cat"), ("Haus", "house"), ("Baum", "tree"),
         ("Auto", "car"), ("Ball", "ball"), ("Tür", "door"), ("Mann", "man")] + \
    SUBJECTS + VERBS + OBJECTS  # 23 word and phrase pairs
TINY = dict(steps=4, preset="tiny", vocab_size=150, batch_size=16, device="cpu",
            progress=False, seed=0, log_every=1)


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def corpus_with_words(n: int = 50) -> Corpus:
    pairs = sentences(n + 10)
    return Corpus("little", "de", "en", train=pairs[:n], valid=pairs[n:n + 5],
                  test=pairs[n + 5:], extra_train=list(WORDS))


@pytest.fixture(scope="module")
def tokenizer():
    texts = [t for pair in sentences(60) + WORDS for t in pair]
    return SubwordTokenizer.train(texts, vocab_size=150, tags=["<2en>", "<2de>", DICT_TAG])


# ------------------------------------------------------------------------------------
# --minutes on the CPU clock: M minutes of N cores


@pytest.mark.parametrize("minutes, clock, threads, seconds", [
    (10, "cpu", 2, 1200), (10, "wall", 2, 600), (0.5, "cpu", 3, 90), (None, "cpu", 2, None)])
def test_budget_seconds_counts_minutes_of_threads_cores(minutes, clock, threads, seconds):
    assert command.budget_seconds(minutes, clock, threads) == seconds


@pytest.mark.parametrize("threads", [None, 3])
def test_the_command_trains_minutes_of_threads_cores(threads, monkeypatch, capsys, tmp_path):
    """The budget handed to train_corpus (stopped there: nothing is trained)."""
    seen = {}

    class Enough(Exception):
        pass

    def fake(corpus, **settings):
        seen.update(settings)
        raise Enough

    monkeypatch.setattr(command, "train_corpus", fake)
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{de}\t{en}\n" for de, en in sentences(40)), encoding="utf-8")
    words = ["train", "--corpus", "tsv", "--path", str(path), "--minutes", "0.5",
             "--clock", "cpu", "--out", str(tmp_path / "m.pt")]
    cores = threads or torch.get_num_threads()
    with pytest.raises(Enough):
        command.main(words + (["--threads", str(threads)] if threads else []))
    assert seen["max_seconds"] == 30 * cores and seen["clock"] == "cpu"
    assert f"0.5 minutes of {cores} cores, {30 * cores:g} s" in capsys.readouterr().out


def test_help_says_what_minutes_and_threads_mean(capsys):
    with pytest.raises(SystemExit):
        command.main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "M * 60 * threads seconds" in text and "torch.get_num_threads()" in text


# ------------------------------------------------------------------------------------
# Attention and activation dropout


def test_attention_and_activation_dropout_default_to_dropout():
    src = torch.randint(1, 30, (3, 7))
    tgt = torch.randint(1, 30, (3, 5))
    outputs = []
    for extra in ({}, {"attention_dropout": 0.3, "activation_dropout": 0.3}):
        torch.manual_seed(0)
        model = tl.Transformer(30, 30, d_model=16, num_heads=2, num_encoder_layers=2,
                               num_decoder_layers=2, d_ff=32, dropout=0.3, **extra).train()
        torch.manual_seed(1)
        outputs.append(model(src, tgt))
        if not extra:
            assert "attention_dropout" not in model.config  # the config it always had
    torch.testing.assert_close(outputs[0], outputs[1], rtol=0, atol=0)


def test_attention_and_activation_dropout_set_apart():
    model = tl.Transformer(30, 30, d_model=16, num_heads=2, num_encoder_layers=1,
                           num_decoder_layers=1, d_ff=32, dropout=0.3,
                           attention_dropout=0.0, activation_dropout=0.2)
    enc, dec = model.encoder.layers[0], model.decoder.layers[0]
    assert enc.self_attn.dropout == dec.self_attn.dropout == dec.cross_attn.dropout == 0.0
    assert enc.ffn.dropout.p == dec.ffn.dropout.p == 0.2
    assert enc.dropout1.p == dec.dropout3.p == model.pos_enc.dropout.p == 0.3
    assert model.config["attention_dropout"] == 0.0
    assert tl.Transformer(**model.config).config == model.config
    with pytest.raises(ValueError, match="attention_dropout"):
        tl.Transformer(30, 30, d_model=16, num_heads=2, attention_dropout=1.5)


def test_zero_attention_dropout_in_training_equals_no_dropout_there():
    """attention_dropout=0, activation_dropout=0: only the residual dropout draws."""
    src, tgt = torch.randint(1, 30, (2, 6)), torch.randint(1, 30, (2, 4))
    settings = dict(d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                    d_ff=32)
    torch.manual_seed(0)
    model = tl.Transformer(30, 30, dropout=0.0, **settings).eval()
    torch.manual_seed(0)
    apart = tl.Transformer(30, 30, dropout=0.0, attention_dropout=0.0,
                           activation_dropout=0.0, **settings).train()
    torch.testing.assert_close(model(src, tgt), apart(src, tgt), rtol=0, atol=0)


# ------------------------------------------------------------------------------------
# Word dropout


def test_word_dropout_replaces_source_tokens_but_not_padding_eos_or_tags():
    src = torch.tensor([[4, 9, 10, 11, 2, 0], [5, 12, 13, 2, 0, 0]])
    tgt = torch.tensor([[1, 9, 2]])
    torch.manual_seed(0)
    dropped, same = WordDropout(0.9, unk_id=3, pad_id=0, eos_id=2, keep=[4, 5])((src, tgt))
    assert same is tgt
    kept = (src == 0) | (src == 2) | (src == 4) | (src == 5)
    assert torch.equal(dropped[kept], src[kept])
    assert (dropped[~kept] == 3).sum() >= 3  # most of the 5 words
    assert WordDropout(0.0, 3, 0, 2)((src, tgt))[0] is src


def test_word_dropout_is_a_recorded_setting():
    result = train_corpus(corpus_with_words(), word_dropout=0.2, **TINY)
    assert result.recipe["word_dropout"] == 0.2
    assert result.training["run"]["word_dropout"] == 0.2


# ------------------------------------------------------------------------------------
# BPE-dropout


def test_bpe_dropout_segments_training_examples_anew_and_never_evaluation(tokenizer):
    pairs = [("der Hund sieht den Ball und die Katze", "the dog sees the ball and the cat")]
    data = TrainingData(tokenizer, tagged(pairs * 8), bpe_dropout=0.3)
    plain = data.tensors(0)
    assert torch.equal(plain[0][0, :-1], torch.tensor(tokenizer.encode(pairs[0][0])))
    passes = [data.refresh(epoch) for epoch in range(3)]
    rows = {tuple(row.tolist()) for src, _ in passes for row in src}
    assert len(rows) > 3  # new pieces from pass to pass and example to example
    for src, tgt in passes:  # the same text, in other pieces
        for row in src:
            assert tokenizer.decode(row) == pairs[0][0]
    assert torch.equal(data.tensors(0)[0], plain[0])  # without dropout: the plain pieces
    assert json.loads(tokenizer.to_json())["model"]["dropout"] is None


def test_bpe_dropout_trains_and_the_model_translates_with_plain_pieces():
    result = train_corpus(corpus_with_words(), bpe_dropout=0.2, **TINY)
    assert result.recipe["bpe_dropout"] == 0.2 and result.training["run"]["bpe_dropout"] == 0.2
    tok = result.model.tokenizer
    assert json.loads(tok.to_json())["model"]["dropout"] is None
    text = "Der Hund sieht den Ball."
    assert result.model.encode_source(text) == tok.encode(text) + [tok.eos_id]


# ------------------------------------------------------------------------------------
# Bidirectional training, tags


def test_tags_are_special_tokens_of_the_vocabulary(tokenizer):
    assert tokenizer.tags == ["<2en>", "<2de>", DICT_TAG]
    assert [tokenizer.token_id(t) for t in tokenizer.tags] == [4, 5, 6]
    ids = [tokenizer.token_id("<2en>")] + tokenizer.encode("der Hund")
    assert tokenizer.decode(ids) == "der Hund"  # decode skips them
    assert SubwordTokenizer.from_json(tokenizer.to_json()).tags == tokenizer.tags
    with pytest.raises(ValueError, match="not in this vocabulary"):
        tokenizer.token_id("<2fr>")


def test_bidirectional_doubles_the_pairs_with_a_tag_before_each_source(tmp_path):
    corpus = corpus_with_words()
    result = train_corpus(corpus, bidirectional=True, **TINY)
    model, tok = result.model, result.model.tokenizer
    assert result.metrics["examples_per_pass"] == 2 * len(corpus.train)
    assert tok.tags == ["<2en>", "<2de>"] and model.source_tag == "<2en>"
    to_en, to_de = tok.token_id("<2en>"), tok.token_id("<2de>")
    data = TrainingData(tok, tagged(corpus.train, (), ("<2en>", "<2de>")))
    src, tgt = data.tensors(0)
    assert src[0::2, 0].eq(to_en).all() and src[1::2, 0].eq(to_de).all()
    assert tok.decode(src[1]) == corpus.train[0][1] and tok.decode(tgt[1]) == corpus.train[0][0]
    text = corpus.test[0][0]
    assert model.encode_source(text) == [to_en] + tok.encode(text) + [tok.eos_id]
    path = checkpoints.save_translator(model, tmp_path / "m.pt", training=result.training)
    assert checkpoints.load_translator(path).source_tag == "<2en>"
    assert result.training["run"]["bidirectional"] is True


def test_without_the_knobs_the_vocabulary_has_no_tags():
    result = train_corpus(corpus_with_words(), **TINY)
    assert result.model.tokenizer.tags == [] and result.model.source_tag is None
    assert result.recipe["attention_dropout"] == result.recipe["dropout"]
    assert {key: result.recipe[key] for key in
            ("bpe_dropout", "bidirectional", "dict_tag", "dict_fraction")} == {
        "bpe_dropout": 0.0, "bidirectional": False, "dict_tag": False, "dict_fraction": 0.0}


# ------------------------------------------------------------------------------------
# The dictionary as tagged extra data


def test_dict_tag_goes_before_the_dictionary_pairs_only():
    corpus = corpus_with_words()
    result = train_corpus(corpus, extra_pairs=-1, dict_tag=True, **TINY)
    tok = result.model.tokenizer
    assert tok.tags == [DICT_TAG] and result.model.source_tag is None
    data = TrainingData(tok, tagged(corpus.train) + tagged(WORDS, (DICT_TAG,)))
    src, _ = data.tensors(0)
    first = src[:, 0].tolist()
    dict_id = tok.token_id(DICT_TAG)
    assert first.count(dict_id) == len(WORDS) and first[-len(WORDS):] == [dict_id] * len(WORDS)
    assert result.metrics["examples_per_pass"] == len(corpus.train) + len(WORDS)


def test_dict_fraction_draws_a_new_sample_of_the_dictionary_each_pass(tokenizer):
    fixed = tagged(sentences(30))
    pool = tagged(WORDS * 5, (DICT_TAG,))
    data = TrainingData(tokenizer, fixed, pool, per_pass=10, seed=1)
    samples = [[e[:2] for e in data.drawn(epoch)] for epoch in range(4)]
    assert all(len(s) == 10 for s in samples) and len({tuple(s) for s in samples}) > 1
    assert [e[:2] for e in TrainingData(tokenizer, fixed, pool, per_pass=10,
                                        seed=1).drawn(2)] == samples[2]  # by the seed
    src, _ = data.refresh(3)
    assert src.size(0) == 40 and src[30:, 0].eq(tokenizer.token_id(DICT_TAG)).all()

    result = train_corpus(corpus_with_words(), dict_fraction=0.2, dict_tag=True, **TINY)
    assert result.metrics["dict_per_pass"] == round(0.2 / 0.8 * 50)
    assert result.metrics["examples_per_pass"] == 50 + result.metrics["dict_per_pass"]
    assert result.recipe["dict_fraction"] == 0.2


def test_dict_fraction_refuses_what_does_not_go_with_it():
    corpus = corpus_with_words()
    with pytest.raises(ValueError, match="extra_pairs .* or dict_fraction"):
        train_corpus(corpus, extra_pairs=5, dict_fraction=0.1, **TINY)
    corpus.extra_train = []
    with pytest.raises(ValueError, match="needs the corpus's extra_train"):
        train_corpus(corpus, dict_fraction=0.1, **TINY)


def test_a_run_with_a_dictionary_sample_resumes_bit_for_bit(tmp_path):
    """The sample of each pass comes from the seed and the pass: a resumed run draws the
    very same (100 sentence examples and 25 drawn, 4 batches of 32 a pass: the 6 steps
    cross into the second pass)."""
    from transformer_lib.stopping import StopFlag

    corpus = corpus_with_words()
    settings = dict(TINY, steps=6, batch_size=32, dict_fraction=0.2, dict_tag=True,
                    bidirectional=True, attention_dropout=0.0)
    whole = train_corpus(corpus, **settings)
    first = train_corpus(corpus, stop=StopFlag(after=3), **settings)
    path = checkpoints.save_translator(first.model, tmp_path / "run.pt", first.metrics,
                                       training=first.training)
    resumed = train_corpus(corpus, resume=checkpoints.load_resumable(path), **settings)
    for key, value in whole.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[key]), key
    with pytest.raises(ResumeMismatch, match="dict_fraction: saved 0.2, now 0.1"):
        train_corpus(corpus, resume=checkpoints.load_resumable(path),
                     **dict(settings, dict_fraction=0.1))


def test_checkpoints_saved_before_the_knobs_resume_with_them_off():
    older = {"training": {"run": {"seed": 0}}}
    off = {"seed": 0, "bpe_dropout": 0.0, "bidirectional": False, "dict_tag": False,
           "dict_fraction": 0.0}
    check_resumable(older, off)
    with pytest.raises(ResumeMismatch, match="bidirectional: saved False, now True"):
        check_resumable(older, dict(off, bidirectional=True))


def test_dictionary_coverage_counts_unseen_words_the_dictionary_holds():
    corpus = Corpus("c", "de", "en", train=[("der Hund schläft", "the dog sleeps")],
                    valid=[("Der Hund bellt laut", "")], test=[("Eine Katze", "")],
                    extra_train=[("bellen; bellt", "bark"), ("Katze", "cat")])
    valid = dictionary_coverage(corpus, "valid")
    assert (valid["tokens"], valid["unseen_tokens"], valid["covered_tokens"]) == (4, 2, 1)
    assert valid["covered_types_fraction"] == 0.5
    test = dictionary_coverage(corpus, "test")
    assert (test["unseen_types"], test["covered_types"]) == (2, 1)


# ------------------------------------------------------------------------------------
# The command line


def test_the_command_passes_and_records_every_knob(tmp_path, capsys):
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{de}\t{en}\n" for de, en in sentences(125)), encoding="utf-8")
    out = tmp_path / "m.pt"
    code = command.main([
        "train", "--corpus", "tsv", "--path", str(path), "--src-lang", "de", "--tgt-lang",
        "en", "--steps", "2", "--vocab-size",
        "150", "--batch-size", "16", "--out", str(out), "--no-progress", "--threads", "1",
        "--preset", "tiny", "--d-model", "32", "--num-heads", "2", "--layers", "2",
        "--d-ff", "48", "--attention-dropout", "0.05", "--activation-dropout", "0",
        "--bpe-dropout", "0.1", "--bidirectional", "--label-smoothing", "0.2",
        "--word-dropout", "0.1"])
    assert code == 0, capsys.readouterr()
    run = checkpoints.load_resumable(out)["training"]["run"]
    assert run["model"]["d_model"] == 32 and run["model"]["num_encoder_layers"] == 2
    assert run["model"]["num_decoder_layers"] == 2 and run["model"]["d_ff"] == 48
    assert run["model"]["attention_dropout"] == 0.05
    assert run["model"]["activation_dropout"] == 0.0
    assert run["bpe_dropout"] == 0.1 and run["bidirectional"] is True
    assert run["label_smoothing"] == 0.2 and run["word_dropout"] == 0.1
    assert checkpoints.load_translator(out).source_tag == "<2en>"


@pytest.mark.parametrize("words, message", [
    (["--dict-fraction", "0.1", "--extra-pairs", "5"], "argument --dict-fraction"),
    (["--dict-fraction", "0.1"], "has no word/phrase pairs"),
    (["--bpe-dropout", "1"], "argument --bpe-dropout: must be at least 0 and below 1"),
    (["--bidirectional", "maybe"], "argument --bidirectional: must be true or false"),
])
def test_the_command_refuses_knobs_that_do_not_go(words, message, tmp_path, capsys):
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{de}\t{en}\n" for de, en in sentences(20)), encoding="utf-8")
    with pytest.raises(SystemExit) as exit_:
        command.main(["train", "--corpus", "tsv", "--path", str(path), "--steps", "1",
                      "--out", str(tmp_path / "m.pt"), *words])
    assert exit_.value.code == 2 and message in capsys.readouterr().err
