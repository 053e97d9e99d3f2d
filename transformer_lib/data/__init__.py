"""Data support: vocabularies, tokenizers, the number-words data set, batching, and the real
corpora (Ding, any TSV, Multi30k) with their hash split and a joint subword vocabulary.

``num2words`` and ``tokenizers`` (optional dependencies) are imported only when first used.
"""
from .batching import BucketBatcher, pad_sequences
from .bpe import BPETokenizer
from .corpora import CORPORA, load_corpus, load_number_words
from .corpus import Corpus, CorpusNotFoundError
from .ding import DING_PATH, clean_part, ding_version, is_sentence, load_ding, parse_line
from .multi30k import MULTI30K_FILES, MULTI30K_URL, load_multi30k
from .numbers import (
    MAX_NUMBER,
    ZERO_PROB,
    NumberSplit,
    NumberWordsData,
    magnitude_buckets,
    number_to_words,
    split_numbers,
)
from .splits import (
    DEFAULT_FRACTIONS,
    content_hash,
    find_leaks,
    group_pairs,
    normalise_for_split,
    split_of,
    split_pairs,
    split_position,
)
from .subword import SubwordTokenizer
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
from .tsv import load_tsv, read_tsv_pairs
from .vocab import BOS, EOS, PAD, SPECIALS, UNK, Vocab

__all__ = [
    "BOS", "BPETokenizer", "BucketBatcher", "CORPORA", "CharTokenizer", "Corpus",
    "CorpusNotFoundError", "DEFAULT_FRACTIONS", "DING_PATH", "EOS", "FRENCH_MORPHEMES",
    "GERMAN_MORPHEMES", "MAX_NUMBER", "MULTI30K_FILES", "MULTI30K_URL", "MorphemeTokenizer",
    "NumberSplit", "NumberWordsData", "PAD", "SPECIALS", "SubwordTokenizer", "UNK", "Vocab",
    "ZERO_PROB", "clean_part", "content_hash", "detokenize_chars", "detokenize_words",
    "ding_version", "find_leaks", "group_pairs", "is_sentence", "load_corpus", "load_ding",
    "load_multi30k", "load_number_words", "load_tsv", "magnitude_buckets", "normalise_for_split",
    "number_to_words", "pad_sequences", "parse_line", "read_tsv_pairs", "split_numbers",
    "split_of", "split_pairs", "split_position", "target_tokenizer", "tokenize_chars",
    "tokenize_words", "tokenizer_inventory",
]
