"""A character-level tokenizer built in the repository, for the tiny policies of the train demo.

Nothing is downloaded: the vocabulary is the printable ASCII range plus ``"\\n"`` and
``"\\t"``, one token per character, with the special tokens ``<pad>`` (id 0), ``<eos>``,
``<bos>`` and ``<unk>`` (anything outside the vocabulary, so a stray character never
crashes encoding). It is a ``transformers.PreTrainedTokenizerFast`` over a ``tokenizers``
WordLevel model, so verl's ``hf_tokenizer(directory)`` and ``AutoTokenizer`` load a saved
copy offline.

Decoding joins characters with the ``Fuse`` decoder: the default WordLevel decoding
puts a space between tokens, which would change every program the policy writes.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

__all__ = [
    "BOS_TOKEN",
    "EOS_TOKEN",
    "PAD_TOKEN",
    "UNK_TOKEN",
    "VOCAB_CHARACTERS",
    "build_tokenizer",
    "character_vocab",
    "save_tokenizer",
]

# Token strings, not secrets (bandit's S105 reads "*_TOKEN" names as passwords).
PAD_TOKEN = "<pad>"  # noqa: S105
EOS_TOKEN = "<eos>"  # noqa: S105
BOS_TOKEN = "<bos>"  # noqa: S105
UNK_TOKEN = "<unk>"  # noqa: S105
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, EOS_TOKEN, BOS_TOKEN, UNK_TOKEN)

# string.printable also holds "\r", "\x0b" and "\x0c"; code never needs them, and a
# policy that could emit them would only waste probability mass on invisible noise.
VOCAB_CHARACTERS: str = "\t\n" + "".join(chr(c) for c in range(32, 127))
assert set(VOCAB_CHARACTERS) <= set(string.printable)

# A regex alternative that matches any one character, newlines included.
_ANY_CHARACTER = r"[\s\S]"


def character_vocab() -> dict[str, int]:
    """Token -> id: the special tokens first (``<pad>`` is 0), then one id per character."""
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    for character in VOCAB_CHARACTERS:
        vocab[character] = len(vocab)
    return vocab


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Build the character-level tokenizer (no files, no network).

    ``encode(text, add_special_tokens=False)`` gives one id per character and
    ``decode(ids, skip_special_tokens=True)`` returns the exact text back.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel(vocab=character_vocab(), unk_token=UNK_TOKEN))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(_ANY_CHARACTER), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer: PreTrainedTokenizerFast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=core,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        bos_token=BOS_TOKEN,
        unk_token=UNK_TOKEN,
        # The default clean-up rewrites " ," into "," and the like: wrong for code.
        clean_up_tokenization_spaces=False,
        padding_side="left",
        model_max_length=4096,
    )
    return tokenizer


def save_tokenizer(directory: str | Path) -> Path:
    """Write the tokenizer to ``directory`` (created if needed) and return its path.

    The directory loads offline with ``transformers.AutoTokenizer.from_pretrained``
    and with verl's ``verl.utils.hf_tokenizer``.
    """
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    build_tokenizer().save_pretrained(str(path))
    return path
