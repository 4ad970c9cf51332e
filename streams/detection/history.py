"""Recording calls and outcomes into a run's window (§6.2, §6.3)."""

from __future__ import annotations

from loopwarden.detection.state import History


def record_call(h: History, tool: str, sig: str, call_id: str | None, history_size: int) -> None:
    """§6.2: append a pending record, then trim to the size in force."""
    h.push(tool, sig, call_id, None, None, history_size)


def record_outcome(
    h: History,
    tool: str,
    sig: str,
    call_id: str | None,
    result_hash: str,
    unknown: str | None,
    history_size: int,
) -> bool:
    """§6.3 steps 2-5: fill the newest matching pending record, else append a complete one (True).

    A complete record keeps no call id (History): only pending records are ever matched by one."""
    args, tools, results, call_ids = h.args, h.tools, h.results, h.call_ids
    i = len(args) - 1
    # The usual case first: the result of the call recorded last. Equal signatures imply equal
    # tools (a signature starts with `<tool>:`), and a pending record's unknown is None
    # (record_call), so neither column is read or written: each is a cold list in a run's state.
    if i >= 0 and args[i] == sig and results[i] is None and (not call_id or call_ids[i] == call_id):
        results[i] = result_hash
        call_ids[i] = None  # complete: its id is never read again (History)
        if unknown is not None:
            h.unknowns[i] = unknown
        if i >= history_size:
            h.trim(history_size)  # §1.8: a smaller historySize applies at the next record
        return False
    for j in range(i - 1, -1, -1):
        if args[j] == sig and results[j] is None and tools[j] == tool and (not call_id or call_ids[j] == call_id):
            results[j] = result_hash
            call_ids[j] = None
            h.unknowns[j] = unknown
            h.trim(history_size)  # §1.8: a smaller historySize applies at the next record
            return False
    h.push(tool, sig, None, result_hash, unknown, history_size)  # complete: no call id kept
    return True
