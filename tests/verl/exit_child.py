"""A verl process that scores through rewardbus every way verl can, then exits.

Run by ``test_clean_exit.py`` as ``python exit_child.py BOOTSTRAP PREFIX TOKENIZER_DIR``.
Three event loops, each ending the way verl's own do:

1. verl's ``RewardLoopWorker`` with our manager, and another with verl's naive
   manager calling our ``compute_score``, on verl's ``get_event_loop()``: a loop
   never closed, still open at exit;
2. ``compute_score`` under ``asyncio.run`` twice (an evaluation script's way):
   two loops, each shut down and closed by ``asyncio.run``;
3. a loop running in a thread of its own at exit, as a Ray async actor's does.

Prints the reply topics the clients used (one JSON list on the last line), so
the test can check that each client deleted its own as it stopped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
from pathlib import Path

from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # as a script: find benchmarks/

import consumers.verl_reward as verl_reward
from benchmarks.verl_harness import samples_dataproto, verl_config
from consumers.verl_tasks import VerlRewardSettings
from schemas import KafkaSettings, Topics

SUM = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
SUM_GT = json.dumps({"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]})
SAMPLE = {"data_source": "apps", "response": SUM, "ground_truth": SUM_GT}


async def _reply_topic(settings: VerlRewardSettings) -> str:
    return (await verl_reward._clients(settings).get()).reply_topic


def main(bootstrap: str, prefix: str, tokenizer_dir: Path) -> None:
    logging.basicConfig(level=logging.WARNING)  # asyncio's "Unclosed ..." errors reach stderr
    logging.getLogger("consumers.replies").setLevel(logging.INFO)  # reply topic deletions
    kafka = KafkaSettings(bootstrap, topics=Topics(prefix=prefix), client_id="exit-child")
    options = {"bootstrap_servers": bootstrap, "topic_prefix": prefix}
    settings = VerlRewardSettings.from_options(options, {})
    replies = []

    manager = RewardLoopWorker(verl_config(tokenizer_dir, kafka))
    function = RewardLoopWorker(
        verl_config(
            tokenizer_dir,
            kafka,
            overrides={
                "reward.reward_manager.source": "register",
                "reward.reward_manager.name": "naive",
                "reward.custom_reward_function.path": verl_reward.__file__,
                "reward.custom_reward_function.name": "compute_score",
                "reward.custom_reward_function.reward_kwargs": options,
            },
        )
    )
    for worker in (manager, function):  # both on verl's loop (get_event_loop: the same one)
        (scored,) = worker.loop.run_until_complete(
            worker.compute_score_batch(samples_dataproto([SAMPLE]))
        )
        assert scored["reward_score"] == 1.0, scored
    replies.append(manager.loop.run_until_complete(_reply_topic(settings)))

    for _ in range(2):  # an evaluation script's way: a loop per call

        async def once() -> tuple[dict[str, object], str]:
            result = await verl_reward.compute_score("apps", SUM, SUM_GT, {}, **options)
            return result, await _reply_topic(settings)

        result, reply = asyncio.run(once())
        assert result["score"] == 1.0, result
        replies.append(reply)

    actor_loop = asyncio.new_event_loop()
    threading.Thread(target=actor_loop.run_forever, daemon=True).start()
    threaded = asyncio.run_coroutine_threadsafe(
        verl_reward.compute_score("apps", SUM, SUM_GT, {}, **options), actor_loop
    ).result(timeout=120)
    replies.append(
        asyncio.run_coroutine_threadsafe(_reply_topic(settings), actor_loop).result(timeout=60)
    )
    assert threaded["score"] == 1.0, threaded
    print(json.dumps(replies), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
