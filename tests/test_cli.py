"""What a user expects of the command line (issue 12): --version, help written for users (every
flag explained, every choice listed), one error style, a complete pinned install, normal events
at INFO."""

from __future__ import annotations

import argparse
import logging
import re
import subprocess
from importlib import metadata

import pytest

from autoscaler import __version__
from autoscaler.cli import build_parser, main
from tests.support.procs import PYTHON, REPO


def _parsers(parser: argparse.ArgumentParser, path: str = "autoscaler"):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_version(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == f"autoscaler {__version__}"
    assert __version__ == metadata.version("fleet-autoscaler")


def test_every_flag_has_help_and_every_choice_flag_lists_its_choices():
    missing, unlisted = [], []
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            name = "/".join(action.option_strings) or action.dest
            if not (action.help or "").strip():
                missing.append(f"{path} {name}")
            choices = getattr(action, "choices", None)
            if choices:
                shown = f"{action.metavar or ''} {action.help or ''}"
                if not all(str(c) in shown for c in choices) and action.metavar is not None:
                    unlisted.append(f"{path} {name}")
    assert missing == [] and unlisted == []
    # flags validated by the command (not argparse) list their choices too
    for path, flag, choices in [("report", "--by", ("day", "week", "month")),
                                ("report", "--format", ("table", "csv", "json", "md", "html")),
                                ("report", "--source", ("live", "advisory", "simulation", "all")),
                                ("why", "--source", ("live", "advisory", "simulation", "all"))]:
        parser = dict(_parsers(build_parser()))[f"autoscaler {path}"]
        (action,) = [a for a in parser._actions if flag in a.option_strings]
        assert all(c in action.help for c in choices), (path, flag)


def test_top_level_help_describes_the_product_not_the_code(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "fleet" in text and "backtest" in text and "cost" in text
    assert "module" not in text and "register" not in text
    for command in ("policy", "decide", "simulate", "report", "why", "ledger", "emulate", "signals"):
        assert re.search(rf"^\s+{command}\s+\S", text, re.M), command


def test_one_error_style_no_program_prefix():
    p = subprocess.run([PYTHON, "-m", "autoscaler", "why", "--at", "x"], capture_output=True, text=True, cwd=REPO,
                       timeout=60)
    assert p.returncode == 2 and p.stderr.startswith("--at: 'x'") and "autoscaler:" not in p.stderr


def test_the_base_install_has_the_postgresql_driver_and_the_gateway_and_constraints_pin_everything():
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    base = " ".join(project["dependencies"])
    assert "psycopg2-binary" in base and "sglang-router==0.3.2" in base
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version.strip()
    installed = {re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower(): d.version for d in metadata.distributions()}
    for skip in ("pip", "setuptools", "wheel", "fleet-autoscaler"):
        installed.pop(skip, None)
    # what CI installed is exactly what constraints.txt says (an install with it gets what CI tested)
    assert {k: v for k, v in installed.items() if pins.get(k) != v} == {}


def test_a_new_ledger_is_info_not_a_warning(tmp_path, caplog):
    from autoscaler.ledger.store import Ledger

    with caplog.at_level(logging.DEBUG):
        Ledger(f"sqlite:///{tmp_path / 'new.db'}").close()
    created = [r for r in caplog.records if "creating them" in r.getMessage()]
    assert [r.levelno for r in created] == [logging.INFO]


def test_a_worker_draining_at_exit_logs_at_info_not_warning(tmp_path):
    import signal

    from tests.support.procs import start_worker

    w = start_worker(tmp_path)
    w.proc.signal(signal.SIGTERM)
    assert w.proc.wait(20) == 0
    log = w.proc.log()
    assert "listening on" in log  # the ready line is printed (it is what a caller waits for)
    assert "WARNING" not in log  # draining at exit and drained are normal: INFO


def test_the_interfaces_document_is_in_the_project_and_every_reference_points_there():
    doc = (REPO / "docs" / "interfaces.md").read_text()
    for heading in ("## Command line", "## JSON outputs", "## The backtest's definitions", "## The ledger",
                    "## The live side"):
        assert heading in doc, heading
    tracked = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=REPO, check=True).stdout.split()
    stale = [f for f in tracked if f.endswith((".py", ".md", ".sh", ".toml", ".yaml"))
             and (REPO / f).exists() and "INTERFACES.md" in (REPO / f).read_text(errors="replace")
             and f != "tests/test_cli.py"]
    assert stale == []  # users have no ../shared: everything cites docs/interfaces.md


def test_layering_sim_has_no_network_or_database_io_and_no_private_cli_imports():
    import ast

    io_modules = ("httpx", "aiohttp", "sqlalchemy", "autoscaler.ledger", "autoscaler.adapters",
                  "prometheus_api_client", "urllib.request", "socket")
    offenders = []
    for path in sorted((REPO / "autoscaler" / "sim").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.name}: {n}" for n in names if n.startswith(io_modules)]
    assert offenders == []
    main_py = ast.parse((REPO / "autoscaler" / "emulator" / "__main__.py").read_text())
    private = [a.name for node in ast.walk(main_py) if isinstance(node, ast.ImportFrom)
               and (node.module or "").startswith("autoscaler.cli") for a in node.names if a.name.startswith("_")]
    assert private == []
