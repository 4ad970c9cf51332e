"""The checked-in JSON Schema files match the msgspec Structs (regenerate: python -m loopwarden.schemas.export)."""

import json

import pytest

from loopwarden.schemas import export


@pytest.mark.parametrize("name", sorted(export.SCHEMAS))
def test_checked_in_schema_is_current(name):
    on_disk = (export.HERE / name).read_text(encoding="utf-8")
    assert on_disk == export.render()[name], f"{name} is stale: run `python -m loopwarden.schemas.export`"


def test_event_schema_describes_the_five_types():
    schema = json.loads((export.HERE / "event.schema.json").read_text())
    assert set(schema["discriminator"]["mapping"]) == {
        "tool_call",
        "tool_result",
        "compaction_retry",
        "run_end",
        "verdict_ack",
    }
    ack = schema["$defs"]["VerdictAck"]
    assert set(ack["required"]) == {"type", "agent_id", "verdict_id", "outcome"}
    assert ack["properties"]["outcome"]["enum"] == ["applied", "failed"]
    assert schema["$defs"]["ToolCall"]["required"] == ["type", "agent_id"]
