"""Every shipped chip's matrix peak and DDR bandwidth against its published figures
(docs/sources.md), within the issue's 2%.

The peak is read off the YAML (m * n * k / block_cycles[dtype] multiply-accumulates a cycle per
matrix engine, 2 ops each, at the clock, over every core's engine) and must agree with
sim/peaks.py, which the traces and plots use.

Units. Sophgo's and Huawei's peaks are in "binary" tera-ops, 1024 x 10^9 ops/s: read so, each of
their figures is the hardware's exactly, and read as 10^12 each is 2.4% low:
  BM1684   64 lanes x 256 int8 MAC x 2 x 550 MHz = 18,022 GOPS = 17.6 x 1024  (17.6 TOPS)
           64 lanes x 32 fp32 MAC x 2 x 550 MHz  =  2,253 GFLOPS = 2.2 x 1024  (2.2 TFLOPS)
  BM1684X  16384 int8 MAC x 2 x 1 GHz = 32,768 GOPS = 32 x 1024; fp16 16 x 1024; fp32 2 x 1024
  310B4    8192 int8 MAC x 2 x 500 MHz = 8,192 GOPS = 8 x 1024; fp16 4 x 1024
  910A     32 cores x 4096 fp16 MAC x 2 x 1 GHz = 262,144 GFLOPS, published as 256 TFLOPS
           (docs/sources.md#ascend-peaks): the same unit, from the .ini figures alone.
Google's TPU v1 figure is decimal (65,536 MAC x 2 x 700 MHz = 91.75 x 10^12, "92 TeraOps/s").
"""

import pytest

import chips
from sim.peaks import peak_ops

T = 1e12  # a decimal tera
T_1024 = 1.024e12  # a "binary" tera: 1024 x 10^9 (module docstring)
GB = 1e9
TOLERANCE = 0.02  # the issue's

# chip -> dtype -> (figure, unit, source). A figure a source derived rather than read is marked so.
PEAKS = {
    "bm1684": {
        "int8": (17.6, T_1024, "sophgo/tpu-perf run.py peak table (docs/sources.md#sophgo-published-times); sophon-demo FAQ 6.4"),
        "float32": (2.2, T_1024, "sophgo/tpu-perf run.py peak table (docs/sources.md#sophgo-published-times)"),
    },
    "bm1686": {
        "int8": (32, T_1024, "sophgo/tpu-perf run.py peak table, BM1684X (docs/sources.md#sophgo-published-times)"),
        "float16": (16, T_1024, "sophgo/tpu-perf run.py peak table, BM1684X FP16/BF16"),
        "float32": (2, T_1024, "sophgo/tpu-perf run.py peak table, BM1684X"),
    },
    "ascend310b": {
        "int8": (8, T_1024, "Atlas 200I DK A2 product page pd_0004 (docs/sources.md#ascend-ai-core)"),
        "float16": (4, T_1024, "Atlas 200I DK A2 product page pd_0004"),
    },
    "ascend910b": {  # no published figure was found: docs/sources.md#ascend-peaks derives these from the 910B2 .ini
        "int8": (708, T, "derived: 24 cores x 8192 MAC x 2 x 1.8 GHz (docs/sources.md#ascend-peaks [D])"),
        "float16": (354, T, "derived: 24 cores x 4096 MAC x 2 x 1.8 GHz (docs/sources.md#ascend-peaks [D])"),
    },
    "tpu_v1": {
        "int8": (92, T, "Jouppi et al. ISCA 2017, abstract: 92 TeraOps/second (docs/sources.md#google-tpu-v1)"),
    },
    "bm1682": {  # no Sophgo source: a third-party table's figure, which the YAML's clock was chosen to give
        "float32": (3, T, "third-party comparison table, '3TFLOPS@FP32' on the SE3 (docs/sources.md#sophgo-naming [U])"),
    },
    "generic": {  # not a real chip: the design its YAML states, a 32 x 32 array of 2-MAC cells at 1 GHz
        "int8": (4.096, T, "chips/generic.yaml: 32 x 32 cells x 2 MAC x 2 ops x 1 GHz"),
        "float16": (2.048, T, "chips/generic.yaml: half the 8-bit rate for 16 bits"),
        "float32": (1.024, T, "chips/generic.yaml: a quarter of the 8-bit rate"),
    },
}

# chip -> (DDR bytes per second, source); None where no figure is published
DDR = {
    "bm1684": (32 * GB, "sophgo/tpu-perf run.py peak table (docs/sources.md#sophgo-published-times)"),
    "bm1686": (64 * GB, "sophgo/tpu-perf run.py peak table, BM1684X"),
    "ascend310b": (25.6 * GB, "Atlas 200I DK A2: LPDDR4X 3200 Mbps x 64 bit (docs/sources.md#ascend-ai-core [D])"),
    "ascend910b": None,  # the HBM bandwidth was not found (docs/sources.md#gaps)
    "tpu_v1": (34 * GB, "paper Table 2 via S1 (docs/sources.md#google-tpu-v1)"),
    "bm1682": None,  # no BM1682 figure (chips/bm1682.yaml takes BM1684's 32 GB/s)
    "generic": (64 * GB, "chips/generic.yaml"),
}


def yaml_peak(chip, dtype):
    """ops/s in `dtype` from the YAML's matrix engines (every core's): m*n*k/block_cycles MACs a cycle, 2 ops each."""
    units = [e.matrix for e in chip.engines_of("matrix") if dtype in e.matrix.block_cycles]
    return sum(2 * u.m * u.n * u.depth(dtype) / u.block_cycles[dtype] for u in units) * chip.clock_hz


def published(name):
    if name not in PEAKS:
        pytest.fail(f"chip {name} is shipped but has no published peak here: add it to PEAKS and DDR, with its source")
    return PEAKS[name]


@pytest.mark.parametrize("name", chips.available())
def test_every_published_peak_is_the_models_within_2_percent(name):
    chip = chips.load(name)
    figures = published(name)
    for dtype, (figure, unit, source) in figures.items():
        peak = yaml_peak(chip, dtype)
        assert peak == pytest.approx(figure * unit, rel=TOLERANCE), f"{name} {dtype}: {peak / unit:.3f} vs {figure} ({source})"
        assert peak_ops(chip)["matrix"][dtype] * chip.clock_hz == pytest.approx(peak)  # what the traces carry


@pytest.mark.parametrize("name", [name for name, figure in DDR.items() if figure is not None])
def test_ddr_bandwidth_is_the_published_figure(name):
    figure, source = DDR[name]
    chip = chips.load(name)
    assert chip.memories["ddr"].bandwidth * chip.clock_hz == pytest.approx(figure), source


def test_the_binary_tera_is_what_makes_the_vendor_figures_exact():
    """Read as decimal, the Sophgo and Ascend peaks would be 2.4% under the hardware's (outside
    the 2%); read as 1024 x 10^9 they are the hardware's to 0.1%."""
    for name in ("bm1684", "bm1686", "ascend310b"):
        chip = chips.load(name)
        for dtype, (figure, unit, _) in PEAKS[name].items():
            assert unit == T_1024
            peak = yaml_peak(chip, dtype)
            assert peak == pytest.approx(figure * T_1024, rel=0.001)
            assert peak / (figure * T) - 1 == pytest.approx(0.024, abs=0.001)


def test_tpu_v1_is_65536_int8_macs_at_700_mhz():
    chip = chips.load("tpu_v1")
    assert chip.clock_hz == 700e6
    assert yaml_peak(chip, "int8") == 65536 * 2 * 700e6
