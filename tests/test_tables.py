"""transformer_lib.tables: tables for the chapters, as HTML and as text."""
import pytest

import transformer_lib as tl
from transformer_lib.interop import marian_weight_map
from transformer_lib.tables import Table, weight_table


def test_text_is_aligned_and_html_escaped():
    table = Table(["name", "size"], [["<pad>", "1"], ["tokens", "12"]], code=(0,))
    assert repr(table).splitlines() == ["name    size", "------  ----",
                                        "<pad>   1", "tokens  12"]
    html = table._repr_html_()
    assert "<td><code>&lt;pad&gt;</code></td><td>1</td>" in html
    assert html.startswith("<table><thead><tr><th>name</th><th>size</th>")


def test_rows_must_fit_the_header():
    with pytest.raises(ValueError, match="row 1 has 1 cells, the header 2"):
        Table(["a", "b"], [["1", "2"], ["3"]])


def test_weight_table_has_one_row_per_module_whatever_the_depth():
    one = weight_table(marian_weight_map(1, 1))
    assert repr(weight_table(marian_weight_map(3, 2))) == repr(one)
    rows = {(theirs, ours): part for theirs, ours, part in one.rows}
    assert rows["model.encoder.layers.{i}.fc1", "encoder.layers.{i}.ffn.linear1"] == \
        "weight columns"
    assert rows["model.decoder.layers.{i}.fc2", "decoder.layers.{i}.ffn.linear2"] == \
        "weight rows, bias"
    assert rows["final_logits_bias", "generator.bias"] == "-"


def test_weight_table_names_every_parameter_of_a_model():
    model = tl.Transformer(11, 13, d_model=16, num_heads=2, num_encoder_layers=1,
                           num_decoder_layers=1, d_ff=32)
    ours = {o for _, o, _ in weight_table(marian_weight_map(1, 1)).rows}
    for name, _ in model.named_parameters():
        module = name.rpartition(".")[0].replace(".layers.0.", ".layers.{i}.")
        assert module in ours or name in ours, name
