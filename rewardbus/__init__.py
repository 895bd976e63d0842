"""The rewardbus application shell: CLI, settings, tracing set-up, embedded broker, demo.

Only this package wires components together, reads the environment and
configures the OpenTelemetry SDK.
"""

__all__: list[str] = []
__version__ = "0.1.0"
