#!/usr/bin/env bash
# ReTool-style multi-turn GRPO with verl 0.9.1: the model writes a python cell, runs it
# through rewardbus's code tool, reads the output, writes the next, then answers; the
# answer is judged by rewardbus too (the reward manager of ../run_grpo_rewardbus.sh).
#
# Needs what ../run_grpo_rewardbus.sh needs (verl 0.9.1 with vLLM or SGLang, rewardbus
# installed beside it so verl's agent-loop workers import `consumers.verl_tool`, a
# Kafka cluster with the rewardbus topics, sandbox workers) and workers that serve
# tool calls (`rollouts.tool_calls`).
#
# The dataset: verl's RL parquet layout; each prompt asks for code or a computed
# answer and tells the model it may call `code_interpreter`, e.g. a system message
# "You may run python with the code_interpreter tool; cells of this conversation
# share their variables." Rows may set `agent_name: tool_agent`; otherwise
# `default_agent_loop=tool_agent` below sends every row through verl's ToolAgentLoop.
#
# Sessions: one per trajectory (python state lasts across that trajectory's calls),
# ended when verl drops the trajectory, or by the workers' idle TTL (the YAML's
# idle_ttl_s). verl cuts each tool message to max_tool_response_length characters
# (in the middle): keep it at least the YAML's max_output_chars, so the status line
# at the end ("[time limit exceeded: 5 s CPU]") is never cut.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
KAFKA=${KAFKA:-kafka-0.kafka:9092}
PREFIX=${PREFIX:-}                       # topic prefix, if several trainers share the cluster
MODEL=${MODEL:-Qwen/Qwen2.5-7B-Instruct}
TRAIN=${TRAIN:-$HOME/data/retool/train.parquet}
VAL=${VAL:-$HOME/data/retool/val.parquet}
TOOLS=${TOOLS:-$HERE/../tools/code_interpreter.yaml}

# The tools YAML reads the cluster from the environment (verl's workers inherit it).
export REWARDBUS_BOOTSTRAP_SERVERS="$KAFKA"
export REWARDBUS_TOPIC_PREFIX="$PREFIX"

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    algorithm.use_kl_in_reward=False \
    data.train_files="$TRAIN" \
    data.val_files="$VAL" \
    data.return_raw_chat=True \
    data.train_batch_size=64 \
    data.max_prompt_length=2048 \
    data.max_response_length=16384 \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.mode=async \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent \
    actor_rollout_ref.rollout.multi_turn.enable=True \
    actor_rollout_ref.rollout.multi_turn.format=hermes \
    actor_rollout_ref.rollout.multi_turn.tool_config_path="$TOOLS" \
    actor_rollout_ref.rollout.multi_turn.max_assistant_turns=8 \
    actor_rollout_ref.rollout.multi_turn.max_user_turns=8 \
    actor_rollout_ref.rollout.multi_turn.max_parallel_calls=1 \
    actor_rollout_ref.rollout.multi_turn.max_tool_response_length=4096 \
    actor_rollout_ref.rollout.multi_turn.tool_response_truncate_side=middle \
    reward.num_workers=8 \
    reward.reward_manager.source=importlib \
    reward.reward_manager.module.path=pkg://consumers.verl_reward \
    reward.reward_manager.name=RewardbusRewardManager \
    +reward.reward_kwargs.rewardbus.bootstrap_servers="$KAFKA" \
    +reward.reward_kwargs.rewardbus.topic_prefix="$PREFIX" \
    trainer.n_gpus_per_node=8 \
    trainer.nnodes=1 \
    trainer.total_epochs=1 \
    "$@"
