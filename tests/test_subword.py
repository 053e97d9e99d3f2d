"""SubwordTokenizer: one joint BPE vocabulary for source and target, learned with tokenizers."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
import torch
from conftest import need
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("tokenizers")

from transformer_lib.data import DING_PATH, SPECIALS, SubwordTokenizer, load_ding  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# Made-up sentences with what real text holds: umlauts, ß, punctuation, numbers, apostrophes,
# hyphens, quotes, brackets.
TEXTS = [
    "Der Bär läuft über die Straße.", "Die Brücke ist 1.234,5 Meter lang!",
    "Wo ist das Café „Zur Möwe“?", "Er sagt: „Das ist nicht mein Problem.“",
    "The bear walks across the street.", "The bridge is 1,234.5 metres long!",
    "Where is the café 'The Seagull'?", "He says: 'That's not my problem.'",
    "It's a well-known e-mail address (not mine).", "Wir treffen uns um 19:30 Uhr – pünktlich.",
    "Österreich und die Schweiz grüßen Sie.", "Don't you think it's late?",
] * 3


@pytest.fixture(scope="module")
def tok():
    return SubwordTokenizer.train(TEXTS, vocab_size=300, min_frequency=2)


def test_specials_have_the_vocab_ids(tok):
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    assert tok.token_strings([0, 1, 2, 3]) == list(SPECIALS)
    assert len(tok) == tok.vocab_size <= 300


@pytest.mark.parametrize("text", sorted(set(TEXTS)) + [
    "Straßenbahnhaltestellenschild", "Ein Satz, den es nie gab: 42 Äpfel!", "ÄÖÜ äöü ß",
    "x", "Nummer 007 - ja/nein; (ok) [sic] {1} <b> ...", "„“‚‘«»…–—€£°%&"])
def test_round_trip(tok, text):
    ids = tok.encode(text)
    assert all(isinstance(i, int) for i in ids) and tok.unk_id not in ids
    assert tok.decode(ids) == text
    assert "".join(tok.tokenize(text)).replace("▁", " ").strip() == text


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.text(alphabet=st.sampled_from("aäbcdeoöuüßAÄOÖUÜ 0123456789.,;:!?'\"-–/()„“\t\n"),
               max_size=40))
def test_decode_restores_the_normalised_text(tok, text):
    # Every text made of characters the vocabulary knows comes back as normalise(text).
    assert tok.decode(tok.encode(text)) == tok.normalise(text) == " ".join(text.split())


def test_normalisation_is_nfc_and_single_spaces(tok):
    decomposed = unicodedata.normalize("NFD", "Grüße  aus\tKöln \n")
    assert decomposed != "Grüße aus Köln"
    assert tok.normalise(decomposed) == "Grüße aus Köln"
    assert tok.decode(tok.encode(decomposed)) == "Grüße aus Köln"
    assert tok.encode("") == [] and tok.decode([]) == ""


def test_encode_adds_no_specials_and_decode_stops_at_eos(tok):
    ids = tok.encode("Der Bär läuft.")
    assert not set(ids) & {tok.pad_id, tok.bos_id, tok.eos_id}
    padded = [tok.bos_id] + ids + [tok.eos_id] + tok.encode("Müll") + [tok.pad_id] * 3
    assert tok.decode(padded) == "Der Bär läuft."
    assert tok.decode(torch.tensor(padded)) == "Der Bär läuft."
    assert tok.decode_batch(torch.tensor([padded, padded])) == ["Der Bär läuft."] * 2
    assert tok.encode_batch(["Der Bär läuft.", "x"]) == [ids, tok.encode("x")]


def test_unseen_characters_become_unk(tok):
    ids = tok.encode("Ein Ω hier")
    assert tok.unk_id in ids
    assert tok.decode(ids) == "Ein hier"  # the unknown piece is skipped, spaces stay single
    assert tok.decode(tok.encode("Ω hier")) == "hier"


def test_pieces_are_readable_labels(tok):
    pieces = tok.tokenize("Der Bär läuft.")
    assert pieces[0].startswith("▁") and pieces[-1] == "."
    assert tok.token_strings(tok.encode("Der Bär läuft.")) == pieces


def test_json_survives_a_weights_only_checkpoint(tok):
    buffer = io.BytesIO()
    torch.save({"tokenizer": tok.to_json(), "weights": torch.zeros(2)}, buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    again = SubwordTokenizer.from_json(state["tokenizer"])
    assert again.to_json() == tok.to_json()
    for text in TEXTS:
        assert again.encode(text) == tok.encode(text)


def test_training_is_deterministic(tok):
    assert SubwordTokenizer.train(TEXTS, vocab_size=300).to_json() == tok.to_json()
    # ... in another process too, with another string-hash seed
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from test_subword import TEXTS; "
            "from transformer_lib.data import SubwordTokenizer; "
            "print(SubwordTokenizer.train(TEXTS, vocab_size=300).to_json())")
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code, str(ROOT / "tests")], env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == tok.to_json()


def test_bad_input(tok):
    with pytest.raises(TypeError, match="texts must be a list of strings"):
        SubwordTokenizer.train("one string", vocab_size=100)
    with pytest.raises(ValueError, match="some text"):
        SubwordTokenizer.train(["", " "], vocab_size=100)
    with pytest.raises(ValueError, match="vocab_size must be >= 5"):
        SubwordTokenizer.train(TEXTS, vocab_size=4)
    with pytest.raises(TypeError, match="text must be a str"):
        tok.encode(["a"])
    with pytest.raises(ValueError, match=r"token ids must be in \[0, "):
        tok.decode([5, 10_000])
    with pytest.raises(TypeError, match="ids must be a sequence of ints"):
        tok.decode([1.5])
    with pytest.raises(TypeError, match="to_json"):
        SubwordTokenizer.from_json({"model": {}})
    with pytest.raises(ValueError, match="not the JSON"):
        SubwordTokenizer.from_json("{not json")


def test_real_ding_test_sentences_round_trip():
    need(os.path.isfile(DING_PATH), f"the Ding dictionary is not installed at {DING_PATH} "
                                    "(apt-get install trans-de-en)")
    corpus = load_ding()
    train = [text for pair in corpus.train for text in pair]
    tok = SubwordTokenizer.train(train, vocab_size=4000)
    for source, target in corpus.test:
        for text in (source, target):
            ids = tok.encode(text)
            assert tok.unk_id not in ids, text
            assert tok.decode(ids) == text
