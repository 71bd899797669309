"""The published-times dataset (docs/data/published.csv) and its loader (bench/validate.py): every
row has a source and a builder, each network sits in one split, the split is the stated rule's,
and the coverage is what the issue asks for. Bad rows are ConfigErrors naming the line and column."""

import csv
import re
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from isa.errors import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import validate as V

ROWS = V.load()


def by(key):
    out = defaultdict(set)
    for r in ROWS:
        out[getattr(r, key)].add(r.split)
    return out


def test_coverage():
    assert len(ROWS) >= 40
    assert len({r.network for r in ROWS}) >= 12
    assert {"bm1684", "bm1686"} <= {r.chip for r in ROWS}
    assert {"FP32", "FP16", "INT8"} == {r.precision for r in ROWS}
    assert {1, 4} <= {r.batch for r in ROWS}
    assert {r.precision for r in ROWS if r.chip == "bm1684"} == {"FP32", "INT8"}  # BM1684 has no FP16
    assert len({(r.network, r.chip, r.precision, r.batch, r.input_shape) for r in ROWS}) == len(ROWS)  # one row per key


def test_every_row_has_its_source():
    for r in ROWS:
        f = r.fields
        assert f["measures"] and f["source"] and f["source_path"], r.line
        if f["source"] == "github:sophgo/sophon-demo":
            assert re.fullmatch(r"[0-9a-f]{40}", f["source_commit"]), r.line
            assert re.fullmatch(r"sample/[\w-]+/README\.md, .+", f["source_path"]), r.line
            assert f["model_file"].startswith(f"{f['vendor_chip']}/") and f["model_file"].endswith(".bmodel"), r.line
            assert f"_{r.precision.lower()}_{r.batch}b" in f["model_file"], r.line
            assert "calculate time" in f["measures"], r.line
        else:
            assert f["chip"] == "tpu_v1" and "Jouppi" in f["source"] and f["source_commit"].startswith("arXiv:"), r.line


def test_each_network_and_family_sits_in_one_split():
    for key in ("network", "family"):
        mixed = {k: s for k, s in by(key).items() if len(s) > 1}
        assert not mixed, f"{key}s in both splits: {mixed}"
    train = {r.network for r in ROWS if r.split == "train"}
    validation = {r.network for r in ROWS if r.split == "validation"}
    assert train and validation and not train & validation


def test_the_split_is_the_rules_draw():
    for r in ROWS:
        assert r.split == V.draw(r.family), (r.line, r.family)
    assert {r.split for r in ROWS if r.network == "resnet50"} == {"train"}  # calibrated already
    networks = {r.network: r.split for r in ROWS}
    share = sum(s == "train" for s in networks.values()) / len(networks)
    assert 0.55 <= share <= 0.8, share  # about two thirds of the networks train


def test_the_draw_is_a_hash_of_the_family_alone():
    assert V.draw_value("yolov8") == V.draw_value("yolov8")
    assert 0 <= V.draw_value("anything") < 1
    assert V.draw("resnet50") == "train"
    values = [V.draw_value(f"family{i}") for i in range(3000)]
    assert 0.30 < sum(v < 1 / 3 for v in values) / len(values) < 0.37  # a third land in validation


def test_every_builder_resolves_and_gives_the_rows_input_shape():
    import onnx

    seen = set()
    for r in ROWS:
        key = (r.builder, tuple(sorted(r.builder_args.items())))
        if key in seen:
            continue
        seen.add(key)
        model = V.builder(r.builder)(batch=1, dtype="int8" if r.chip == "tpu_v1" else "float32", **r.builder_args)
        if isinstance(model, onnx.ModelProto):
            dims = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
        else:
            dims = model.tensors[model.inputs[0]].shape
        assert dims == (1, *r.input_shape), (r.network, dims)


@pytest.mark.parametrize("column, value, message", [
    ("chip", "bm9999", "column chip: not a shipped chip"),
    ("precision", "FP8", "column precision: expected one of FP32, FP16, INT8"),
    ("split", "test", "column split: expected one of train, validation"),
    ("published_ms", "-1", "must be positive"),
    ("published_ms", "fast", "expected an integer, a number"),
    ("source", "", "column source: empty"),
    ("builder", "yolo", "expected path/to/module.py:function"),
    ("builder_args", "size", "expected key=value pairs"),
])
def test_bad_rows_are_config_errors_naming_the_line(tmp_path, column, value, message):
    lines = V.DATASET.read_text().splitlines()
    header = lines[0].split(",")
    rows = list(csv.DictReader(lines))
    rows[2][column] = value
    path = tmp_path / "bad.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, header)
        w.writeheader()
        w.writerows(rows[:5])
    with pytest.raises(ConfigError, match=re.escape(f"{path} line 4") + ".*" + re.escape(message)):
        V.load(path)


def test_a_missing_column_or_file_is_a_config_error(tmp_path):
    path = tmp_path / "short.csv"
    path.write_text("network,chip\nresnet50,bm1684\n")
    with pytest.raises(ConfigError, match=r"columns family, variant.* missing"):
        V.load(path)
    with pytest.raises(ConfigError, match="cannot read the dataset"):
        V.load(tmp_path / "absent.csv")
    with pytest.raises(ConfigError, match="must be under examples or bench"):
        V.builder("isa/graph.py:Graph")
