"""Property tests: parsers return a value or raise HardwareParseError, never anything else."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.hardware import HardwareReport
from node_agent.hardware import (
    HardwareParseError,
    parse_displays_json,
    parse_hardware_json,
    parse_hardware_text,
    parse_hid_idle_seconds,
    parse_pmset_batt,
    parse_pmset_therm,
    parse_rdma_status,
    parse_sysctl,
    parse_thunderbolt_json,
    parse_thunderbolt_text,
    simulated_profile,
    thunderbolt_links,
)
from node_agent.hardware.errors import UnknownProfileError
from tests.node_agent.hardware._fixtures import recorded

TEXT_PARSERS: list[Callable[[str], object]] = [
    parse_sysctl,
    parse_hardware_text,
    parse_thunderbolt_text,
    parse_rdma_status,
    parse_hid_idle_seconds,
    parse_pmset_batt,
    parse_pmset_therm,
]
JSON_PARSERS: list[Callable[[str], object]] = [
    parse_hardware_json,
    parse_displays_json,
    parse_thunderbolt_json,
]
# Lines built from the vocabulary the text parsers look for, so they get past the first check.
_WORDS = st.sampled_from(
    [
        "Chip",
        "Memory",
        "Speed",
        "Status",
        "Device Name",
        "Vendor Name",
        "Port",
        "Thunderbolt Bus 1",
        "Protocol ID",
        "Service Key",
        "Total Number of Cores",
        "HIDIdleTime",
        "Now drawing from",
        "rdma",
        "enabled",
        "80 Gb/s",
        "512 GB",
        "Device connected",
        "Mac16,9",
        "64087",
        "(",
        "%;",
        "'",
        ":",
        " ",
    ]
)
_LINES = st.lists(
    st.tuples(st.integers(0, 12), st.lists(_WORDS, max_size=6)).map(
        lambda t: " " * t[0] + ": ".join(t[1])
    ),
    max_size=30,
).map("\n".join)
_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "_name",
                    "_items",
                    "chip_type",
                    "physical_memory",
                    "number_processors",
                    "sppci_cores",
                    "receptacle_1_tag",
                    "current_speed_key",
                    "receptacle_status_key",
                    "services_title",
                    "protocol_id_key",
                    "device_name_key",
                    "machine_model",
                ]
            ),
            children,
            max_size=5,
        )
    ),
    max_leaves=20,
)
_DOCUMENTS = st.fixed_dictionaries(
    {},
    optional={
        "SPHardwareDataType": _JSON_VALUES,
        "SPDisplaysDataType": _JSON_VALUES,
        "SPThunderboltDataType": _JSON_VALUES,
    },
).map(json.dumps)


def _parses_or_raises_parse_error(parse: Callable[[str], object], text: str) -> None:
    with contextlib.suppress(HardwareParseError):
        parse(text)


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=400) | _LINES)
def test_text_parsers_never_crash(text: str) -> None:
    for parse in TEXT_PARSERS + JSON_PARSERS:
        _parses_or_raises_parse_error(parse, text)


@settings(max_examples=200, deadline=None)
@given(text=_DOCUMENTS)
def test_json_parsers_never_crash_on_wrong_shapes(text: str) -> None:
    for parse in JSON_PARSERS:
        _parses_or_raises_parse_error(parse, text)


@settings(max_examples=100, deadline=None)
@given(cut=st.integers(0, 4000))
def test_truncated_recorded_thunderbolt_output_never_crashes(cut: int) -> None:
    # A system_profiler killed by its timeout leaves a prefix of its output.
    for name, parse in [
        (
            "mac-studio-m3-ultra-cabled-to-macbook-SPThunderboltDataType.json",
            parse_thunderbolt_json,
        ),
        (
            "mac-mini-m4-pro-cabled-to-studio-m4-max-SPThunderboltDataType-partial.txt",
            parse_thunderbolt_text,
        ),
    ]:
        with contextlib.suppress(HardwareParseError):
            thunderbolt_links(parse(recorded(name)[:cut]))


@settings(max_examples=150, deadline=None)
@given(
    name=st.text(max_size=20)
    | st.from_regex(r"m[0-9]{1,2}(-(pro|max|ultra))?-[0-9]{1,4}", fullmatch=True)
)
def test_profiles_are_reports_or_value_errors(name: str) -> None:
    try:
        report = simulated_profile(name)
    except UnknownProfileError as error:
        assert isinstance(error, ValueError) and "m3-ultra-512" in str(error)
    else:
        assert isinstance(report, HardwareReport) and report.simulated
        assert report.gpu_working_set_bytes < report.memory_bytes
