"""The broker's log4j2 configuration: one file, `log4j2.properties` in this package.

The embedded broker writes it next to server.properties; the kafka image build
(infra/docker/images.sh) copies the same file into the image. It is package data, so an
installed wheel, which has no infra/ directory, carries it too.
"""

from __future__ import annotations

from importlib import resources

__all__ = ["LOG4J2_FILE", "log4j2_properties"]

LOG4J2_FILE = "log4j2.properties"


def log4j2_properties() -> str:
    """The text of the packaged log4j2 configuration."""
    return (
        resources.files("rewardbus.runtime.broker")
        .joinpath(LOG4J2_FILE)
        .read_text(encoding="utf-8")
    )
