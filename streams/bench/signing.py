"""``loopwarden bench signing``: what signed records cost, per record, against encoding the verdict.

A worker with a signing key signs every record it publishes on the control,
shadow and incidents topics (one verdict per gated call in gate mode); a
runner with verdict keys verifies the records of its own runs; a hash secret
adds an HMAC per digest of a published warning key. Each figure is printed
with its ratio to ``encode_verdict`` of the same verdict, timed in the same run.
"""

from __future__ import annotations

import time

import msgspec


def bench_signing(n: int) -> dict:
    from loopwarden.detection.published import keyed_hashes
    from loopwarden.kafka.signing import generate, signer_from, verifier_from
    from loopwarden.schemas.verdicts import Verdict, encode_verdict

    private, public, _ = generate()
    signer = signer_from(private.decode(), None, ["ctl"])
    verifier = verifier_from(public.decode(), None)
    key = "generic:read:read:" + "a" * 64 + ":" + "b" * 64
    verdict = Verdict(
        verdict_id="agent.events:3:123456:0",
        action="block",
        agent_id="agent-1",
        run_id="run-1",
        level="critical",
        detector="generic_repeat",
        count=3,
        message="CRITICAL: Called read with identical arguments and identical outcomes 3 times. "
        "Session execution blocked to prevent runaway loops.",
        warning_key=key,
        tool_name="read",
        tool_call_id="call-9",
        ts=1.0,
    )
    value = encode_verdict(verdict)
    headers = signer.headers("ctl", b"run-1", value)

    def per_call(fn) -> float:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - start) / n * 1e6

    encode = per_call(lambda: encode_verdict(verdict))
    sign = per_call(lambda: signer.headers("ctl", b"run-1", value))
    verify = per_call(lambda: verifier.verify("ctl", b"run-1", value, headers))
    hmac = per_call(lambda: keyed_hashes(b"secret", key))
    return {
        "records": n,
        "value_bytes": len(value),
        "encode_verdict_us": round(encode, 2),
        "sign_us": round(sign, 2),
        "verify_us": round(verify, 2),
        "keyed_warning_key_us": round(hmac, 2),
        "sign_vs_encode": round(sign / encode, 1),
        "verify_vs_encode": round(verify / encode, 1),
        "keyed_warning_key_vs_encode": round(hmac / encode, 1),
    }


def add_arguments(p) -> None:
    p.add_argument("--records", type=int, default=20_000, help="records timed per operation")


def run(args) -> int:
    print(msgspec.json.format(msgspec.json.encode(bench_signing(max(1, args.records)))).decode())
    return 0
