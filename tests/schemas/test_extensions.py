"""The `loopwarden` extension block: off by default, overlaid per agent, bad parts reported."""

from loopwarden.schemas.config import FleetConfig
from loopwarden.schemas.extensions import DEFAULT_EXTENSIONS, resolve_extensions


def test_no_block_means_everything_off():
    fleet = FleetConfig.from_document({"tools": {"loopDetection": {"enabled": True}}})
    ext = fleet.extensions("any")
    assert ext == DEFAULT_EXTENSIONS
    assert ext.shadow is False and not ext.incidents.enabled and not ext.cross_run.enabled
    assert not ext.shadowed("generic_repeat")


def test_agent_sections_overlay_global_key_by_key():
    fleet = FleetConfig.from_document(
        {
            "loopwarden": {"incidents": {"enabled": True, "minRuns": 7}, "shadow": True},
            "agents": {
                "list": [{"id": " Coder ", "loopwarden": {"incidents": {"minStreak": 4}, "shadow": ["ping_pong"]}}]
            },
        }
    )
    coder = fleet.extensions("coder")
    assert coder.incidents.enabled and coder.incidents.min_runs == 7 and coder.incidents.min_streak == 4
    assert coder.shadowed("ping_pong") and not coder.shadowed("generic_repeat")
    other = fleet.extensions("other")
    assert other.incidents.min_streak == 3 and other.shadowed("generic_repeat")


def test_bad_section_falls_back_alone_and_is_reported():
    ext, problems = resolve_extensions(
        {"incidents": {"minRuns": "many"}, "crossRun": {"enabled": True}, "shadwo": True}
    )
    assert ext.incidents == DEFAULT_EXTENSIONS.incidents
    assert ext.cross_run.enabled
    assert any("incidents" in p and "minRuns" in p for p in problems)
    assert any("shadwo" in p for p in problems)


def test_live_override_keeps_extensions_unless_given():
    fleet = FleetConfig.from_document({"loopwarden": {"shadow": True}})
    bare = fleet.with_override("*", {"enabled": True})
    assert bare.extensions("a").shadow is True and bare.resolve("a").enabled
    switched = bare.with_override("a", None, {"shadow": False})
    assert switched.extensions("a").shadow is False and switched.extensions("b").shadow is True


def test_fleet_wide_says_whether_any_agent_has_incidents_or_cross_run_on():
    from loopwarden.schemas.config import FleetConfig

    def wide(doc: dict) -> bool:
        return FleetConfig.from_document(doc).fleet_wide()

    assert not wide({})
    assert not wide({"loopwarden": {"shadow": True, "escalation": {"afterBlocks": 2}}})  # run-local only
    assert wide({"loopwarden": {"incidents": {"enabled": True}}})
    assert wide({"agents": {"list": [{"id": "a"}, {"id": "b", "loopwarden": {"crossRun": {"enabled": True}}}]}})
    # on globally, off for the one listed agent: the others still join
    assert wide(
        {
            "loopwarden": {"crossRun": {"enabled": True}},
            "agents": {"list": [{"id": "a", "loopwarden": {"crossRun": {"enabled": False}}}]},
        }
    )
    off = FleetConfig.from_document({})
    assert off.with_override("a", None, {"incidents": {"enabled": True}}).fleet_wide()  # a live override counts
