"""The repository's character-level tokenizer: exact round-trips, special ids, offline loading."""

from __future__ import annotations

from pathlib import Path

import pytest
import transformers  # noqa: F401 - required (make test installs the verl extra)
from hypothesis import given, settings
from hypothesis import strategies as st

from rewardbus.tokenizer import (
    BOS_TOKEN,
    EOS_TOKEN,
    PAD_TOKEN,
    VOCAB_CHARACTERS,
    build_tokenizer,
    save_tokenizer,
)

TOKENIZER = build_tokenizer()
CODE = "def f(a, b):\n\treturn (a + b) * 2  # x ,y ' \" \\ ~\n"


def test_special_tokens_have_fixed_ids() -> None:
    assert TOKENIZER.pad_token == PAD_TOKEN
    assert TOKENIZER.pad_token_id == 0
    assert TOKENIZER.convert_tokens_to_ids(EOS_TOKEN) == TOKENIZER.eos_token_id
    assert TOKENIZER.convert_tokens_to_ids(BOS_TOKEN) == TOKENIZER.bos_token_id
    assert len({TOKENIZER.pad_token_id, TOKENIZER.eos_token_id, TOKENIZER.bos_token_id}) == 3


def test_one_token_per_character_and_exact_decode() -> None:
    ids = TOKENIZER.encode(CODE, add_special_tokens=False)
    assert len(ids) == len(CODE)
    assert TOKENIZER.decode(ids) == CODE
    assert TOKENIZER.decode(ids, skip_special_tokens=True) == CODE


def test_decode_skips_special_tokens_without_inserting_spaces() -> None:
    ids = TOKENIZER.encode("a b", add_special_tokens=False)
    framed = [TOKENIZER.bos_token_id, *ids, TOKENIZER.eos_token_id, 0, 0]
    assert TOKENIZER.decode(framed, skip_special_tokens=True) == "a b"


def test_every_vocabulary_character_is_its_own_token() -> None:
    ids = TOKENIZER.encode(VOCAB_CHARACTERS, add_special_tokens=False)
    assert len(set(ids)) == len(VOCAB_CHARACTERS)
    assert TOKENIZER.unk_token_id not in ids


def test_characters_outside_the_vocabulary_become_unk() -> None:
    assert TOKENIZER.encode("é", add_special_tokens=False) == [TOKENIZER.unk_token_id]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=VOCAB_CHARACTERS, max_size=200))
def test_any_printable_ascii_text_round_trips(text: str) -> None:
    ids = TOKENIZER.encode(text, add_special_tokens=False)
    assert TOKENIZER.decode(ids, skip_special_tokens=True) == text


def test_saved_directory_loads_offline_with_auto_tokenizer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers import AutoTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    directory = save_tokenizer(tmp_path / "tok")
    loaded = AutoTokenizer.from_pretrained(str(directory))
    assert loaded.pad_token_id == 0
    assert loaded.decode(loaded.encode(CODE, add_special_tokens=False)) == CODE


def test_saved_directory_loads_with_verl_hf_tokenizer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import verl  # noqa: F401
    from verl.utils import hf_tokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    loaded = hf_tokenizer(str(save_tokenizer(tmp_path / "tok")))
    assert loaded.pad_token_id == TOKENIZER.pad_token_id
    assert loaded.eos_token_id == TOKENIZER.eos_token_id
    encoded = loaded(CODE, add_special_tokens=False)["input_ids"]
    assert loaded.decode(encoded, skip_special_tokens=True) == CODE
