from pathlib import Path

import pytest

import chips

TEST_CHIPS = Path(__file__).parent / "chips"


@pytest.fixture(scope="session")
def tiny():
    return chips.load(TEST_CHIPS / "tiny.yaml")


@pytest.fixture(scope="session")
def three_level():
    return chips.load(TEST_CHIPS / "three_level.yaml")
