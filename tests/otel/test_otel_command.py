"""``loopwarden spans``: registered in the CLI, settings from flags over environment over defaults."""

from __future__ import annotations

from loopwarden.cli import build_parser
from loopwarden.otel import command
from loopwarden.otel.ingest import SpanSettings


def test_spans_is_a_sub_command_with_the_exporter_defaults():
    args = build_parser().parse_args(["spans", "--encoding", "otlp_json", "--max-spans", "5"])
    assert args.func is command.run and args.encoding == "otlp_json" and args.max_spans == 5
    s = SpanSettings()
    assert (s.spans_topic, s.encoding, s.events_topic) == ("otlp_spans", "otlp_proto", "agent.events")


def test_settings_flags_over_environment_over_defaults():
    env = {
        "LOOPWARDEN_SPANS_SPANS_TOPIC": "traces",
        "LOOPWARDEN_SPANS_MAX_SPANS": "7",
        "LOOPWARDEN_SPANS_ENCODING": "x",
    }
    s = SpanSettings.from_env(env, encoding="otlp_json")
    assert (s.spans_topic, s.max_spans, s.encoding, s.group_id) == ("traces", 7, "otlp_json", "loopwarden-spans")


def test_contradictory_security_settings_exit_2(monkeypatch, capsys):
    monkeypatch.setenv("LOOPWARDEN_SPANS_SECURITY_PROTOCOL", "SASL_SSL")
    assert build_parser().parse_args(["spans"]).func(build_parser().parse_args(["spans"])) == 2
    assert "sasl_username" in capsys.readouterr().err


def test_an_unknown_encoding_from_the_environment_exits_2(monkeypatch, capsys):
    monkeypatch.setenv("LOOPWARDEN_SPANS_ENCODING", "jaeger_proto")
    args = build_parser().parse_args(["spans"])
    assert args.func(args) == 2
    assert "encoding must be one of otlp_proto, otlp_json" in capsys.readouterr().err
