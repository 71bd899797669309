"""bench/fit.py: the fitted values read from their [F ...] tags, row selectors that refuse
validation rows, values and the accuracy block written back so chips.load reads them, and a
refit on a small training subset that lands on the committed value."""

import dataclasses
import sys
from pathlib import Path

import pytest

import chips
from isa.errors import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import fit as F
import validate as V

ROWS = V.load()


def test_parameters_are_the_tagged_values():
    found = {p.key: p for p in F.parameters("bm1686")}
    fill, conv = found["engines.tiu.matrix.fill_drain"], found["engines.tiu.matrix.conv_block_cycles.float32"]
    assert fill.rows[:2] == ("resnet50:INT8", "resnet50:FP16") and fill.value in fill.grid
    assert conv.rows == ("resnet50:FP32",) and conv.grid == ("16", "24", "26", "28", "32")
    chip = chips.load("bm1686")
    assert chip.engines["tiu"].matrix.fill_drain == int(fill.value)
    assert chip.engines["tiu"].matrix.conv_block_cycles["float32"] == int(conv.value)
    assert found["engines.tiu.matrix.drain_hidden"].grid == ("false", "true")


def test_a_value_outside_its_grid_is_refused():
    text = "engines:\n  tiu:\n    fill_drain: 33  # [F rows=resnet50 grid=16,32]\n"
    with pytest.raises(ConfigError, match=r"fill_drain: its value 33 is not in its grid 16,32"):
        F.parameters("bm1686", text)


def test_selectors_take_training_rows_only():
    rows = F.select(ROWS, "bm1686", ["resnet50:INT8"])
    assert {(r.precision, r.batch) for r in rows} == {("INT8", 1), ("INT8", 4)}
    assert F.select(ROWS, "bm1686", ["resnet50:INT8:4"]) == [r for r in rows if r.batch == 4]
    with pytest.raises(ConfigError, match="names validation rows"):
        F.select(ROWS, "bm1684", ["yolov8s"])
    with pytest.raises(ConfigError, match="no bm1684 row"):
        F.select(ROWS, "bm1684", ["resnet50:FP16"])


def test_values_and_accuracy_written_back(tmp_path):
    path = F.yaml_path("bm1686")
    params = F.parameters("bm1686")
    values = {p.key: p.value for p in params} | {"engines.tiu.matrix.fill_drain": "56"}
    block = {"networks": 5, "rows": 16, "mean_error": 9.5, "worst_error": -23.2, "worst_row": "c3d FP32 b1"}
    text = F.with_accuracy(F.with_values(path.read_text(), params, values), block)
    assert F.with_accuracy(text, block) == text  # the block replaced, not added again
    assert {p.key: p.value for p in F.parameters("bm1686", text)}["engines.tiu.matrix.fill_drain"] == "56"
    out = tmp_path / "bm1686.yaml"
    out.write_text(text)
    chip = chips.load(out)
    assert chip.engines["tiu"].matrix.fill_drain == 56
    assert (chip.accuracy.networks, chip.accuracy.mean_error, chip.accuracy.worst_error) == (5, 9.5, -23.2)
    assert str(chip.accuracy) == "validated on 5 networks: mean error 10%, worst 23% (c3d FP32 b1)"


@pytest.mark.parametrize("field, value, message", [
    ("mean_error", "-1%", "at least 0"),
    ("worst_error", "2%", "below the mean"),
    ("networks", "many", "networks"),
])
def test_bad_accuracy_is_a_config_error(field, value, message):
    block = {"networks": 3, "rows": 5, "mean_error": "8%", "worst_error": "-21%", "worst_row": "x FP32 b1"} | {field: value}
    with pytest.raises(ConfigError, match=message):
        chips.load("bm1684", overrides={"accuracy": block})


def test_validate_table_read_back_and_plotted(tmp_path):
    train = next(r for r in ROWS if r.split == "train")
    held = next(r for r in ROWS if r.split == "validation")
    outcomes = [V.Outcome(train, train.published_ms * 1.1), V.Outcome(held, held.published_ms * 0.8), V.Outcome(ROWS[-1], None, "why")]
    V.write_csv(outcomes, tmp_path / "t.csv")
    back = V.read_csv(tmp_path / "t.csv", ROWS)
    assert [(o.row, o.ms) for o in back[:2]] == [(train, pytest.approx(train.published_ms * 1.1, rel=1e-3)),
                                                (held, pytest.approx(held.published_ms * 0.8, rel=1e-3))]
    assert back[2].ms is None
    V.plot(back, tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ConfigError, match="no row was simulated"):
        V.plot(back[2:], tmp_path / "q.png")


def test_accuracy_read_from_a_validate_table(tmp_path):
    held = [r for r in ROWS if r.chip == "bm1686" and r.split == "validation"]
    errors = [5.0, -12.0, 3.0] + [1.0] * (len(held) - 3)
    outcomes = [V.Outcome(r, r.published_ms * (1 + e / 100)) for r, e in zip(held, errors)]
    V.write_csv(outcomes, tmp_path / "t.csv")
    block = F.measure("bm1686", ROWS, table=tmp_path / "t.csv")
    assert block["rows"] == len(held) and block["networks"] == len({r.network for r in held})
    assert block["mean_error"] == pytest.approx(sum(map(abs, errors)) / len(held), abs=0.06)
    assert block["worst_error"] == pytest.approx(-12.0, abs=0.2)
    assert block["worst_row"] == f"{held[1].network} {held[1].precision} b{held[1].batch}"
    V.write_csv(outcomes[1:], tmp_path / "short.csv")
    with pytest.raises(ConfigError, match=f"has {len(held) - 1} of bm1686's {len(held)} validation rows"):
        F.measure("bm1686", ROWS, table=tmp_path / "short.csv")
    assert F.main(["--chip", "bm1686", "--from-csv", str(tmp_path / "t.csv"), "--dry-run"]) == 2  # without --no-fit


def test_summary_prints_each_chip_and_the_targets():
    resnet = [r for r in ROWS if r.chip == "bm1684" and r.network == "resnet50"]
    held = [r for r in ROWS if r.chip == "bm1684" and r.split == "validation"][:2]
    outcomes = [V.Outcome(resnet[0], resnet[0].published_ms * 1.2), V.Outcome(resnet[1], resnet[1].published_ms * 0.96)]
    outcomes += [V.Outcome(held[0], held[0].published_ms * 1.05), V.Outcome(held[1], held[1].published_ms * 0.6)]
    text = V.summary(outcomes)
    assert "  bm1684: 2 rows (1 networks), mean absolute error 12.0%" in text
    assert "  not met  train mean absolute error 12.0% <= 10%" in text
    assert "  not met  validation mean absolute error 22.5% <= 12%" in text
    assert "  not met  validation rows within +-30%: 1 of 2" in text
    assert "  not met  ResNet-50 rows within +-15%: +20.0, -4.0" in text
    assert "  met      ResNet-50 rows within +-15%: -4.0" in V.summary(outcomes[1:2])


def test_refit_on_a_small_training_subset_gives_the_committed_value():
    """bm1686's DMA latency refitted on one of the rows it was fitted on (ResNet-50 INT8 batch 1),
    over its committed value and the grid's neighbours: the committed value again (two or three
    ResNet-50 runs, a few CPU-seconds each)."""
    p = next(p for p in F.parameters("bm1686") if p.key == "engines.gdma.latency")
    i = p.grid.index(p.value)
    small = dataclasses.replace(p, rows=("resnet50:INT8:1",), grid=p.grid[max(i - 1, 0):i + 2])
    values = F.fit("bm1686", [small], ROWS)
    assert float(values[p.key]) == pytest.approx(float(p.value), rel=0.01)
