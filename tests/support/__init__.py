"""What the tests share, imported as ``tests.support.<module>``::

    poll.py      until / until_sync: wait for a condition against a deadline, never a sleep
    stages.py    the worker and aggregator run in the test's process (running(...)); stop_process
    reading.py   read a topic: everything on it now, or until enough has arrived; end offsets
    broker_state.py  what the seam does not ask: topic configs, committed offsets, group members
    metrics.py   what an OpenTelemetry meter counted
    otlp.py      an OTLP/HTTP receiver in a thread: what a service exports
    tool_sessions.py  test doubles of live tool sessions (exec in a dict; an unjailed
                 interpreter per session): never shipped, never isolated

The broker is the session's ``kafka_bootstrap`` fixture (tests/conftest.py); stages as
separate processes, as deployed, are :mod:`rewardbus.runtime.local`'s ``worker_pool``.
"""
