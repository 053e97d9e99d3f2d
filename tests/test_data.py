"""transformer_lib.data: tokenizers, vocabulary, the split by number, padding and bucketing."""
import numpy as np
import pytest
import torch

from transformer_lib.data import (
    FRENCH_MORPHEMES,
    GERMAN_MORPHEMES,
    BucketBatcher,
    MorphemeTokenizer,
    NumberWordsData,
    Vocab,
    detokenize_chars,
    detokenize_words,
    magnitude_buckets,
    number_to_words,
    pad_sequences,
    split_numbers,
    target_tokenizer,
    tokenize_chars,
    tokenize_words,
)

pytest.importorskip("num2words")

# Small numbers, round numbers and a seeded sample of large ones.
SAMPLE = sorted(set(range(0, 130)) | {200, 999, 1000, 1001, 21000, 70071, 80080, 100000, 181181, 999999}
                | set(np.random.default_rng(0).integers(0, 1_000_000, 150).tolist()))


def test_source_tokens_split_hyphens_and_commas():
    assert tokenize_words("one thousand, two hundred and forty-two") == [
        "one", "thousand", ",", "two", "hundred", "and", "forty", "-", "two"]
    assert tokenize_words("") == []


def test_source_round_trip():
    for n in SAMPLE:
        text = number_to_words(n, "en")
        assert detokenize_words(tokenize_words(text)) == text, text


@pytest.mark.parametrize("scheme", ["glued", "morphemes"])
@pytest.mark.parametrize("lang", ["de", "fr"])
def test_target_round_trip_and_inventory_coverage(lang, scheme):
    tok = target_tokenizer(lang, scheme)
    for n in SAMPLE:
        text = number_to_words(n, lang)
        tokens = tok.tokenize(text)
        assert tok.detokenize(tokens) == text
        # num2words output is covered by the inventory: no one-letter fallback pieces.
        if scheme == "glued":  # at most one separator, glued to the front of a piece
            pieces = [t.lstrip(" -,") for t in tokens]
            assert all(p in tok.morphemes for p in pieces), (text, tokens)
            assert all(len(t) - len(p) <= 1 for t, p in zip(tokens, pieces)), tokens
        else:
            assert all(t in tok.morphemes or t in " -," for t in tokens), (text, tokens)
        assert detokenize_chars(tokenize_chars(text)) == text


def test_glued_scheme_is_the_default_and_changes_only_french():
    assert target_tokenizer("fr").glue and not target_tokenizer("fr", "morphemes").glue
    glued, separate = target_tokenizer("de"), target_tokenizer("de", "morphemes")
    for n in SAMPLE:
        german = number_to_words(n, "de")  # one word: no separators, nothing to glue
        assert glued.tokenize(german) == separate.tokenize(german)
    text = number_to_words(97_181, "fr")  # quatre-vingt-dix-sept mille cent quatre-...
    assert target_tokenizer("fr").tokenize(text) == [
        "quatre", "-vingt", "-dix", "-sept", " mille", " cent", " quatre", "-vingt",
        "-un"]
    assert len(target_tokenizer("fr", "morphemes").tokenize(text)) == 17


def test_glue_keeps_separators_without_a_following_piece():
    tok = MorphemeTokenizer(FRENCH_MORPHEMES, glue=True)
    assert tok.tokenize("deux - trois-") == ["deux", " - trois", "-"]
    assert tok.tokenize("-") == ["-"] and tok.tokenize("") == []
    count = len(set(FRENCH_MORPHEMES))
    assert repr(tok) == f"MorphemeTokenizer({count} morphemes, glue=True)"
    with pytest.raises(TypeError, match="glue must be a bool, got str"):
        MorphemeTokenizer(FRENCH_MORPHEMES, glue="yes")


def test_german_morphemes_by_longest_match():
    tok = MorphemeTokenizer(GERMAN_MORPHEMES)
    assert tok.tokenize("siebenundneunzig") == ["sieben", "und", "neun", "zig"]
    assert tok.tokenize("einhundertsechzehntausenddreißig") == [
        "ein", "hundert", "sech", "zehn", "tausend", "drei", "ßig"]
    assert tok.tokenize("eins") == ["eins"]
    # Uncovered characters fall back to single-character tokens; the round trip stays exact.
    assert tok.tokenize("zweiXY") == ["zwei", "X", "Y"]


def test_french_keeps_separators_as_tokens():
    tok = MorphemeTokenizer(FRENCH_MORPHEMES)
    text = number_to_words(181181, "fr")  # cent quatre-vingt-un mille cent quatre-vingt-un
    tokens = tok.tokenize(text)
    assert tokens[:7] == ["cent", " ", "quatre", "-", "vingt", "-", "un"]
    assert "".join(tokens) == text


def test_morpheme_tokenizer_bad_input():
    with pytest.raises(ValueError, match="morphemes"):
        MorphemeTokenizer([])
    with pytest.raises(TypeError, match="str"):
        MorphemeTokenizer(GERMAN_MORPHEMES).tokenize(42)
    with pytest.raises(ValueError, match="scheme"):
        target_tokenizer("de", scheme="bytes")
    with pytest.raises(ValueError, match="lang"):
        target_tokenizer("it")


def test_vocab_specials_encode_decode():
    v = Vocab(["b", "a", "b"])
    assert v.itos == ["<pad>", "<bos>", "<eos>", "<unk>", "a", "b"]
    assert (v.pad_id, v.bos_id, v.eos_id, v.unk_id) == (0, 1, 2, 3)
    ids = v.encode(["a", "zz", "b"], add_bos=True, add_eos=True)
    assert ids == [1, 4, 3, 5, 2]
    assert v.decode(ids + [0, 0]) == ["a", "<unk>", "b"]
    assert v.decode([4, 2, 5]) == ["a"]  # stops at <eos>
    with pytest.raises(ValueError, match="not in the vocabulary"):
        v.encode(["zz"], unknown="error")
    with pytest.raises(ValueError, match="token id"):
        v.decode([99])
    again = Vocab.from_itos(v.itos)
    assert again.itos == v.itos and again.stoi == v.stoi
    with pytest.raises(ValueError, match="must start with"):
        Vocab.from_itos(["a", "b"])


def test_number_to_words_checks():
    assert number_to_words(97, "de") == "siebenundneunzig"
    with pytest.raises(ValueError, match="999999"):
        number_to_words(1_000_000)
    with pytest.raises(TypeError, match="int"):
        number_to_words("12")
    with pytest.raises(ValueError, match="lang"):
        number_to_words(3, "xx")


def test_split_is_disjoint_spread_and_seeded():
    split = split_numbers(n_test=2000, n_valid=500, seed=0)
    test, valid = set(split.test.tolist()), set(split.valid.tolist())
    assert len(test) == 2000 and len(valid) == 500
    assert not test & valid
    # Spread over magnitudes, never more than 10% of a bucket.
    for low, high in magnitude_buckets():
        in_bucket = ((split.test >= low) & (split.test <= high)).sum()
        assert 1 <= in_bucket <= max(1, (high - low + 1) // 10)
    train = split.sample_train(20_000, seed=1)
    assert not set(train.tolist()) & (test | valid)
    assert train.min() >= 0 and train.max() <= 999_999
    assert (train < 100).any() and (train >= 100_000).any()  # all magnitudes appear
    assert np.array_equal(split_numbers(seed=0).test, split.test)
    assert not np.array_equal(split_numbers(seed=1).test, split.test)


def _second_digits(numbers):
    six = numbers[numbers >= 100_000]
    return (six // 10_000) % 10


def test_sample_train_zero_prob_makes_round_numbers_common():
    split = split_numbers(n_test=2000, n_valid=500, seed=0)
    held_out = set(split.test.tolist()) | set(split.valid.tolist())
    uniform = split.sample_train(30_000, seed=1)  # zero_prob=None: the uniform draw
    assert np.array_equal(uniform, split.sample_train(30_000, seed=1, zero_prob=None))
    for zero_prob in (0.1, 0.25, 0.5):
        sample = split.sample_train(30_000, seed=1, zero_prob=zero_prob)
        assert not set(sample.tolist()) & held_out
        assert sample.min() >= 0 and sample.max() <= 999_999
        # Digit counts are drawn as before: d digits with probability d / 21 (a little
        # more for long numbers: a tenth of the short ones are held out, drawn again).
        digits = np.char.str_len(sample.astype(str))
        for d in range(1, 7):
            assert abs((digits == d).mean() - d / 21) < 0.015, (zero_prob, d)
        # A later digit is 0 with probability zero_prob (0.1 is the uniform draw).
        assert abs((_second_digits(sample) == 0).mean() - zero_prob) < 0.015
        ones = (_second_digits(sample) == 1).mean()
        assert ones == pytest.approx((1 - zero_prob) / 9, abs=0.015)
    assert abs((_second_digits(uniform) == 0).mean() - 0.1) < 0.015
    # More zeros: many more round thousands and numbers ending in 01.
    rich, plain = split.sample_train(30_000, seed=1, zero_prob=0.25), uniform
    def thousands(x):
        return ((x % 1000 == 0) & (x > 0)).sum()

    assert thousands(rich) > 5 * thousands(plain)
    assert (rich % 100 == 1).sum() > 1.4 * (plain % 100 == 1).sum()
    with pytest.raises(ValueError, match=r"zero_prob must be in \[0, 1\), got 1.5"):
        split.sample_train(10, zero_prob=1.5)
    assert len(split.sample_train(0, zero_prob=0.25)) == 0
    with pytest.raises(ValueError, match="count must be >= 0, got -1"):
        split.sample_train(-1, zero_prob=0.25)


def test_pad_sequences():
    out = pad_sequences([[5, 6], [7], []], pad_id=0)
    assert torch.equal(out, torch.tensor([[5, 6], [7, 0], [0, 0]]))
    assert pad_sequences([[1]], length=3).shape == (1, 3)
    with pytest.raises(ValueError, match="longer"):
        pad_sequences([[1, 2, 3]], length=2)


def test_bucket_batcher_covers_each_example_once_and_trims():
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 12, (200,), generator=gen)
    src = pad_sequences([list(range(1, n + 1)) for n in lengths.tolist()])
    tgt = pad_sequences([[9] * (n + 1) for n in lengths.tolist()])
    src[:, 0] += torch.arange(200) * 100  # make each row identifiable by its first token
    batcher = BucketBatcher(src, tgt, batch_size=16, seed=0, pool_batches=4, epochs=1)
    seen, padded = [], 0
    for s, t in batcher:
        assert s.size(0) == t.size(0) <= 16
        assert (s[:, -1] != 0).any() and (t[:, -1] != 0).any()  # trimmed to the longest row
        seen += (s[:, 0] // 100).tolist()
        padded += int((s == 0).sum())
    assert sorted(seen) == list(range(200))
    plain = sum(int((s == 0).sum()) for s, _ in BucketBatcher(src, tgt, 16, bucket=False, epochs=1))
    assert padded < plain  # bucketing wastes less on padding
    with pytest.raises(ValueError, match="batch_size"):
        BucketBatcher(src, tgt, batch_size=0)
    with pytest.raises(ValueError, match="same N"):
        BucketBatcher(src, tgt[:5], batch_size=4)


def test_bucket_batcher_length_counts_every_epoch_and_endless_has_none():
    src = pad_sequences([[1, 2, 3]] * 10)
    tgt = pad_sequences([[1, 4, 2]] * 10)
    assert BucketBatcher(src, tgt, 4, epochs=3).batches_per_epoch == 3
    assert len(BucketBatcher(src, tgt, 4, epochs=3)) == 9 == len(list(BucketBatcher(src, tgt, 4, epochs=3)))
    with pytest.raises(TypeError, match="endless"):
        len(BucketBatcher(src, tgt, 4))
    with pytest.raises(ValueError, match="epochs must be >= 1"):
        BucketBatcher(src, tgt, 4, epochs=0)


def test_number_words_data_tensors_decode_to_the_words():
    data = NumberWordsData("de", train_size=200, n_test=30, n_valid=10, seed=0)
    assert set(data.numbers["test"].tolist()).isdisjoint(data.numbers["train"].tolist())
    src, tgt = data.tensors["test"]
    assert src.shape[0] == tgt.shape[0] == 30
    assert (tgt[:, 0] == Vocab.bos_id).all()
    for row_src, row_tgt, n in zip(src, tgt, data.numbers["test"]):
        english, german = data.pair(int(n))
        assert detokenize_words(data.src_vocab.decode(row_src)) == english
        assert data.tgt_tokenizer.detokenize(data.tgt_vocab.decode(row_tgt)) == german
    with pytest.raises(ValueError, match="lang"):
        NumberWordsData("en")
