"""``autoscaler completion bash|zsh`` (issue 35, also expected: shell completion): the script is
generated from the parser, sourced into a real bash, and asked what it completes."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.support.procs import PYTHON, REPO

CASES = [
    # (words typed, the last one being completed) -> words offered (a subset; "" = none offered)
    (["autoscaler", "po"], {"policy"}),
    (["autoscaler", "policy", "sh"], {"show"}),
    (["autoscaler", "run", "--po"], {"--policy"}),
    (["autoscaler", "-v", "simulate", "--trace-format", ""], {"auto", "azure", "mooncake", "servegen", "csv"}),
    (["autoscaler", "report", "--format", ""], {"table", "csv", "json", "md", "html"}),
    (["autoscaler", "emulate", "load", "--tar"], {"--target"}),
    (["autoscaler", "completion", ""], {"bash", "zsh"}),
    (["autoscaler", "cordon", "g1", "--re"], {"--reason"}),
]


def complete(shell_script: str, words: list[str]) -> set[str]:
    quoted = " ".join("'" + w + "'" for w in words)
    program = (f"{shell_script}\nCOMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; _autoscaler; "
               'printf "%s\\n" "${COMPREPLY[@]}"')
    p = subprocess.run(["bash", "--noprofile", "--norc", "-c", program], capture_output=True, text=True, timeout=30,
                       cwd=REPO)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    return {line for line in p.stdout.splitlines() if line}


def test_bash_completion_offers_subcommands_options_and_choices():
    p = subprocess.run([PYTHON, "-m", "autoscaler", "completion", "bash"], capture_output=True, text=True, cwd=REPO,
                       timeout=60)
    assert p.returncode == 0 and p.stderr == ""
    for words, expected in CASES:
        got = complete(p.stdout, words)
        assert expected <= got, (words, got)
    # every subcommand of the CLI is offered at the top (generated from the parser: none forgotten)
    from autoscaler.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    assert complete(p.stdout, ["autoscaler", ""]) == set(sub.choices)
    # after an option that takes a file, file names (the folder's)
    assert "pyproject.toml" in complete(p.stdout, ["autoscaler", "run", "--policy", "py"])


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed here")
def test_zsh_completion_loads():
    p = subprocess.run([PYTHON, "-m", "autoscaler", "completion", "zsh"], capture_output=True, text=True, cwd=REPO,
                       timeout=60)
    z = subprocess.run(["zsh", "-fc", p.stdout + "\nwhence -w _autoscaler"], capture_output=True, text=True, timeout=30)
    assert z.returncode == 0 and "function" in z.stdout, z.stderr
