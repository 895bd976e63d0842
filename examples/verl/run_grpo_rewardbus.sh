#!/usr/bin/env bash
# GRPO on a code dataset with rewardbus as verl's reward backend (verl 0.9.1).
#
# Needs: a GPU cluster with verl 0.9.1 and vLLM; `pip install rewardbus` (this
# repository) in the same environment as verl, so its Ray actors import
# `consumers.verl_reward`; a Kafka cluster with the rewardbus topics
# (`rewardbus topics --bootstrap-servers $KAFKA --partitions 32`) and sandbox
# workers consuming them (`rewardbus worker --bootstrap-servers $KAFKA`, one or
# more per CPU host; or infra's Kubernetes manifests).
#
# The dataset: verl's RL parquet layout (data_source, prompt, ability,
# reward_model.ground_truth = APPS/TACO-style input_output JSON, extra_info).
# The repository's parity set makes one: python examples/verl/parity/to_parquet.py
set -euo pipefail

KAFKA=${KAFKA:-kafka-0.kafka:9092}
PREFIX=${PREFIX:-}                       # topic prefix, if several trainers share the cluster
MODEL=${MODEL:-Qwen/Qwen2.5-Coder-1.5B-Instruct}
TRAIN=${TRAIN:-$HOME/data/code/train.parquet}
VAL=${VAL:-$HOME/data/code/val.parquet}

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files="$TRAIN" \
    data.val_files="$VAL" \
    data.train_batch_size=256 \
    data.max_prompt_length=1024 \
    data.max_response_length=2048 \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=64 \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.n=8 \
    reward.num_workers=8 \
    reward.reward_manager.source=importlib \
    reward.reward_manager.module.path=pkg://consumers.verl_reward \
    reward.reward_manager.name=RewardbusRewardManager \
    +reward.reward_kwargs.rewardbus.bootstrap_servers="$KAFKA" \
    +reward.reward_kwargs.rewardbus.topic_prefix="$PREFIX" \
    +reward.reward_kwargs.rewardbus.sample_timeout_s=300 \
    +reward.reward_kwargs.rewardbus.failure_score=0.0 \
    trainer.n_gpus_per_node=8 \
    trainer.nnodes=1 \
    trainer.total_epochs=1 \
    "$@"
