"""Rule text templates: placeholders, unknown values, optional segments; never code."""

from __future__ import annotations

from attribution.rules.template import placeholders, render


def test_placeholders_and_unknowns() -> None:
    assert (
        render("GPU {pci} on {node}", {"pci": "0000:3b:00", "node": "n1"}) == "GPU 0000:3b:00 on n1"
    )
    assert render("GPU {pci}", {}) == "GPU ?"
    assert render("{{literal}} {x}", {"x": 1.0}) == "{literal} 1"
    assert placeholders("a {b} [[c {d}]]") == ["b", "d"]


def test_optional_segments_keep_their_own_parentheses() -> None:
    text = "{exc}[[: {msg}]][[ (first on rank {rank})]]."
    assert (
        render(text, {"exc": "ValueError", "msg": "bad shape (3, 4)"})
        == "ValueError: bad shape (3, 4)."
    )
    assert render(text, {"exc": "ValueError", "rank": 3}) == "ValueError (first on rank 3)."
    assert (
        render("XID[[ {code} ({title})]]!", {"code": 79, "title": "fell off"})
        == "XID 79 (fell off)!"
    )


def test_no_attribute_access_or_format_specs() -> None:
    assert render("{x.__class__}", {"x": 1}) == "{x.__class__}"
    assert render("{x!r:>10}", {"x": 1}) == "{x!r:>10}"
