"""The line reader over random bytes: NUL runs, invalid UTF-8, CR/LF mixes, huge lines, byte
order marks, compressed headers, whole files gzip or zstd compressed, cut or with junk after
them. No exception escapes, and every byte is read into the lines expected or reported."""

from __future__ import annotations

import pytest
from hypothesis import given

from .properties import (
    ENCODINGS,
    FUZZ,
    FUZZ_LIGHT,
    RawFile,
    check_no_silent_junk,
    check_reader,
    encoded_texts,
    raw_files,
)


@FUZZ
@given(raw_files())
def test_every_byte_is_read_or_reported(raw: RawFile) -> None:
    check_reader(raw)


@pytest.mark.parametrize("how", sorted(ENCODINGS))
def test_text_in_another_encoding_is_read_or_reported(how: str) -> None:
    @FUZZ_LIGHT
    @given(encoded_texts(how))
    def run(enc: object) -> None:
        check_no_silent_junk(enc)

    run()
