"""The train demo's learner side: cached decoding, the grammar mask, verl's loss, the update."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
import verl  # noqa: F401 - the verl extra is required here (make test installs it)
from matplotlib import image
from matplotlib.colors import to_hex

from rewardbus.tokenizer import EOS_TOKEN, PAD_TOKEN, build_tokenizer, character_vocab
from rewardbus.train_demo.devices import (
    DeviceUnavailable,
    empty_cache,
    resolve_device,
)
from rewardbus.train_demo.grammar import ExpressionGrammar
from rewardbus.train_demo.learner import LearnerBatch, LearnerConfig, update
from rewardbus.train_demo.monitor import AlertKind, StepRecord
from rewardbus.train_demo.plot import MARKER_COLOUR, curves_figure
from rewardbus.train_demo.policy import PolicyConfig, build_policy
from rewardbus.train_demo.report import (
    FIRST_AT_MOST,
    LAST_AT_LEAST,
    RunFacts,
    curve_series,
    resume_markers,
    summary,
    write_plot,
)
from rewardbus.train_demo.rollout import (
    allowed_mask,
    response_log_probs,
    rollout_dataproto,
    rollout_of,
    sample,
)
from rewardbus.train_demo.tasks import task_family
from rewardbus.train_demo.verl_loss import verl_aggregate, verl_policy_loss

CPU = torch.device("cpu")
VOCAB = character_vocab()
EOS = VOCAB[EOS_TOKEN]
PAD = VOCAB[PAD_TOKEN]
GRAMMAR = ExpressionGrammar()
ALLOWED = allowed_mask(GRAMMAR.allowed_ids(VOCAB, EOS), len(VOCAB), CPU)
TASKS = task_family()


def _policy(seed: int = 0, init_std: float = 0.5) -> torch.nn.Module:
    # A large init makes the outputs depend visibly on the prompt, which the
    # equivalence checks need (a near-uniform policy would pass them trivially).
    return build_policy(
        PolicyConfig(vocab_size=len(VOCAB), init_std=init_std), seed=seed, device=CPU
    )


def _rollout(policy: torch.nn.Module, per_task: int = 4, seed: int = 0):  # type: ignore[no-untyped-def]
    tasks = [t for t in TASKS for _ in range(per_task)]
    prompts = [[VOCAB[c] for c in t.header] for t in tasks]
    generator = torch.Generator().manual_seed(seed)
    return tasks, sample(policy, prompts, ALLOWED, pad_id=0, eos_id=EOS, generator=generator)


def _recompute(policy: torch.nn.Module, rollout) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[no-untyped-def]
    return response_log_probs(
        policy,
        input_ids=rollout.input_ids,
        attention_mask=rollout.attention_mask,
        position_ids=rollout.position_ids,
        responses=rollout.responses,
        response_mask=rollout.response_mask,
        allowed=ALLOWED,
    )


def test_same_seed_same_weights() -> None:
    a, b = _policy(seed=3), _policy(seed=3)
    for x, y in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(x, y)


def test_samples_are_grammar_sentences_in_verl_layout() -> None:
    _tasks, rollout = _rollout(_policy())
    decoder = build_tokenizer()
    prompt_width = rollout.prompts.shape[1]
    assert rollout.input_ids.shape == rollout.attention_mask.shape
    assert torch.equal(rollout.input_ids[:, :prompt_width], rollout.prompts)
    for row, ids in enumerate(rollout.response_ids()):
        assert ids[-1] == EOS
        text = decoder.decode(ids, skip_special_tokens=True)
        assert GRAMMAR.accepts(text), text
        # Right padding after <eos>: mask 0 there, in the attention mask too.
        n = len(ids)
        assert rollout.response_mask[row, :n].all()
        assert not rollout.response_mask[row, n:].any()
        assert torch.equal(rollout.attention_mask[row, prompt_width:], rollout.response_mask[row])


def test_cached_log_probs_equal_the_full_forward_and_the_sampler() -> None:
    policy = _policy()
    _tasks, rollout = _rollout(policy)
    with torch.no_grad():
        cached, entropy = _recompute(policy, rollout)
        logits, _ = policy(rollout.input_ids, rollout.attention_mask, rollout.position_ids)
    length = rollout.responses.shape[1]
    full = logits[:, -length - 1 : -1].masked_fill(~ALLOWED[:length], -torch.inf)
    picked = full.log_softmax(-1).gather(-1, rollout.responses.clamp(min=0)[..., None])
    live = rollout.response_mask.bool()
    full_lp = torch.where(live, picked.squeeze(-1), torch.zeros(()))
    # float32 through different kernel shapes (cached vs full): agree to ~1e-5 relative.
    torch.testing.assert_close(cached, full_lp, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(cached, rollout.old_log_probs, atol=1e-4, rtol=1e-4)
    # Zero only where the grammar leaves one choice (the forced <eos>).
    assert bool((entropy[live] >= 0).all())
    assert bool((entropy[:, 0] > 0).all())
    assert bool((entropy[~live] == 0).all())


def test_the_policy_reads_the_prompt() -> None:
    policy = _policy()
    _tasks, rollout = _rollout(policy, per_task=1)
    with torch.no_grad():
        first, _ = _recompute(policy, rollout)
    # Same first token under different prompts gets different probabilities.
    assert first[:, 0].unique().numel() > 1


def test_verl_loss_update_raises_the_probability_of_the_advantaged_answer() -> None:
    policy = _policy(init_std=0.02)
    _tasks, rollout = _rollout(policy, per_task=8)
    decoder = build_tokenizer()
    texts = [decoder.decode(ids, skip_special_tokens=True) for ids in rollout.response_ids()]
    favourite = Counter(texts).most_common()[-1][0]  # a rare answer
    advantage = torch.tensor([1.0 if t == favourite else -0.1 for t in texts])
    config = LearnerConfig(learning_rate=3e-3, ppo_epochs=4, mini_batches=1, entropy_coeff=0.0)
    batch = LearnerBatch(
        input_ids=rollout.input_ids,
        attention_mask=rollout.attention_mask,
        position_ids=rollout.position_ids,
        responses=rollout.responses,
        response_mask=rollout.response_mask,
        old_log_probs=rollout.old_log_probs,
        advantages=advantage[:, None] * rollout.response_mask,
    )
    rows = torch.tensor([t == favourite for t in texts])
    before = rollout.old_log_probs[rows].sum(-1).mean()
    optimizer = torch.optim.AdamW(policy.parameters(), lr=config.learning_rate)
    metrics = update(
        policy,
        optimizer,
        batch,
        allowed=ALLOWED,
        loss_fn=verl_policy_loss(config, rollout_n=8, batch_size=len(texts)),
        config=config,
        aggregate_fn=verl_aggregate(),
        generator=torch.Generator().manual_seed(0),
    )
    with torch.no_grad():
        after, _ = _recompute(policy, rollout)
    assert float(after[rows].sum(-1).mean()) > float(before) + 0.05
    assert metrics.grad_norm > 0


def test_verl_loss_is_core_algos_vanilla() -> None:
    from verl.trainer.ppo import core_algos

    from rewardbus.train_demo.verl_loss import verl_actor_config

    config = LearnerConfig(clip_ratio=0.2, clip_ratio_high=0.28)
    generator = torch.Generator().manual_seed(0)
    old = torch.randn(6, 5, generator=generator)
    new = old + 0.3 * torch.randn(6, 5, generator=generator)
    advantages = torch.randn(6, 1, generator=generator).expand(6, 5)
    mask = (torch.rand(6, 5, generator=generator) > 0.3).long()
    ours, _ = verl_policy_loss(config, rollout_n=3, batch_size=6)(
        old, new, advantages, mask, "token-mean"
    )
    actor = verl_actor_config(config, rollout_n=3, batch_size=6)
    assert actor.clip_ratio_high == 0.28
    theirs, _ = core_algos.compute_policy_loss_vanilla(
        old, new, advantages, mask.float(), "token-mean", actor, None
    )
    torch.testing.assert_close(ours, theirs)


def test_device_choice() -> None:
    assert resolve_device("cpu") == CPU
    expected = "cuda" if torch.cuda.is_available() else None
    if expected is None:
        with pytest.raises(DeviceUnavailable):
            resolve_device("cuda")
    empty_cache(CPU)  # a no-op on the CPU, and must not fail


def test_npu_without_torch_npu_is_a_clear_error() -> None:
    import importlib.util

    if importlib.util.find_spec("torch_npu") is not None:
        pytest.skip("torch-npu is installed here")
    with pytest.raises(DeviceUnavailable, match="torch-npu"):
        resolve_device("npu")
    assert resolve_device("auto").type in {"cpu", "cuda"}


def test_summary_and_plot(tmp_path: Path) -> None:
    records = [
        StepRecord(
            step=i,
            reward_mean=0.1 if i < 5 else 0.9,
            response_length=3.0,
            reward_latency_ms=100.0 + i,
            rewards_per_s=50.0,
            step_s=0.5,
            samples=16,
            cache_hits=i,
        )
        for i in range(10)
    ]
    facts = RunFacts(
        steps_requested=10,
        window=3,
        wall_s=12.0,
        train_s=5.0,
        device="cpu",
        workers=2,
        strict=True,
        group_size=2,
        tasks=["add"],
        plot=None,
        alerts=dict.fromkeys(AlertKind, 0),
        verdicts=Counter({"accepted": 3}),
        policy_parameters=1,
    )
    result = summary(records, facts).to_json()
    assert result["steps"] == 10
    assert result["reward_mean_first"] == pytest.approx(0.1)
    assert result["reward_mean_last"] == pytest.approx(0.9)
    assert result["reward_mean_by_step"] == [0.1] * 5 + [0.9] * 5
    assert result["learned"] is True
    assert result["steps_per_s"] == 2.0
    assert result["alerts"] == {"reward_falling": 0, "response_length": 0}
    assert result["reward_latency_ms"]["p50"] == pytest.approx(104.5)
    path = write_plot(tmp_path / "curves.png", records, title="test", resumed_at=[5])
    png = path.read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    pixels = image.imread(path)
    assert pixels.shape[1] >= 800  # two panels of 480 pixels side by side
    assert len(np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)) > 10  # drawn on
    # What the PNG shows: four panels, each curve a value per step, a red line at the resume.
    figure = curves_figure(curve_series(records), title="test", markers=resume_markers([5]))
    panels = [axes for axes in figure.axes if axes.get_visible()]
    assert [axes.get_title(loc="left") for axes in panels] == [
        "mean reward  last 0.9",
        "mean response length  last 3 tok",
        "reward latency (publish -> scored batch)  last 109 ms",
        "throughput (rewards / reward latency)  last 50 /s",
    ]
    reward = panels[0]
    assert reward.get_ylim() == (0.0, 1.0)
    curve = reward.lines[-1]
    assert list(curve.get_ydata()) == [r.reward_mean for r in records]
    assert [line.get_ydata()[0] for line in reward.lines if line.get_linestyle() == "--"] == [
        FIRST_AT_MOST, LAST_AT_LEAST,
    ]  # fmt: skip
    for axes in panels:
        resumed = [line for line in axes.lines if to_hex(line.get_color()) == to_hex(MARKER_COLOUR)]
        assert [line.get_xdata()[0] for line in resumed] == [5]
        assert "resumed" in [text.get_text() for text in axes.texts]


def test_token_ids_become_a_rollout_in_verls_layout_and_one_dataproto() -> None:
    rollout = rollout_of([[5, 6], [7]], [[1, 2, EOS], [3, EOS]], pad_id=PAD, device=CPU)
    assert rollout.prompts.tolist() == [[5, 6], [PAD, 7]]  # prompts left-padded
    assert rollout.responses.tolist() == [[1, 2, EOS], [3, EOS, PAD]]  # responses right-padded
    assert rollout.attention_mask.tolist() == [[1, 1, 1, 1, 1], [0, 1, 1, 1, 0]]
    assert rollout.position_ids.tolist() == [[0, 1, 2, 3, 4], [0, 0, 1, 2, 2]]
    assert rollout.response_ids() == [[1, 2, EOS], [3, EOS]]
    batch = rollout_dataproto(rollout, {"uid": ["g0", "g0"], "extra": [{"a": [1]}, {"a": [2]}]})
    assert torch.equal(batch.batch["input_ids"], rollout.input_ids)
    assert torch.equal(batch.batch["response_mask"], rollout.response_mask)
    assert list(batch.non_tensor_batch["uid"]) == ["g0", "g0"]
    assert list(batch.non_tensor_batch["extra"]) == [{"a": [1]}, {"a": [2]}]  # whole values
