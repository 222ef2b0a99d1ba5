"""Field conversion of extractors never raises on numbers beyond any range (found by
tests/fuzz: a size such as ``1e400 GiB`` overflowed to infinity and escaped the diagnosis)."""

from __future__ import annotations

import pytest

from attribution.rules.extract import _convert
from attribution.rules.schema import FieldSpec


@pytest.mark.parametrize("value", ["1e400 GiB", "1e308 TiB"])
def test_a_size_beyond_any_range_is_kept_as_text(value: str) -> None:
    assert _convert(value, FieldSpec(group="x", type="bytes")) == value


def test_a_size_of_many_digits_is_a_number() -> None:
    assert _convert("9" * 400 + " GB", FieldSpec(group="x", type="bytes")) == int("9" * 400) * 10**9


def test_a_size_is_read() -> None:
    assert _convert("2.00 GiB", FieldSpec(group="x", type="bytes")) == 2 << 30
