"""Data support for the capstone: vocabularies, tokenizers, the number-words data set, batching.

``num2words`` (an optional dependency) is imported only when number words are first computed.
"""
from .batching import BucketBatcher, pad_sequences
from .bpe import BPETokenizer
from .numbers import (
    MAX_NUMBER,
    ZERO_PROB,
    NumberSplit,
    NumberWordsData,
    magnitude_buckets,
    number_to_words,
    split_numbers,
)
from .tokenize import (
    FRENCH_MORPHEMES,
    GERMAN_MORPHEMES,
    CharTokenizer,
    MorphemeTokenizer,
    detokenize_chars,
    detokenize_words,
    target_tokenizer,
    tokenize_chars,
    tokenize_words,
    tokenizer_inventory,
)
from .vocab import BOS, EOS, PAD, SPECIALS, UNK, Vocab

__all__ = [
    "BOS", "BPETokenizer", "BucketBatcher", "CharTokenizer", "EOS", "FRENCH_MORPHEMES",
    "GERMAN_MORPHEMES", "MAX_NUMBER", "MorphemeTokenizer", "NumberSplit",
    "NumberWordsData", "PAD", "SPECIALS", "UNK", "Vocab", "ZERO_PROB",
    "detokenize_chars", "detokenize_words", "magnitude_buckets", "number_to_words",
    "pad_sequences", "split_numbers", "target_tokenizer", "tokenize_chars",
    "tokenize_words", "tokenizer_inventory",
]
