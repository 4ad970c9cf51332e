"""JSON Schema files for runners not written in Python.

``python -m loopwarden.schemas.export`` rewrites the checked-in files; a test fails when
they differ from what the Structs say (so the files cannot go stale).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import msgspec

from loopwarden.schemas import sidecar
from loopwarden.schemas.events import Event
from loopwarden.schemas.fleet import Incident
from loopwarden.schemas.verdicts import DeadLetter, Verdict, VerdictViolation

HERE = Path(__file__).parent
SCHEMAS = {
    "event.schema.json": (Event, "A loopwarden event on agent.events"),
    "verdict.schema.json": (Verdict, "A loopwarden verdict on agent.loop-control"),
    "verdict-violation.schema.json": (VerdictViolation, "A verdict_violation on agent.loop-control (runners skip it)"),
    "dead-letter.schema.json": (DeadLetter, "A dead letter on loopwarden.dead-letter (raw is base64)"),
    "incident.schema.json": (Incident, "A fleet incident record on agent.loop-incidents"),
    "sidecar.schema.json": (None, "The local decision service's HTTP/JSON bodies (loopwarden sidecar, /v1/)"),
}


def _sidecar_schema() -> dict:
    """Every request and answer of the local decision service in ``$defs``; ``x-endpoints`` maps each
    endpoint to its request and answer definitions."""
    refs, defs = msgspec.json.schema_components(sidecar.REQUESTS + sidecar.RESPONSES)
    endpoints = {
        route: {
            "request": None if request is None else f"#/$defs/{request}",
            "response": f"#/$defs/{response}",
        }
        for route, (request, response) in sidecar.ENDPOINTS.items()
    }
    return {"$defs": defs, "anyOf": refs, "x-endpoints": endpoints}


def render() -> dict[str, str]:
    """File name -> schema text, deterministic (sorted keys, trailing newline)."""
    out = {}
    for name, (type_, title) in SCHEMAS.items():
        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title}
        schema.update(_sidecar_schema() if type_ is None else msgspec.json.schema(type_))
        out[name] = json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    return out


def main(argv: list[str] | None = None) -> int:
    target = Path(argv[0]) if argv else HERE
    for name, text in render().items():
        (target / name).write_text(text, encoding="utf-8")
        print(f"wrote {target / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
