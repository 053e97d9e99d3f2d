"""transformer_lib.data.bpe: a BPE target vocabulary learned with Hugging Face tokenizers,
in NumberWordsData (scheme="bpe") and in the capstone's checkpoints."""
import numpy as np
import pytest
import torch

from transformer_lib.data import (
    BPETokenizer,
    MorphemeTokenizer,
    GERMAN_MORPHEMES,
    NumberWordsData,
    number_to_words,
    target_tokenizer,
    tokenizer_inventory,
)

pytest.importorskip("tokenizers")
pytest.importorskip("num2words")

NUMBERS = sorted(set(range(0, 120)) | set(np.random.default_rng(0).integers(0, 1_000_000, 300)
                                       .tolist()))
GERMAN = [number_to_words(n, "de") for n in NUMBERS]


@pytest.fixture(scope="module")
def bpe():
    return BPETokenizer.train(GERMAN, 60)


def test_vocabulary_is_the_letters_then_one_token_per_merge(bpe):
    letters = sorted(set("".join(GERMAN)))
    assert len(bpe) == 60 and bpe.vocab[:len(letters)] == letters
    assert len(bpe.merges) == 60 - len(letters)
    # each merged token is made of two earlier tokens, in the order they were learned
    for (a, b), token in zip(bpe.merges, bpe.vocab[len(letters):]):
        assert a + b == token
        assert bpe.vocab.index(a) < bpe.vocab.index(token) > bpe.vocab.index(b)


def test_the_merges_follow_pair_frequency():
    # "aa" occurs 4 times as a pair in the corpus below, "ab" twice: aa is merged first
    bpe = BPETokenizer.train(["aab", "aab", "aa", "aa"], 3)
    assert bpe.merges == [("a", "a")]
    assert bpe.tokenize("aaab") == ["aa", "a", "b"]


def test_round_trip_on_unseen_numbers(bpe):
    for n in (777_777, 101_000, 13, 999_999, 80_080):
        words = number_to_words(n, "de")
        tokens = bpe.tokenize(words)
        assert bpe.detokenize(tokens) == words and all(t in bpe.vocab for t in tokens)


def test_a_larger_vocabulary_extends_the_merges_and_shortens_the_targets(bpe):
    bigger = BPETokenizer.train(GERMAN, 150)
    assert bigger.merges[:len(bpe.merges)] == bpe.merges
    length = [np.mean([len(t.tokenize(w)) for w in GERMAN]) for t in (bpe, bigger)]
    assert length[1] < length[0]


def test_it_learns_the_frequent_morphemes_first():
    bpe = BPETokenizer.train(GERMAN, 60)
    assert {"und", "hundert", "zig", "tausend"} <= set(bpe.vocab)


def test_training_is_repeatable(bpe):
    assert BPETokenizer.train(GERMAN, 60).state() == bpe.state()


def test_state_round_trip(bpe):
    again = BPETokenizer.from_state(bpe.state())
    assert again.merges == bpe.merges and again.vocab == bpe.vocab
    assert all(again.tokenize(w) == bpe.tokenize(w) for w in GERMAN[:50])


def test_unknown_characters_raise_instead_of_vanishing(bpe):
    with pytest.raises(ValueError, match=r"characters the BPE vocabulary was not learned "
                                         r"with: \['x'\]"):
        bpe.tokenize("siebenx")


@pytest.mark.parametrize("call, error, message", [
    (lambda: BPETokenizer.train("siebzig", 10), TypeError, "texts must be a list of strings"),
    (lambda: BPETokenizer.train([], 10), ValueError, "texts must hold some text"),
    (lambda: BPETokenizer.train(["ab"], 0), ValueError, "vocab_size must be >= 1, got 0"),
    (lambda: BPETokenizer.train(["ab"], True), TypeError, "vocab_size must be an int"),
    (lambda: BPETokenizer.from_state(b"{}"), TypeError, "state must be a str"),
])
def test_bad_input(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_detokenize_wants_a_list(bpe):
    with pytest.raises(TypeError, match="tokens must be a list of token strings"):
        bpe.detokenize("sieben")
    with pytest.raises(TypeError, match="text must be a str"):
        bpe.tokenize(["sieben"])


def test_target_tokenizer_rebuilds_a_bpe_from_its_inventory(bpe):
    assert target_tokenizer("de", "bpe", bpe) is bpe
    rebuilt = target_tokenizer("de", "bpe", tokenizer_inventory(bpe))
    assert rebuilt.merges == bpe.merges
    with pytest.raises(ValueError, match="scheme='bpe' needs the learned BPETokenizer"):
        target_tokenizer("de", "bpe")
    morphemes = MorphemeTokenizer(GERMAN_MORPHEMES)
    assert tokenizer_inventory(morphemes) == list(morphemes.morphemes)
    assert tokenizer_inventory(target_tokenizer("de", "chars")) is None


@pytest.fixture(scope="module")
def bpe_data():
    return NumberWordsData("de", train_size=600, n_test=60, n_valid=20, seed=0, scheme="bpe",
                           bpe_vocab_size=50)


def test_number_words_data_learns_bpe_from_the_training_targets_only(bpe_data):
    train_words = [bpe_data.words(int(n)) for n in bpe_data.numbers["train"]]
    assert bpe_data.tgt_tokenizer.state() == BPETokenizer.train(train_words, 50).state()
    assert bpe_data.scheme == "bpe" and len(bpe_data.tgt_tokenizer) == 50
    # the model's vocabulary: the BPE tokens the training targets use, and the specials
    used = {t for w in train_words for t in bpe_data.tgt_tokenizer.tokenize(w)}
    assert set(bpe_data.tgt_vocab.itos[4:]) == used


def test_number_words_data_bpe_tensors_decode_to_the_words(bpe_data):
    src, tgt = bpe_data.tensors["test"]
    for number, row in zip(bpe_data.numbers["test"], tgt.tolist()):
        tokens = bpe_data.tgt_vocab.decode(row)
        assert bpe_data.tgt_tokenizer.detokenize(tokens) == bpe_data.words(int(number))


def test_a_bpe_model_saves_and_loads_with_its_merges(bpe_data, tmp_path):
    from transformer_lib.examples import number_words as nw

    torch.manual_seed(0)
    model = nw.build_model(bpe_data).eval()
    assert model.scheme == "bpe" and model.tgt_tokenizer.merges == bpe_data.tgt_tokenizer.merges
    path = nw.save_checkpoint(model, tmp_path / "bpe.pt")
    loaded = nw.load_checkpoint(path)
    assert loaded.tgt_tokenizer.merges == model.tgt_tokenizer.merges
    for text in ("ninety-seven", "seven hundred and seventy-one thousand, eighty-one"):
        assert nw.translate(loaded, text) == nw.translate(model, text)
