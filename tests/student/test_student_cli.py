"""`ratchet student-server --help` names every option; a malformed --adapter says how to write it."""

from __future__ import annotations

from click.testing import CliRunner

from ratchet_cli.main import cli


def test_help_lists_the_options():
    result = CliRunner().invoke(cli, ["student-server", "--help"])
    assert result.exit_code == 0, result.output
    for option in (
        "--host",
        "--port",
        "--base",
        "--api-key",
        "--max-batch",
        "--adapter",
        "--served-model-name",
    ):
        assert option in result.output
    assert "8102" in result.output


def test_bad_adapter_option_says_how_to_write_it():
    result = CliRunner().invoke(cli, ["student-server", "--adapter", "no-equals-sign"])
    assert result.exit_code == 2
    assert "NAME=PATH" in result.output
