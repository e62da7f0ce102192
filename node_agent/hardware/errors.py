"""Errors raised while reading a host's hardware.

HardwareError
├── HardwareParseError (also a ValueError): command output we cannot read
├── CommandError: a command was missing, failed or timed out
├── UnsupportedPlatformError: no discovery path for this operating system
└── UnknownProfileError (also a ValueError): a bad --profile name
"""

from __future__ import annotations


class HardwareError(Exception):
    """Base class for every failure in node_agent.hardware."""


class HardwareParseError(HardwareError, ValueError):
    """Command output did not have the shape its parser expects."""


class CommandError(HardwareError):
    """A hardware command could not be run to completion."""

    def __init__(self, argv: tuple[str, ...], reason: str) -> None:
        super().__init__(f"{' '.join(argv)}: {reason}")
        self.argv = argv
        self.reason = reason


class UnsupportedPlatformError(HardwareError):
    """The node agent has no way to read this operating system's hardware."""


class UnknownProfileError(HardwareError, ValueError):
    """A simulated profile name that is malformed or not in the chip table."""
