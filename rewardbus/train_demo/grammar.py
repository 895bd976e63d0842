"""The response grammar of the train demo, for constrained decoding.

A response is an expression ``operand (operator operand)*`` with at most
``max_operands`` operands, then ``<eos>``: ``a``, ``a+b``, ``2*a-b``. Operands and
operators alternate, so what may come next depends only on the position in the
response: operands at even positions, an operator or ``<eos>`` at odd ones, and
only ``<eos>`` once the operands are used up. The policy's logits are masked to
those characters at each position (while sampling and when the learner recomputes
log-probabilities, so both see the same distribution), which keeps a policy
trained from scratch inside the space of valid programs.

Pure Python: the masks are lists of token ids; :mod:`.rollout` makes tensors of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ExpressionGrammar"]


@dataclass(frozen=True)
class ExpressionGrammar:
    """Which characters may come at each response position."""

    operands: str = "ab12"
    operators: str = "+-*"
    max_operands: int = 3

    def __post_init__(self) -> None:
        if self.max_operands < 1:
            raise ValueError("max_operands must be at least 1")
        if not self.operands or not self.operators:
            raise ValueError("the grammar needs operands and operators")

    @property
    def max_characters(self) -> int:
        """The longest expression, in characters."""
        return 2 * self.max_operands - 1

    @property
    def response_length(self) -> int:
        """Response positions, the closing ``<eos>`` included."""
        return self.max_characters + 1

    @property
    def characters(self) -> str:
        """Every character the grammar can produce."""
        return self.operands + self.operators

    def allowed(self, position: int) -> tuple[str, bool]:
        """(characters allowed at ``position``, whether ``<eos>`` is allowed there)."""
        if position >= self.max_characters:
            return "", True
        if position % 2 == 0:
            return self.operands, False
        return self.operators, True

    def allowed_ids(self, vocab: Mapping[str, int], eos_id: int) -> list[list[int]]:
        """For each response position, the token ids allowed there."""
        table = []
        for position in range(self.response_length):
            characters, eos = self.allowed(position)
            ids = [vocab[c] for c in characters]
            if eos:
                ids.append(eos_id)
            table.append(ids)
        return table

    def accepts(self, expression: str) -> bool:
        """Whether ``expression`` (without ``<eos>``) is a sentence of the grammar."""
        if not 0 < len(expression) <= self.max_characters or len(expression) % 2 == 0:
            return False
        return all(
            c in (self.operands if i % 2 == 0 else self.operators) for i, c in enumerate(expression)
        )
