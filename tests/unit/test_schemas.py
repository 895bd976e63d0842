"""The wire contract: round trips, plain-msgpack readability, typed decode errors."""

from __future__ import annotations

import msgpack
import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas import (
    COMPARE_MODES,
    SCHEMA_VERSION,
    AssertSuite,
    BatchManifest,
    CheckerProgram,
    CheckerSuite,
    Completion,
    DeadLetter,
    GroupStats,
    IoSuite,
    Limits,
    RewardEvent,
    SchemaError,
    ScoredBatch,
    ScoredSample,
    TestOutcome,
    Topics,
    Verdict,
    decode,
    decode_json,
    encode,
    extract_context,
    inject_context,
    suite_digest,
)

text = st.text(max_size=40)
ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=20)
finite = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e9, max_value=1e9)

io_suites = st.builds(
    IoSuite,
    inputs=st.lists(text, max_size=4),
    outputs=st.lists(text, max_size=4),
    fn_name=st.none() | ids,
    compare=st.sampled_from(COMPARE_MODES),
    stop_on_first_failure=st.booleans(),
)
assert_suites = st.builds(
    AssertSuite, code=text, entry_point=st.none() | ids, cases=st.lists(text, max_size=3)
)
checker_suites = st.builds(
    CheckerSuite,
    inputs=st.lists(text, max_size=3),
    outputs=st.lists(text, max_size=3),
    checker=st.builds(CheckerProgram, language=st.sampled_from(["python", "cpp"]), code=text),
)
suites = io_suites | assert_suites | checker_suites
limits = st.builds(
    Limits,
    time_s=st.floats(min_value=0.01, max_value=100),
    memory_mb=st.integers(min_value=1, max_value=1 << 16),
)
completions = st.builds(
    Completion,
    sample_id=ids,
    batch_id=ids,
    group_id=ids,
    policy_version=st.integers(min_value=0, max_value=1 << 40),
    language=st.sampled_from(["python", "cpp", "go", "sql"]),
    response=st.none() | text,
    code=st.none() | text,
    tests=st.none() | suites,
    limits=limits,
    attributes=st.dictionaries(ids, text, max_size=3),
)
outcomes = st.builds(
    TestOutcome,
    index=st.integers(min_value=0, max_value=1000),
    verdict=st.sampled_from(list(Verdict)),
    wall_ms=st.floats(min_value=0, max_value=1e6),
)
rewards = st.builds(
    RewardEvent,
    sample_id=ids,
    batch_id=ids,
    verdict=st.sampled_from(list(Verdict)),
    score=st.floats(min_value=0, max_value=1),
    tests=st.lists(outcomes, max_size=5),
    degraded=st.lists(ids, max_size=2),
)
manifests = st.builds(
    BatchManifest, batch_id=ids, sample_ids=st.lists(ids, max_size=10), deadline=finite
)
scored = st.builds(
    ScoredBatch,
    batch_id=ids,
    samples=st.lists(
        st.builds(ScoredSample, sample_id=ids, score=st.floats(0, 1), advantage=finite), max_size=5
    ),
    groups=st.dictionaries(
        ids, st.builds(GroupStats, mean=finite, std=finite, count=st.integers(0, 100)), max_size=3
    ),
    missing=st.lists(ids, max_size=3),
)


@given(completions)
def test_completion_round_trips(message: Completion) -> None:
    assert decode(encode(message), Completion) == message


@given(rewards)
def test_reward_round_trips(message: RewardEvent) -> None:
    assert decode(encode(message), RewardEvent) == message


@given(manifests)
def test_manifest_round_trips(message: BatchManifest) -> None:
    assert decode(encode(message), BatchManifest) == message


@given(scored)
def test_scored_batch_round_trips(message: ScoredBatch) -> None:
    assert decode(encode(message), ScoredBatch) == message


@given(completions)
def test_plain_msgpack_reads_what_we_write(message: Completion) -> None:
    plain = msgpack.unpackb(encode(message), raw=False)
    assert plain["sample_id"] == message.sample_id
    assert plain["schema_version"] == SCHEMA_VERSION
    if message.tests is not None:
        assert plain["tests"]["kind"] in {"io", "assert", "checker"}


def test_plain_msgpack_written_by_another_client_decodes() -> None:
    raw = msgpack.packb(
        {
            "sample_id": "s1",
            "language": "python",
            "code": "print(1)",
            "tests": {"kind": "io", "inputs": ["\n"], "outputs": ["1\n"]},
            "some_future_field": [1, 2, 3],  # unknown fields are ignored: forward compatible
        }
    )
    completion = decode(raw, Completion)
    assert isinstance(completion.tests, IoSuite)
    assert completion.tests.compare == "tokens"
    assert completion.limits == Limits()


def _nested_inputs(depth: int) -> bytes:
    """A Completion whose io suite's one input is a list nested ``depth`` deep."""
    nested = b"\x91" * depth + b"\x01"  # [[[...[1]...]]]
    suite: bytes = b"\x83" + b"".join(msgpack.packb(k) for k in ("kind", "io", "inputs"))
    suite += b"\x91" + nested + msgpack.packb("outputs") + msgpack.packb([1])
    head: bytes = msgpack.packb("sample_id") + msgpack.packb("x") + msgpack.packb("tests")
    return b"\x82" + head + suite


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"\xc1garbage", "not a valid Completion"),
        (msgpack.packb([1, 2, 3]), "Expected `object`"),
        (msgpack.packb({"language": "python"}), "sample_id"),
        (msgpack.packb({"sample_id": "x", "tests": {"kind": "nope"}}), "kind"),
        (None, "empty record"),
        # Nested deeper than the recursion limit: was a RecursionError that crashed
        # every worker the record was redelivered to.
        (_nested_inputs(200_000), "nested too deeply"),
    ],
)
def test_garbage_raises_one_typed_error_with_the_reason(data: bytes | None, fragment: str) -> None:
    with pytest.raises(SchemaError) as info:
        decode(data, Completion)
    assert fragment in info.value.reason


def test_newer_schema_version_is_refused_with_a_reason() -> None:
    raw = msgpack.packb({"sample_id": "x", "schema_version": SCHEMA_VERSION + 1})
    with pytest.raises(SchemaError, match="schema_version"):
        decode(raw, Completion)


def test_limits_are_validated() -> None:
    with pytest.raises(SchemaError, match="time_s"):
        decode(msgpack.packb({"sample_id": "x", "limits": {"time_s": -1}}), Completion)


def test_json_lines_use_the_same_field_names() -> None:
    line = (
        '{"sample_id": "a", "language": "cpp", "response": "x",'
        ' "tests": {"kind": "io", "inputs": ["1 2\\n"], "outputs": ["3\\n"]},'
        ' "limits": {"time_s": 2, "memory_mb": 256}}'
    )
    completion = decode_json(line, Completion)
    assert completion.limits.memory_mb == 256
    with pytest.raises(SchemaError):
        decode_json("{not json", Completion)


@given(suites)
def test_suite_digest_is_stable_and_content_sensitive(suite: IoSuite | AssertSuite) -> None:
    assert suite_digest(suite) == suite_digest(
        decode(encode(Completion(sample_id="x", tests=suite)), Completion).tests  # type: ignore[arg-type]
    )
    changed = msgspec.structs.replace(suite, stop_on_first_failure=not suite.stop_on_first_failure)
    assert suite_digest(changed) != suite_digest(suite)


def test_topics_are_prefixed() -> None:
    topics = Topics(prefix="exp7.")
    assert all(name.startswith("exp7.") for name in topics.all())
    assert topics.completions == "exp7.rollouts.completions"
    assert len(set(topics.all())) == len(topics.all())


def test_dead_letter_keeps_the_original_bytes() -> None:
    letter = DeadLetter(
        source_topic="t", partition=1, offset=7, reason="bad", error_type="SchemaError",
        stage="decode", key=b"k", value=b"\x00\xff",
    )  # fmt: skip
    assert decode(encode(letter), DeadLetter).value == b"\x00\xff"


def test_dead_letter_stages_and_error_types_are_a_closed_set() -> None:
    letter = DeadLetter(
        source_topic="t", partition=1, offset=7, reason="bad", error_type="SchemaError",
        stage="decode",
    )  # fmt: skip
    for field, value in (("stage", "judging"), ("error_type", "KeyError")):
        stray = msgspec.structs.replace(letter, **{field: value})
        with pytest.raises(SchemaError, match=field):
            decode(encode(stray), DeadLetter)


def test_trace_context_round_trips_through_headers() -> None:
    from opentelemetry.sdk.trace import TracerProvider

    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("parent") as span:
        headers = inject_context([("content-type", b"application/msgpack")])
    names = [k for k, _ in headers]
    assert "traceparent" in names
    from opentelemetry import trace

    extracted = trace.get_current_span(extract_context(headers)).get_span_context()
    assert extracted.trace_id == span.get_span_context().trace_id
    assert extracted.span_id == span.get_span_context().span_id
