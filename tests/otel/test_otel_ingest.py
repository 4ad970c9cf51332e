"""The span consumer's delivery rule: an outage is retried until delivered, a refused record is skipped."""

from __future__ import annotations

import asyncio

from aiokafka.errors import KafkaTimeoutError, MessageSizeTooLargeError

from loopwarden.otel.ingest import Out, SpanIngest, SpanSettings, translate
from loopwarden.schemas.verdicts import MAX_DEAD_LETTER_RAW
from tests.support.helpers import Rec


class FlakyProducer:
    """Fails the first ``outages`` sends with a timeout (a broker outage); refuses values named ``huge``."""

    def __init__(self, outages: int) -> None:
        self.outages = outages
        self.delivered: list[bytes] = []

    async def send(self, topic, value, key=None):
        fut = asyncio.get_running_loop().create_future()
        if value == b"huge":
            fut.set_exception(MessageSizeTooLargeError())
        elif self.outages:
            self.outages -= 1
            fut.set_exception(KafkaTimeoutError())
        else:
            self.delivered.append(value)
            fut.set_result(None)
        return fut


async def test_an_outage_is_retried_and_a_refused_record_skipped():
    ingest = SpanIngest(SpanSettings())
    producer = FlakyProducer(outages=3)
    out = [Out("t", None, b"a"), Out("t", None, b"huge"), Out("t", None, b"b")]
    assert await ingest._deliver(producer, out) is True
    assert sorted(producer.delivered) == [b"a", b"b"]
    assert ingest.counts.publish_dropped == 1 and ingest.counts.publish_retries >= 2


async def test_stopping_during_an_outage_delivers_nothing_more():
    ingest = SpanIngest(SpanSettings())
    producer = FlakyProducer(outages=10**6)
    ingest.stop()
    assert await ingest._deliver(producer, [Out("t", None, b"a")]) is False
    assert producer.delivered == []


def test_a_huge_record_is_described_in_its_dead_letter_not_copied():
    import hashlib

    import msgspec

    from loopwarden.schemas.verdicts import DeadLetter

    raw = b"\xff" * (MAX_DEAD_LETTER_RAW * 100)
    (out,) = translate(Rec("spans", 0, 3, None, raw), SpanSettings(dead_letter_topic="dlq"))
    letter = msgspec.json.decode(out.value, type=DeadLetter)
    assert letter.reason == "otel_bad_request" and letter.raw == raw[:MAX_DEAD_LETTER_RAW]
    assert (letter.size, letter.sha256) == (len(raw), hashlib.sha256(raw).hexdigest())


def test_a_mapping_bug_dead_letters_the_record_instead_of_stopping(monkeypatch):
    import msgspec

    from loopwarden.otel import ingest
    from loopwarden.schemas.verdicts import DeadLetter
    from tests.otel.otel_helpers import encoded, fixture

    def broken(spans, max_payload_bytes):
        raise KeyError("a bug")

    monkeypatch.setattr(ingest, "map_spans", broken)
    raw = encoded(fixture("pydantic_ai.otlp.json"), "otlp_proto")
    (out,) = translate(Rec("spans", 1, 2, b"k", raw), SpanSettings(dead_letter_topic="dlq"))
    letter = msgspec.json.decode(out.value, type=DeadLetter)
    assert (out.topic, out.key, letter.reason, letter.raw) == ("dlq", b"k", "engine_error", raw[:MAX_DEAD_LETTER_RAW])
