"""Chip YAML loading: units, the YAML reader, the shipped chips, overrides, and every kind of bad file."""

import copy
import re

import pytest

import chips
from chips import units
from chips.loader import apply_overrides, from_raw
from isa import yamlfile
from isa.errors import ConfigError

# ---- units -----------------------------------------------------------------------------------

CLOCK = 550e6


@pytest.mark.parametrize(
    "parse, value, expected",
    [
        (units.size, "512KiB", 512 * 1024),
        (units.size, "12GiB", 12 * 2**30),
        (units.size, "64B", 64),
        (units.size, "1.5MB", 1_500_000),
        (units.size, "32 kB", 32_000),
        (units.size, 4096, 4096),
        (units.size, "4096", 4096),
        (units.count, 64, 64),
        (units.count, "8", 8),
        (units.frequency, "550MHz", 550e6),
        (units.frequency, "1.1GHz", 1.1e9),
        (units.frequency, 1e9, 1e9),
        (units.frequency, "1410e6", 1.41e9),  # PyYAML reads 1410e6 as a string
        (units.frequency, 1000, 1000.0),
        (lambda v: units.bandwidth(v, CLOCK), "32GB/s", 32e9 / 550e6),
        (lambda v: units.bandwidth(v, 1e9), "25.6GB/s", 25.6),
        (lambda v: units.bandwidth(v, 1e9), "1TB/s", 1000.0),
        (lambda v: units.bandwidth(v, 1e9), "64GiB/s", 64 * 2**30 / 1e9),
        (lambda v: units.bandwidth(v, CLOCK), "64B/cycle", 64.0),
        (lambda v: units.bandwidth(v, CLOCK), 8192, 8192.0),
        (lambda v: units.bandwidth(v, CLOCK), 0.5, 0.5),
        (lambda v: units.latency(v, CLOCK), 100, 100),
        (lambda v: units.latency(v, CLOCK), 0, 0),
        (lambda v: units.latency(v, CLOCK), "80ns", 44),  # exactly 44: no float rounding up to 45
        (lambda v: units.latency(v, CLOCK), "1us", 550),
        (lambda v: units.latency(v, CLOCK), "1ns", 1),  # 0.55 cycles, rounded up
        (lambda v: units.latency(v, CLOCK), "100cycles", 100),
    ],
)
def test_units_parse(parse, value, expected):
    result = parse(value)
    assert result == pytest.approx(expected, rel=1e-12)
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    "parse, value, match",
    [
        (units.size, "512XiB", "unknown unit 'XiB'"),
        (units.size, True, "boolean"),
        (units.size, -4096, "must be >= 1"),
        (units.size, 0, "must be >= 1"),
        (units.size, "1.5B", "not a whole number"),
        (units.size, None, "got nothing"),
        (units.size, [64], "got a list"),
        (units.size, "big", "expected a size"),
        (units.count, "64KiB", "unknown unit 'KiB'"),
        (units.count, 2.5, "not a whole number"),
        (units.count, False, "boolean"),
        (units.frequency, "550 MHZ", "unknown unit 'MHZ'"),
        (units.frequency, "1.2.3GHz", "expected a frequency"),
        (units.frequency, 0, "must be > 0"),
        (units.frequency, float("inf"), "expected a frequency"),
        (lambda v: units.bandwidth(v, CLOCK), "32Gbps", "unknown unit 'Gbps'"),
        (lambda v: units.bandwidth(v, CLOCK), "-1GB/s", "must be > 0"),
        (lambda v: units.bandwidth(v, CLOCK), True, "boolean"),
        (lambda v: units.latency(v, CLOCK), -1, "must be >= 0"),
        (lambda v: units.latency(v, CLOCK), 2.5, "not a whole number"),
        (lambda v: units.latency(v, CLOCK), "5min", "unknown unit 'min'"),
        (lambda v: units.latency(v, CLOCK), "on", "expected a latency"),
    ],
)
def test_units_reject(parse, value, match):
    with pytest.raises(ValueError, match=re.escape(match)):
        parse(value)


# ---- the YAML reader -------------------------------------------------------------------------

def test_yamlfile_remembers_lines():
    data = yamlfile.parse("a: 1\nb:\n  - x\n  - {c: 2}\nd: [1, 2]\n", "f.yaml")
    assert data == {"a": 1, "b": ["x", {"c": 2}], "d": [1, 2]}
    assert (data.line, data.line_of("a"), data.line_of("b"), data.line_of("d")) == (1, 1, 2, 5)
    assert (data["b"].line_of(0), data["b"].line_of(1), data["b"][1].line) == (3, 4, 4)
    assert data.line_of("missing") == 1


def test_yamlfile_merge_keys_and_copies_keep_lines():
    data = yamlfile.parse("base: &b {p: 1, q: 2}\nm:\n  <<: *b\n  q: 3\n", "f.yaml")
    assert data["m"] == {"p": 1, "q": 3}
    assert data["m"].line_of("q") == 4
    copied = copy.deepcopy(data)
    assert copied == data and copied["m"].line_of("q") == 4


@pytest.mark.parametrize(
    "text, match",
    [
        ("a: 1\nb: 2\na: 3\n", r"f\.yaml:3: duplicate key 'a' \(first at line 1\)"),
        ("a: [1, 2\n", r"f\.yaml:\d+: .*flow sequence"),
        ("a: 1\n b: 2\n", r"f\.yaml:2: "),
        ("a: !!python/object/apply:os.system [ls]\n", r"f\.yaml:1: "),
        ("!!python/object:os.system {}\n", r"f\.yaml:1: unsupported tag"),
        ("a: &x [*x]\n", r"f\.yaml:1: an alias refers to a collection that contains it"),
        ("? [1]\n: 2\n", r"f\.yaml:1: a mapping key must be a plain value"),
    ],
)
def test_yamlfile_errors(text, match):
    with pytest.raises(ConfigError, match=match):
        yamlfile.parse(text, "f.yaml")


def test_yamlfile_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"nope.yaml: cannot read"):
        yamlfile.read(tmp_path / "nope.yaml")


# ---- the shipped chips -----------------------------------------------------------------------

def test_available_lists_the_shipped_chips():
    names = chips.available()
    assert names == sorted(names)
    assert {"bm1684", "generic"} <= set(names)


@pytest.mark.parametrize("name", chips.available())
def test_every_shipped_chip_loads_under_its_own_name(name):
    chip = chips.load(name)
    assert isinstance(chip, chips.Chip)
    assert chip.name == name
    assert chip.source.endswith(f"{name}.yaml")
    assert chip.memories["ddr"].kind == "global"


def test_aliases_are_unique_and_resolve():
    seen = set(chips.available())
    for name in chips.available():
        for alias in _raw_aliases(name):
            assert alias not in seen, f"alias {alias} of {name} is taken"
            seen.add(alias)
            assert chips.load(alias).name == name


def _raw_aliases(name):
    return yamlfile.read(chips.SHIPPED_DIR / f"{name}.yaml").get("aliases", [])


def test_bm1684_figures():
    chip = chips.load("bm1684")
    assert chip.clock_hz == 550e6
    ddr, lmem = chip.memories["ddr"], chip.memories["lmem"]
    assert ddr.bandwidth == pytest.approx(32e9 / 550e6)
    assert ddr.capacity == 12 * 2**30
    assert ddr.align == 512
    assert lmem.capacity == 32 * 2**20
    assert (lmem.size, lmem.lanes, lmem.banks, lmem.granule) == (512 * 1024, 64, 8, 128 * 64)
    (gdma,) = chip.engines_of("dma")
    assert set(gdma.links) == {("ddr", "lmem"), ("lmem", "ddr"), ("ddr", "ddr"), ("lmem", "lmem")}
    tiu = chip.engines["tiu"]
    assert tiu.kinds == ("vector", "matrix") and tiu.memory == "lmem"
    assert chip.engines_of("vector") == chip.engines_of("matrix") == [tiu]
    assert tiu.vector.lanes * tiu.vector.per_lane["float32"] == 64 * 32


def test_bm1684_matrix_peaks_match_the_vendor_figures():
    chip = chips.load("bm1684")
    mx = chip.engines["tiu"].matrix

    def peak_ops(dtype):
        return 2 * mx.m * mx.n * mx.depth(dtype) / mx.block_cycles[dtype] * chip.clock_hz

    assert peak_ops("float32") == pytest.approx(2.2e12, rel=0.03)  # vendor 2.2 TFLOPS
    assert peak_ops("int8") == pytest.approx(17.6e12, rel=0.03)  # vendor 17.6 TOPS


def test_bm1684_op_table_is_the_seeds():
    chip = chips.load("bm1684")
    assert chip.support("matrix_mul").kind == "global"
    assert chip.support("add").compute == {"int32": "float32"}
    assert "int16" in chip.support("add").mixed_out
    assert chip.support("mul").mixed_in == {"int8", "uint8"}
    assert chip.support("max").mixed_in == frozenset()
    assert chip.support("active.relu").dtypes == {"float32", "int8", "uint8", "int16", "uint16"}
    assert chip.support("active.tanh").dtypes == {"float32"}  # falls back to the "active" row
    assert chip.support("gather") is None


def test_generic_figures():
    chip = chips.load("generic")
    assert chip.clock_hz == 1e9
    dmas = chip.engines_of("dma")
    assert [e.name for e in dmas] == ["dma_in", "dma_out"]
    assert all(e.bandwidth == 64.0 for e in dmas)
    assert chip.memories["lmem"].capacity == 8 * 2**20
    mx = chip.engines["mxu"].matrix
    assert mx.fill_drain == mx.m + mx.n - 2
    assert chip.support("anything.at_all").dtypes is None  # the "*" row: every dtype
    from isa import dtypes

    assert set(chip.engines["vpu"].vector.per_lane) == set(dtypes.NAMES)


def test_unknown_chip_lists_the_available_ones():
    with pytest.raises(ConfigError, match=r"unknown chip 'bm9999' \(available: .*bm1684.*generic"):
        chips.load("bm9999")


def test_chip_names_are_case_insensitive():
    assert chips.load("BM1684").name == "bm1684"


# ---- overrides -------------------------------------------------------------------------------

def test_override_changes_the_value_and_only_that_load():
    fast = chips.load("bm1684", overrides={"memories.ddr.bandwidth": "68GB/s"})
    assert fast.memories["ddr"].bandwidth == pytest.approx(68e9 / 550e6)
    assert chips.load("bm1684").memories["ddr"].bandwidth == pytest.approx(32e9 / 550e6)


@pytest.mark.parametrize(
    "key, value, check",
    [
        ("memories.lmem.banks", "16", lambda c: c.memories["lmem"].banks == 16),
        ("memories.lmem.size", "1MiB", lambda c: c.memories["lmem"].capacity == 64 * 2**20),
        ("clock", "1GHz", lambda c: c.clock_hz == 1e9 and c.memories["ddr"].bandwidth == 32.0),
        ("clock", "1410e6", lambda c: c.clock_hz == 1.41e9),
        ("engines.gdma.links", "[ddr->lmem, lmem->ddr]", lambda c: len(c.engines["gdma"].links) == 2),
        ("ops.active.relu.dtypes", "[float32]", lambda c: c.support("active.relu").dtypes == {"float32"}),
        ("ops.add.kind", "global", lambda c: c.support("add").kind == "global"),
        ("memories.ddr.latency", "80ns", lambda c: c.memories["ddr"].latency == 44),
        ("engines.tiu.vector.op_cycles.exp", 2, lambda c: c.engines["tiu"].vector.op_cycles["exp"] == 2),
        ("engines.gdma.in_flight", 2, lambda c: c.engines["gdma"].in_flight == 2),
    ],
)
def test_overrides(key, value, check):
    assert check(chips.load("bm1684", overrides={key: value}))


@pytest.mark.parametrize(
    "key, value, match",
    [
        ("memories.ddr.bandwith", "68GB/s", r"override memories\.ddr\.bandwith=68GB/s: unknown key 'bandwith' \(known: .*bandwidth"),
        ("memories.ddr.size.x", "1", r"override memories\.ddr\.size\.x=1: memories\.ddr\.size is .* not a mapping"),
        ("memories.sram.size", "1MiB", r"override memories\.sram\.size=1MiB: memories has no key 'sram' \(known: ddr, lmem\)"),
        ("memories.ddr.size", "true", r"override memories\.ddr\.size=true: .*boolean"),
        ("memories.ddr.bandwidth", "fast", r"override memories\.ddr\.bandwidth=fast: expected a bandwidth"),
        ("ops.add.dtypes", "[float32, int9]", r"override ops\.add\.dtypes=.*: ops\.add\.dtypes\[1\]: unknown dtype 'int9'"),
        ("clock", "[1", r"override clock=\[1: not a YAML value"),
        ("engines.gdma.in_flight", "0", r"override engines\.gdma\.in_flight=0: 0 must be >= 1"),
        ("engines.tiu.in_flight", "2", r"override engines\.tiu\.in_flight=2: 'in_flight' belongs to dma engines"),
        ("engines.tiu.kind", "scalar", (r"bm1684\.yaml:\d+: engines\.tiu\.memory: 'memory' belongs to "
                                       r"vector or matrix engines, and this engine's kind is scalar")),
    ],
)
def test_bad_overrides_name_the_key(key, value, match):
    with pytest.raises(ConfigError, match=match):
        chips.load("bm1684", overrides={key: value})


def test_apply_overrides_copies():
    raw = yamlfile.parse("memories:\n  ddr: {size: 1GiB}\n", "f.yaml")
    changed = apply_overrides(raw, {"memories.ddr.size": "2GiB", "memories.ddr.burst": "64"})
    assert changed["memories"]["ddr"] == {"size": "2GiB", "burst": 64}
    assert raw["memories"]["ddr"] == {"size": "1GiB"}


# ---- malformed chip files --------------------------------------------------------------------

MINIMAL = """\
name: tiny
description: a test chip
clock: 1GHz
memories:
  ddr: {kind: global, size: 1GiB, bandwidth: 16GB/s, latency: 10}
  sram:
    kind: local
    size: 64KiB
    lanes: 4
    bandwidth: 256
engines:
  dma:
    kind: dma
    links: [ddr->sram, sram->ddr]
    bandwidth: 16GB/s
  vpu:
    kind: vector
    memory: sram
    vector:
      lanes: 4
      per_lane: {float32: 4, int8: 16}
  mxu:
    kind: matrix
    memory: sram
    matrix: {m: 4, n: 4, k: 1, block_cycles: {int8: 1}, fill_drain: 6}
ops:
  add: {dtypes: [float32, int8]}
  active.relu: {dtypes: [int8]}
  "*": {kind: global}
"""


def write_chip(tmp_path, old=None, new=None, text=MINIMAL):
    if old is not None:
        assert old in text, f"test template has no {old!r}"
        text = text.replace(old, new, 1)
    path = tmp_path / "tiny.yaml"
    path.write_text(text)
    return path


def test_minimal_chip_loads(tmp_path):
    chip = chips.load(write_chip(tmp_path))
    assert chip.memories["sram"].capacity == 4 * 64 * 1024
    assert chip.memories["ddr"].bandwidth == 16.0
    assert chip.engines["dma"].links == (("ddr", "sram"), ("sram", "ddr"))
    assert chip.engines["mxu"].operand_memory("a") == "sram"
    assert chip.support("mul").kind == "global"


def test_a_chip_path_may_be_a_string(tmp_path):
    assert chips.load(str(write_chip(tmp_path))).name == "tiny"


@pytest.mark.parametrize(
    "old, new, match",
    [
        # unknown key, with its line
        ("    lanes: 4\n    bandwidth: 256", "    lanes: 4\n    bandwith: 256",
         r"tiny\.yaml:10: memories\.sram\.bandwith: unknown key 'bandwith' \(known: "),
        # missing required key
        ("    size: 64KiB\n", "", r"tiny\.yaml:6: memories\.sram: missing required key 'size'"),
        ("clock: 1GHz\n", "", r"tiny\.yaml:1: missing required key 'clock'"),
        # bad unit, bool where a number is expected, wrong types
        ("size: 64KiB", "size: 64KiBB", r"tiny\.yaml:8: memories\.sram\.size: .*unknown unit 'KiBB'"),
        ("lanes: 4\n    bandwidth", "lanes: on\n    bandwidth", r"memories\.sram\.lanes: .*boolean"),
        ("latency: 10", "latency: yes", r"memories\.ddr\.latency: .*boolean"),
        ("size: 1GiB", "size: -1GiB", r"memories\.ddr\.size: .*must be >= 1"),
        ("description: a test chip", "description: [a]", r"description: expected a string, got a list"),
        ("clock: 1GHz", "clock: fast", r"clock: expected a frequency"),
        ("      lanes: 4\n", "      lanes: 4.5\n", r"engines\.vpu\.vector\.lanes: .*not a whole number"),
        ("kind: local", "kind: onchip", r"memories\.sram\.kind: expected one of global, local"),
        # memories: ddr rules
        ("  ddr: {", "  dram: {", r"memories: no memory named 'ddr'"),
        ("kind: local", "kind: global", r"memories\.sram\.kind: sram is global: ddr must be the one global memory"),
        # engines
        ("    memory: sram\n    vector", "    memory: l1\n    vector", (r"engines\.vpu\.memory: unknown "
                                                                       r"memory 'l1' \(memories: ddr, sram\)")),
        ("    memory: sram\n    vector", "    memory: ddr\n    vector", r"engines\.vpu\.memory: memory 'ddr' is global"),
        ("links: [ddr->sram, sram->ddr]", "links: [ddr->sram, sram->l2]", r"engines\.dma\.links\[1\]: unknown memory 'l2'"),
        ("links: [ddr->sram, sram->ddr]", "links: [ddr-sram]", r"engines\.dma\.links\[0\]: expected a link such as 'ddr->lmem'"),
        ("links: [ddr->sram, sram->ddr]", "links: []", r"engines\.dma\.links: expected at least 1 item"),
        ("    links: [ddr->sram, sram->ddr]\n", "", r"engines\.dma: missing required key 'links'"),
        ("    kind: vector", "    kind: scalar", (r"engines\.vpu\.memory: 'memory' belongs to vector or "
                                                 r"matrix engines, and this engine's kind is scalar")),
        ("    kind: vector", "    kind: [vector, scalar]", r"engines\.vpu: missing required key 'scalar'"),
        ("    kind: vector", "    kind: [vector, tensor]", r"engines\.vpu\.kind: unknown engine kind 'tensor'"),
        ("    kind: vector", "    kind: [vector, vector]", r"engines\.vpu\.kind: expected distinct engine kinds"),
        ("    kind: vector", "    kind: matrix", (r"engines\.vpu\.vector: 'vector' belongs to vector "
                                                 r"engines, and this engine's kind is matrix")),
        ("    bandwidth: 16GB/s\n", "    bandwidth: 16GB/s\n    memory: sram\n", (r"engines\.dma\.memory: 'memory' "
                                                                                 r"belongs to vector or matrix engines")),
        ("block_cycles: {int8: 1}", "block_cycles: {int8: 1}, a: ddr", r"engines\.mxu\.matrix\.a: memory 'ddr' is global"),
        ("block_cycles: {int8: 1}", "block_cycles: {int8: 1}, conv_block_cycles: {float16: 2}",
         r"engines\.mxu\.matrix\.conv_block_cycles: dtype float16 has no block_cycles \(the unit's dtypes: int8\)"),
        ("    bandwidth: 16GB/s\n", "    bandwidth: 16GB/s\n    link_bandwidth: {sram->sram: 8GB/s}\n",
         r"engines\.dma\.link_bandwidth: link sram->sram is not one of the engine's links \(ddr->sram, sram->ddr\)"),
        ("    bandwidth: 16GB/s\n", "    bandwidth: 16GB/s\n    link_bandwidth: {ddr->sram: fast}\n",
         r"engines\.dma\.link_bandwidth\.ddr->sram: expected a bandwidth"),
        ("      per_lane: {float32: 4, int8: 16}\n", "      per_lane: {float32: 4, int8: 16}\n      op_cycles: {erf: 9}\n",
         r"engines\.vpu\.vector\.op_cycles\.erf: unknown vector function 'erf'"),
        ("  dma:\n", "  dma.0:\n", r"engines\.dma\.0: bad name 'dma\.0'"),
        # dtypes and ops
        ("per_lane: {float32: 4, int8: 16}", "per_lane: {float32: 4, int9: 16}", (r"engines\.vpu\.vector\.per_lane\.int9: "
                                                                                 r"unknown dtype 'int9'")),
        ("add: {dtypes: [float32, int8]}", "add: {dtypes: [float32, fp8]}", r"tiny\.yaml:27: ops\.add\.dtypes\[1\]: unknown dtype 'fp8'"),
        ("add: {dtypes: [float32, int8]}", "add: {dtypes: [float32], compute: {int8: int3}}", (r"ops\.add\.compute\.int8: "
                                                                                              r"unknown dtype 'int3'")),
        ("add: {dtypes: [float32, int8]}", "add: {mixed: {in: [int8]}}", r"ops\.add\.mixed: missing required key 'out'"),
        ("add: {dtypes: [float32, int8]}", "add: {kind: fused}", r"ops\.add\.kind: expected one of local, global"),
        ("  add: {", "  matmul: {", r"ops\.matmul: unknown op 'matmul'"),
        ("  active.relu: {", "  active.relu6: {", r"ops\.active\.relu6: unknown variant 'relu6' of op active \(known: .*relu"),
        ("  active.relu: {", "  add.relu: {", r"ops\.add\.relu: unknown variant 'relu' of op add \(add has no variants\)"),
        ("  active.relu: {dtypes: [int8]}", "  active.relu:", r"ops\.active\.relu: expected a mapping, got nothing"),
        # the YAML itself
        ("  sram:\n", "  ddr:\n", r"tiny\.yaml:6: duplicate key 'ddr' \(first at line 5\)"),
        ("name: tiny\n", "name: tiny\nname: small\n", r"tiny\.yaml:2: duplicate key 'name'"),
        ("clock: 1GHz\n", "clock: [1GHz\n", r"tiny\.yaml:\d+: "),
    ],
)
def test_malformed_chip_names_file_and_key(tmp_path, old, new, match):
    path = write_chip(tmp_path, old, new)
    with pytest.raises(ConfigError, match=match):
        chips.load(path)


def test_error_names_the_file_path(tmp_path):
    path = write_chip(tmp_path, "size: 64KiB", "size: 64XiB")
    with pytest.raises(ConfigError) as info:
        chips.load(path)
    assert str(info.value).startswith(f"{path}:8: memories.sram.size: ")


def test_empty_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match=r"tiny\.yaml: expected a mapping, got nothing"):
        chips.load(write_chip(tmp_path, text=""))


def test_missing_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        chips.load(tmp_path / "absent.yaml")


def test_from_raw_accepts_plain_python_data():
    raw = {
        "name": "plain", "description": "no lines", "clock": 1e9,
        "memories": {"ddr": {"kind": "global", "size": 2**30, "bandwidth": 8}},
        "engines": {"dma": {"kind": "dma", "links": ["ddr->ddr"], "bandwidth": "8GB/s"}},
        "ops": {"*": {}},
    }
    assert from_raw(raw, "plain").engines["dma"].bandwidth == 8.0
    raw["memories"]["ddr"]["banks"] = True
    with pytest.raises(ConfigError, match=r"^plain: memories\.ddr\.banks: .*boolean"):
        from_raw(raw, "plain")
