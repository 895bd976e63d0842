"""The warm pool's policy over several start-up profiles (no jail: zygotes are stand-ins).

A worker judging several interpreted languages at once keeps a profile per language
(Python, Ruby, PHP, R, Racket: each a whole command line). A profile seen for the first
time in a full pool must not retire the others' zygotes wholesale: profiles used in turn
would then evict each other on every request, and each request would wait for a start.
"""

from __future__ import annotations

from typing import Any

from sandbox_workers.pool import PoolConfig, Profile, WarmPool


class FakeZygote:
    """What the pool looks at of a zygote."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.alive = True
        self.uses = 0
        self.closed = False

    def close(self) -> None:
        self.closed = True
        self.alive = False


def profile(name: str) -> Profile:
    return Profile(interpreter=f"/usr/bin/{name}", options=(), env=(), mounts=(), trigger="x")


class Starter:
    def __init__(self) -> None:
        self.started: list[FakeZygote] = []

    async def __call__(self, wanted: Profile) -> Any:
        zygote = FakeZygote(wanted)
        self.started.append(zygote)
        return zygote


def live(starter: Starter, name: str) -> int:
    return sum(1 for z in starter.started if z.profile == profile(name) and not z.closed)


async def test_a_new_profile_in_a_full_pool_starts_one_zygote_and_retires_one() -> None:
    starter = Starter()
    pool: WarmPool[Any] = WarmPool(PoolConfig(size=4, prewarm=0.5), frozenset(), starter)
    for name in ("ruby", "php"):  # two zygotes each: the pool is full
        zygote = await pool.acquire(profile(name))
        assert zygote is not None
        pool.release(zygote, reusable=True)
    assert (live(starter, "ruby"), live(starter, "php")) == (2, 2)

    zygote = await pool.acquire(profile("racket"))
    assert zygote is not None
    pool.release(zygote, reusable=True)
    # One start for the new profile, one zygote retired (of the least recently used
    # profile): not its whole pre-warm count, which would empty ruby's.
    assert (live(starter, "racket"), live(starter, "ruby"), live(starter, "php")) == (1, 1, 2)
    assert len(starter.started) == 5
    pool.close()


async def test_a_new_profile_with_room_starts_its_prewarm_count() -> None:
    starter = Starter()
    pool: WarmPool[Any] = WarmPool(PoolConfig(size=8, prewarm=0.5), frozenset(), starter)
    zygote = await pool.acquire(profile("r"))
    assert zygote is not None
    assert live(starter, "r") == 4  # ceil(8 * 0.5), all into free room
    pool.release(zygote, reusable=True)
    await pool.acquire(profile("php"))
    assert (live(starter, "r"), live(starter, "php")) == (4, 4)
    await pool.acquire(profile("lua"))  # full: one start, one of r's retired
    assert (live(starter, "r"), live(starter, "php"), live(starter, "lua")) == (3, 4, 1)
    pool.close()
