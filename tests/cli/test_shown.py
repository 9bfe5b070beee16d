"""``shown`` (flows/cli/app.py, issue 48 defect 8): what the terminal gets of a value, a name or an error line.
Through the CLI (sql's table, why, runs, an error): tests/e2e/test_output_terminal_tsv.py."""

from __future__ import annotations

from flows.cli.app import shown


def test_shown_escapes_c0_del_c1_and_bidi_controls_and_nothing_else():
    text = "a\x1b]0;T\x07 \x00\t\n\r\x7f\x85\x9b \u202a\u202e\u2066\u2069 é ß \u200b \\x1b"
    assert shown(text) == ("a\\x1b]0;T\\x07 \\x00\\t\\n\\r\\x7f\\x85\\x9b \\u202a\\u202e\\u2066\\u2069 é ß \u200b \\x1b")
    assert shown("line 1\nline 2\x1b[2J", lines=True) == "line 1\nline 2\\x1b[2J"  # an error of several lines
