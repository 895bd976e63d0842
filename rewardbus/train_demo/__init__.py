"""``rewardbus train-demo``: a generate-score-update loop that learns, on a CPU.

A tiny causal transformer (random init, :mod:`.policy`) writes ``return``
expressions for a small family of function headers (:mod:`.tasks`), under a
grammar mask (:mod:`.grammar`, :mod:`.rollout`). Every reward comes from the real
pipeline (embedded broker, sandbox worker processes, aggregator, ``ScoredBatch``
-> verl ``DataProto``); the update is verl's policy loss (:mod:`.learner`,
:mod:`.verl_loss`). :mod:`.loop` wires a run; :mod:`.monitor` raises the alerts;
:mod:`.report` and :mod:`.plot` print and draw the curves.

Importing this package imports nothing: the torch-only modules (tasks, grammar,
policy, rollout, learner, devices) are also what the self-contained GPU benchmark
uses, on a machine without Kafka or verl.
"""

__all__: list[str] = []
