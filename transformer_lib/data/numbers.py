"""The capstone's data: English number words -> German (or French) number words, 0 to 999,999.

The pairs come from the ``num2words`` package, computed on the spot (nothing is downloaded). The
split is *by number*: a test number is never seen in training, in any form, so test exact match
measures whether the model learned the rules, not whether it memorised pairs.

Numbers are drawn *across magnitudes*: first a digit count (1 to 6), then a number with
that many digits. Drawn uniformly from 0..999,999, 90% of the numbers would have six
digits, and the model would hardly ever see "seven" or "forty-two" on their own. Within
a magnitude, zero digits are drawn more often than one in ten (``zero_prob``): round
numbers, groups that are zero (800,066) and endings like 01 are the patterns a model
gets wrong when it sees them rarely.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .._checks import check_int, check_number, check_positive_int, check_probability
from .batching import BucketBatcher, pad_sequences
from .bpe import BPETokenizer
from .tokenize import detokenize_words, target_tokenizer, tokenize_words
from .vocab import Vocab

MAX_NUMBER = 999_999
LANGS = ("en", "de", "fr")
# Chance that a digit after the leading one is 0 in a training number (uniform: 0.1).
ZERO_PROB = 0.25


def number_to_words(n: int, lang: str = "en") -> str:
    """``num2words(n, lang=lang)`` for an int 0 <= n <= 999,999, with checked arguments."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"n must be an int, got {type(n).__name__}")
    if not 0 <= n <= MAX_NUMBER:
        raise ValueError(f"n must be in [0, {MAX_NUMBER}], got {n}")
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {LANGS}, got {lang!r}")
    try:
        from num2words import num2words
    except ImportError as error:  # an optional dependency of the library
        raise ImportError("the number-words data needs the num2words package: pip install num2words") from error
    return num2words(int(n), lang=lang)


def magnitude_buckets(max_number: int = MAX_NUMBER) -> list[tuple[int, int]]:
    """Inclusive ranges of numbers with 1, 2, ... digits: [(0, 9), (10, 99), ..., (10^(k-1), max)]."""
    check_positive_int("max_number", max_number)
    buckets, low = [(0, min(9, max_number))], 10
    while low <= max_number:
        buckets.append((low, min(low * 10 - 1, max_number)))
        low *= 10
    return buckets


def _spread(total: int, caps: list[int]) -> list[int]:
    """Split ``total`` as evenly as possible over buckets, none above its cap (water filling)."""
    counts = [0] * len(caps)
    left = total
    while left > 0:
        open_ = [i for i in range(len(caps)) if counts[i] < caps[i]]
        if not open_:
            raise ValueError(f"cannot hold out {total} numbers with per-bucket caps {caps}")
        share = max(left // len(open_), 1)
        for i in open_:
            take = min(share, caps[i] - counts[i], left)
            counts[i] += take
            left -= take
            if left == 0:
                break
    return counts


def _draw_digits(rng: np.random.Generator, digits: np.ndarray,
                 zero_prob: float) -> np.ndarray:
    """One number per entry of ``digits`` (N,), with that many digits: the leading digit
    uniform in 1-9 (0-9 for one digit), each later digit 0 with probability
    ``zero_prob``, else uniform in 1-9."""
    count, width = len(digits), int(digits.max())
    zero = rng.random((count, width)) < zero_prob
    later = np.where(zero, 0, rng.integers(1, 10, (count, width)))  # (N, width)
    lead = np.where(digits == 1, rng.integers(0, 10, count), rng.integers(1, 10, count))
    numbers = lead.astype(np.int64)
    for position in range(1, width):  # append a digit where the number is long enough
        longer = numbers * 10 + later[:, position]
        numbers = np.where(position < digits, longer, numbers)
    return numbers


@dataclass
class NumberSplit:
    """Held-out test and validation numbers; every other number in [0, max_number] is training.

    Build it with ``split_numbers``. ``sample_train`` draws training numbers across magnitudes.
    """

    test: np.ndarray
    valid: np.ndarray
    max_number: int = MAX_NUMBER
    held_out: np.ndarray = field(init=False, repr=False)

    def __post_init__(self):
        self.held_out = np.union1d(self.test, self.valid)

    def is_train(self, numbers) -> np.ndarray:
        numbers = np.asarray(numbers)
        return (numbers >= 0) & (numbers <= self.max_number) & ~np.isin(numbers, self.held_out)

    def sample_train(self, count: int, seed: int = 0,
                     zero_prob: float | None = None) -> np.ndarray:
        """``count`` training numbers (with repeats): a digit count d is drawn with probability
        proportional to d (longer numbers are harder), then a number with d digits.

        ``zero_prob=None`` draws that number uniformly. A float draws it digit by digit:
        the leading digit uniformly from 1-9, every later digit 0 with probability
        ``zero_prob`` and otherwise uniformly from 1-9 (``zero_prob=0.1`` is uniform
        again; more gives more round numbers and zero groups). Numbers above
        ``max_number`` or held out are drawn again.
        """
        check_int("count", count, minimum=0)
        check_int("seed", seed, minimum=0)
        if zero_prob is not None:
            check_probability("zero_prob", zero_prob)
        rng = np.random.default_rng(seed)
        buckets = magnitude_buckets(self.max_number)
        weights = np.arange(1, len(buckets) + 1, dtype=float)
        weights /= weights.sum()
        lows = np.array([b[0] for b in buckets])
        highs = np.array([b[1] for b in buckets])
        out = np.empty(0, dtype=np.int64)
        while out.size < count:
            which = rng.choice(len(buckets), size=count, p=weights)
            if zero_prob is None:
                draw = rng.integers(lows[which], highs[which] + 1)
            else:
                draw = _draw_digits(rng, which + 1, zero_prob)
            out = np.concatenate([out, draw[self.is_train(draw)]])
        return out[:count]


def split_numbers(n_test: int = 2000, n_valid: int = 500, seed: int = 0,
                  max_number: int = MAX_NUMBER, max_fraction: float = 0.1) -> NumberSplit:
    """Hold out ``n_test`` test and ``n_valid`` validation numbers, spread evenly over the digit
    counts, but never more than ``max_fraction`` of a bucket (so 0..9 keeps 9 of its 10 numbers
    for training). Fixed by ``seed``; the two sets are disjoint, and training excludes both."""
    check_positive_int("n_test", n_test)
    check_int("n_valid", n_valid, minimum=0)
    check_int("seed", seed, minimum=0)
    check_int("max_number", max_number, 1, MAX_NUMBER)
    check_number("max_fraction", max_fraction, 0.0, 1.0, low_open=True)
    rng = np.random.default_rng(seed)
    buckets = magnitude_buckets(max_number)
    sizes = [high - low + 1 for low, high in buckets]
    caps = [max(1, int(size * max_fraction)) for size in sizes]
    test_counts = _spread(n_test, caps)
    valid_counts = _spread(n_valid, [cap - t for cap, t in zip(caps, test_counts)])
    test, valid = [], []
    for (low, high), nt, nv in zip(buckets, test_counts, valid_counts):
        chosen = rng.choice(high - low + 1, size=nt + nv, replace=False) + low
        test.append(chosen[:nt])
        valid.append(chosen[nt:])
    return NumberSplit(np.sort(np.concatenate(test)).astype(np.int64),
                       np.sort(np.concatenate(valid)).astype(np.int64), max_number)


class NumberWordsData:
    """Everything the capstone trains and tests on, for one target language.

    - ``split``: the held-out test/valid numbers (``split_numbers``);
    - ``numbers[name]`` for name in "train", "valid", "test": the numbers of each split, "train"
      being ``train_size`` numbers sampled across magnitudes (with repeats) from the
      training part, with zero digits drawn with probability ``zero_prob`` (``None``:
      uniformly; see ``NumberSplit.sample_train``);
    - ``src_vocab`` (English words) and ``tgt_vocab`` (target pieces of ``scheme``:
      "glued" morphemes, "morphemes", "chars", or "bpe": a byte-pair encoding with
      ``bpe_vocab_size`` tokens learned from the training targets; see
      ``target_tokenizer`` and ``BPETokenizer``), built from the training pairs only;
    - ``cache``: the (number, lang) -> words dictionary, shareable between data sets;
    - ``tensors[name] = (src, tgt)`` for name in "train", "valid", "test": padded id tensors, the
      target wrapped in <bos> ... <eos>. They are computed once, so a training batch costs one
      indexing operation (see ``batches``).
    """

    def __init__(self, lang: str = "de", train_size: int = 30_000, n_test: int = 2000,
                 n_valid: int = 500, seed: int = 0, scheme: str = "glued",
                 max_number: int = MAX_NUMBER, cache: dict | None = None,
                 zero_prob: float | None = ZERO_PROB, bpe_vocab_size: int = 60):
        if lang not in ("de", "fr"):
            raise ValueError(f"lang must be 'de' or 'fr', got {lang!r}")
        # split_numbers and sample_train check the rest; a data set also needs at least one
        # training pair and one validation number (they accept none).
        check_positive_int("train_size", train_size)
        check_positive_int("n_valid", n_valid)
        self.lang, self.scheme = lang, scheme
        if scheme != "bpe":
            self.tgt_tokenizer = target_tokenizer(lang, scheme)
        self.split = split_numbers(n_test, n_valid, seed, max_number)
        train = self.split.sample_train(train_size, seed=seed + 1, zero_prob=zero_prob)
        self.numbers = {"train": train, "valid": self.split.valid,
                        "test": self.split.test}
        # (number, lang) -> words; pass the ``cache`` of another data set to reuse its English.
        self.cache: dict[tuple[int, str], str] = {} if cache is None else cache
        if scheme == "bpe":  # learned from the training targets, as the vocabularies are
            self.tgt_tokenizer = BPETokenizer.train([self.words(n) for n in train],
                                                    bpe_vocab_size)
        train_src, train_tgt = self._tokenized(self.numbers["train"])
        self.src_vocab = Vocab.from_sequences(train_src)
        self.tgt_vocab = Vocab.from_sequences(train_tgt)
        self.tensors = {"train": self._encode(train_src, train_tgt)}
        for name in ("valid", "test"):
            self.tensors[name] = self._encode(*self._tokenized(self.numbers[name]))

    def words(self, n: int, lang: str | None = None) -> str:
        """The words for ``n`` in ``lang`` (default: the target language), cached."""
        key = (int(n), lang or self.lang)
        if key not in self.cache:
            self.cache[key] = number_to_words(key[0], key[1])
        return self.cache[key]

    def pair(self, n: int) -> tuple[str, str]:
        """(English words, target words) for the number ``n``."""
        return self.words(n, "en"), self.words(n)

    def _tokenized(self, numbers):
        return [self.source_tokens(n) for n in numbers], [self.target_tokens(n) for n in numbers]

    def _encode(self, src_tokens, tgt_tokens):
        src = pad_sequences([self.src_vocab.encode(t) for t in src_tokens], Vocab.pad_id)
        tgt = pad_sequences([self.tgt_vocab.encode(t, add_bos=True, add_eos=True) for t in tgt_tokens],
                            Vocab.pad_id)
        return src, tgt

    def batches(self, batch_size: int = 128, seed: int = 0, device=None, bucket: bool = True):
        """An endless, length-bucketed iterator of training batches (src, tgt) on ``device``."""
        src, tgt = self.tensors["train"]
        if device is not None:
            src, tgt = src.to(device), tgt.to(device)
        return BucketBatcher(src, tgt, batch_size, pad_id=Vocab.pad_id, seed=seed, bucket=bucket)

    def source_tokens(self, n: int) -> list[str]:
        return tokenize_words(self.words(n, "en"))

    def target_tokens(self, n: int) -> list[str]:
        return self.tgt_tokenizer.tokenize(self.words(n))

    def __repr__(self) -> str:
        sizes = {k: tuple(v[0].shape) for k, v in self.tensors.items()}
        return (f"NumberWordsData(lang={self.lang!r}, scheme={self.scheme!r}, src_vocab={len(self.src_vocab)}, "
                f"tgt_vocab={len(self.tgt_vocab)}, src shapes={sizes})")


__all__ = ["MAX_NUMBER", "ZERO_PROB", "NumberSplit", "NumberWordsData",
           "detokenize_words", "magnitude_buckets", "number_to_words", "split_numbers"]
