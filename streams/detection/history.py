"""Recording calls and outcomes into a run's window (§6.2, §6.3)."""

from __future__ import annotations

from streams.detection.state import History


def record_call(h: History, tool: str, sig: str, call_id: str | None, history_size: int) -> None:
    """§6.2: append a pending record, then trim to the size in force."""
    h.append(tool, sig, call_id, None, None)
    h.trim(history_size)


def record_outcome(
    h: History,
    tool: str,
    sig: str,
    call_id: str | None,
    result_hash: str,
    unknown: str | None,
    history_size: int,
) -> None:
    """§6.3 steps 2-5: fill the newest matching pending record, else append a complete one."""
    args, tools, results, call_ids = h.args, h.tools, h.results, h.call_ids
    last = len(args) - 1
    # Fast path: the result of the newest call (the usual sequential case).
    if (
        last >= 0
        and args[last] == sig
        and results[last] is None
        and tools[last] == tool
        and (not call_id or call_ids[last] == call_id)
    ):
        results[last] = result_hash
        h.unknowns[last] = unknown
        h.trim(history_size)
        return
    for i in range(last - 1, -1, -1):
        if (
            args[i] == sig
            and results[i] is None
            and tools[i] == tool
            and (not call_id or call_ids[i] == call_id)
        ):
            results[i] = result_hash
            h.unknowns[i] = unknown
            break
    else:
        h.append(tool, sig, call_id, result_hash, unknown)
    h.trim(history_size)
