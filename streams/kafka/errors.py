"""Which producer errors an outage explains, and which retrying can never cure.

Every writer of loopwarden (the runner's outbox, the worker's committer,
``loopwarden spans``, the snapshot of ``up``) retries a record while the
broker is away. A record the broker or the client refuses for what it *is*
(too large, an invalid or forbidden topic, a value that cannot be
serialized) fails the same way on every try: retried as an outage, it jams
everything queued behind it and logs forever. Such a record is dropped,
counted and logged (throttled) by its writer; the stream goes on.
"""

from __future__ import annotations


def is_permanent(exc: BaseException) -> bool:
    """Whether retrying the same record can never succeed (its size, its topic, its encoding)."""
    from aiokafka import errors

    permanent = (
        errors.MessageSizeTooLargeError,  # raised by send() over max_request_size, or by the broker
        errors.RecordTooLargeError,
        errors.RecordListTooLargeError,
        errors.CorruptRecordException,
        errors.InvalidTopicError,
        errors.TopicAuthorizationFailedError,
        errors.UnsupportedVersionError,
        TypeError,
        ValueError,
    )
    return isinstance(exc, permanent)


def too_large(exc: BaseException) -> bool:
    """A size refusal: a smaller record may still go (a dead letter without its raw bytes)."""
    from aiokafka import errors

    return isinstance(
        exc, (errors.MessageSizeTooLargeError, errors.RecordTooLargeError, errors.RecordListTooLargeError)
    )
