"""The capstone example: tiny overfit, checkpoint round trip, translate on bad input, the CLI."""
import os

import pytest
import torch

import transformer_lib as tl

pytest.importorskip("num2words")

from transformer_lib.data import NumberWordsData  # noqa: E402
from transformer_lib.examples import (  # noqa: E402
    NumberTranslator,
    attention_batch,
    attention_maps,
    exact_match,
    load_checkpoint,
    save_checkpoint,
    train_number_words,
    translate,
)
from transformer_lib.examples import number_words  # noqa: E402

TINY = dict(d_model=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=64,
            dropout=0.0)


@pytest.fixture(scope="module")
def tiny_run():
    """A tiny model overfit on 8 training numbers (module scope: trained once, ~1 s)."""
    data = NumberWordsData("de", train_size=8, n_test=20, n_valid=10, seed=0)
    result = train_number_words("de", steps=150, data=data, batch_size=8, lr_factor=1.0, warmup=20,
                                model_config=TINY, device="cpu", progress=False, seed=0)
    return result


def test_tiny_overfit_reaches_100_percent_on_8_examples(tiny_run):
    assert len(tiny_run.data.numbers["train"]) == 8
    scores = exact_match(tiny_run.model, tiny_run.data, "train")
    assert scores["exact_match"] == 1.0, list(zip(scores["predictions"], scores["targets"]))
    assert tiny_run.history["loss"][-1] < tiny_run.history["loss"][0]
    # Teacher forcing and free-running decoding agree on what was learned:
    n = int(tiny_run.data.numbers["train"][0])
    english, german = tiny_run.data.pair(n)
    assert translate(tiny_run.model, english) == german
    assert translate(tiny_run.model, english.upper() + "  ") == german  # normalised input


def test_checkpoint_round_trip(tiny_run, tmp_path):
    model = tiny_run.model
    path = tmp_path / "ckpt" / "de.pt"
    save_checkpoint(model, path, metrics={"test_exact_match": 0.5})
    assert sorted(os.listdir(path.parent)) == ["de.pt"]  # no temporary file left behind
    loaded = load_checkpoint(path)
    assert isinstance(loaded, NumberTranslator) and not loaded.training
    assert loaded.config == model.config
    assert loaded.src_vocab.itos == model.src_vocab.itos
    assert loaded.tgt_vocab.itos == model.tgt_vocab.itos
    assert loaded.metrics == {"test_exact_match": 0.5}
    for key, value in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[key], value, rtol=0, atol=0)
    texts = [tiny_run.data.pair(int(n))[0] for n in tiny_run.data.numbers["test"][:10]]
    texts += ["ninety-seven", "one hundred thousand"]
    for text in texts:
        for beam in (1, 3):
            before = translate(model, text, beam_size=beam, unknown="unk")
            assert translate(loaded, text, beam_size=beam, unknown="unk") == before
    # Saving again over an existing file replaces it.
    save_checkpoint(model, path)
    assert load_checkpoint(path).metrics == {}
    assert sorted(os.listdir(path.parent)) == ["de.pt"]


def test_load_rejects_other_files(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save({"state_dict": {}}, path)
    with pytest.raises(ValueError, match="not a number-words checkpoint"):
        load_checkpoint(path)


def test_translate_bad_input(tiny_run):
    model = tiny_run.model
    with pytest.raises(ValueError, match="must contain English number words"):
        translate(model, "")
    with pytest.raises(ValueError, match="must contain English number words"):
        translate(model, "   ")
    known = tiny_run.data.pair(int(tiny_run.data.numbers["train"][0]))[0]
    with pytest.raises(ValueError, match=r"unknown words \['banana'\]"):
        translate(model, known + " banana")
    with pytest.raises(TypeError, match="text must be a str"):
        translate(model, 42)
    with pytest.raises(TypeError, match="NumberTranslator"):
        translate(torch.nn.Linear(2, 2), "one")
    # With unknown="unk" the unknown word becomes <unk> and the model still answers (a string).
    src = number_words.encode_source(model, known + " banana", unknown="unk")
    assert src[0, -1].item() == model.src_vocab.unk_id
    assert (src[0, :-1] != model.src_vocab.unk_id).all()
    assert isinstance(translate(model, known + " banana", unknown="unk"), str)


def test_beam_search_scores_every_test_number(tiny_run):
    # (beam size 1 == greedy is tested on the library's own beam_search in test_decoding_training)
    scores = exact_match(tiny_run.model, tiny_run.data, "test", beam_size=3)
    assert len(scores["predictions"]) == len(scores["targets"]) == 20
    assert all(isinstance(p, str) for p in scores["predictions"])


def _rates(scheduler, optimizer, updates):
    seen = []
    for _ in range(updates):
        seen.append(optimizer.param_groups[0]["lr"])  # the rate of the coming update
        optimizer.step()
        scheduler.step()
    return seen


def test_linear_decay_warms_up_like_eq3_then_ends_with_the_step_budget():
    model = torch.nn.Linear(2, 2)
    model.config = {"d_model": 16}
    optimizer, scheduler = number_words.make_optimizer(model, lr_factor=0.5, warmup=10,
                                                       steps=50)
    seen = _rates(scheduler, optimizer, 50)
    peak = 0.5 * tl.noam_lr(10, 16, 10)
    # Updates 1..10: eq. 3's warm-up exactly (while the decay has barely started).
    warm = [0.5 * tl.noam_lr(k, 16, 10) * (1 - (k - 1) / 50) for k in range(1, 11)]
    assert seen[:10] == pytest.approx(warm, rel=1e-12)
    # Then a straight line that would reach zero at update 51: the last update learns.
    line = [peak * (1 - k / 50) for k in range(10, 50)]
    assert seen[10:] == pytest.approx(line, rel=1e-12)
    assert seen[-1] == pytest.approx(peak / 50) and seen[-1] > 0
    assert max(seen) < peak


def test_linear_decay_follows_the_clock_for_a_time_budget():
    now = [100.0]
    schedule = number_words.LinearDecay(16, 1.0, warmup=4, seconds=10.0,
                                        clock=lambda: now[0])
    peak = tl.noam_lr(4, 16, 4)
    assert schedule(0) == pytest.approx(peak / 4)  # the clock starts at the first call
    now[0] = 102.5
    assert schedule(3) == pytest.approx(peak * 0.75)
    assert schedule(1000) == pytest.approx(peak * 0.75)  # steps do not count, time does
    now[0] = 109.0
    assert schedule(5) == pytest.approx(peak * 0.1)
    now[0] = 130.0
    assert schedule(6) == 0.0  # past the budget: never negative
    # With both budgets, whichever is used up faster decides.
    both = number_words.LinearDecay(16, 1.0, warmup=4, steps=20, seconds=10.0,
                                    clock=lambda: 0.0)
    assert both(5) == pytest.approx(peak * 0.75)
    with pytest.raises(ValueError, match="needs a budget"):
        number_words.LinearDecay(16, 1.0, warmup=4)


def test_train_ends_at_a_tiny_learning_rate():
    data = NumberWordsData("fr", train_size=16, n_test=10, n_valid=5, seed=0)
    settings = dict(steps=30, data=data, batch_size=8, model_config=TINY, device="cpu",
                    progress=False, log_every=10, evaluate_test=False)
    run = train_number_words("fr", **settings)
    config = number_words.TRAIN_CONFIG
    warmup = config["warmup"]
    peak = config["lr_factor"] * tl.noam_lr(warmup, TINY["d_model"], warmup)
    assert run.history["lr"][-1] == pytest.approx(0.0, abs=1e-12)  # after the last step
    noam = train_number_words("fr", decay="noam", **settings)
    assert noam.history["lr"][-1] > 0.1 * peak


def test_train_arguments_are_checked():
    data = NumberWordsData("de", train_size=8, n_test=20, n_valid=10, seed=0)
    with pytest.raises(ValueError, match="steps or max_seconds"):
        train_number_words("de", steps=None, data=data)
    with pytest.raises(ValueError, match="lang='fr'"):
        train_number_words("fr", steps=1, data=data)
    with pytest.raises(ValueError, match="unknown model settings"):
        train_number_words("de", steps=1, data=data, model_config={"layers": 2})
    with pytest.raises(ValueError, match="decay must be 'linear' or 'noam', got 'cos'"):
        train_number_words("de", steps=1, data=data, decay="cos")


def test_command_line_trains_and_saves(tmp_path, capsys, monkeypatch):
    # Keep the run tiny: a small model and data set (the CLI's defaults are for real training).
    monkeypatch.setattr(number_words, "MODEL_CONFIG", {**number_words.MODEL_CONFIG, **TINY})
    out = tmp_path / "fr.pt"
    threads = torch.get_num_threads()
    try:
        code = number_words.main(["--lang", "fr", "--steps", "3", "--train-size", "64",
                                  "--beam", "2", "--out", str(out), "--device", "cpu",
                                  "--test-size", "20"])
        assert torch.get_num_threads() == 1  # the default: one thread
    finally:
        torch.set_num_threads(threads)
    assert code == 0
    printed = capsys.readouterr().out
    assert "test exact match (greedy)" in printed and "saved" in printed
    model = load_checkpoint(out)
    assert model.lang == "fr" and set(model.metrics) >= {"test_exact_match", "test_exact_match_beam2"}


def test_attention_batch_equals_one_text_at_a_time(tiny_run):
    """Batched and padded, each example's maps (cropped) are those of its text alone."""
    data = tiny_run.data
    texts = [data.pair(int(n))[0] for n in data.numbers["train"][:4]]
    texts.append("seven")  # short: padded in both source and target
    batch = attention_batch(tiny_run.model, texts)
    assert batch["translation"] == [translate(tiny_run.model, t) for t in texts]
    for b, text in enumerate(texts):
        alone = attention_maps(tiny_run.model, text)
        for key in ("source", "target", "decoder_input", "translation"):
            assert batch[key][b] == alone[key]
        ls, lt = len(alone["source"]), len(alone["target"])
        for kind, (lq, lk) in (("encoder", (ls, ls)), ("decoder", (lt, lt)), ("cross", (lt, ls))):
            for layer, single in enumerate(alone[kind]):
                batched = batch[kind][layer][b]  # (H, Lq_max, Lk_max)
                torch.testing.assert_close(batched[:, :lq, :lk], single, atol=1e-5, rtol=1e-4)
                # real queries give padded keys exactly zero weight
                assert torch.all(batched[:, :lq, lk:] == 0)


def test_attention_batch_bad_input(tiny_run):
    for bad in ([], "seven"):
        with pytest.raises(ValueError, match="non-empty list"):
            attention_batch(tiny_run.model, bad)
