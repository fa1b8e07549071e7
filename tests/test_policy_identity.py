"""A group's, node's and worker's identity in the policy (issue 35 #12, #13; issue 34 #11):
duplicates caught by what they name, not by their text; names short and ASCII, refused in one
line; an IPv6 scope ID that is not an interface name refused before any command runs."""

from __future__ import annotations

import os
import subprocess

import pytest
import yaml

from autoscaler.policy import PolicyInvalid, parse_policy
from tests.support.procs import PYTHON, REPO, bad

DEFAULT = (REPO / "policies/default.yaml").read_text()


def policy_text(**edits) -> str:
    """The default policy with groups[i] / groups[i].nodes[j] fields replaced:
    ``policy_text(g0={"worker_url": ...}, g1n0={"address": ...})``."""
    data = yaml.safe_load(DEFAULT)
    for key, values in edits.items():
        group = data["fleet"]["groups"][int(key[1])]
        target = group["nodes"][int(key[3])] if "n" in key else group
        target.update(values)
    return yaml.safe_dump(data, allow_unicode=True)


def errors_of(text: str) -> list[str]:
    with pytest.raises(PolicyInvalid) as exc:
        parse_policy(text, "x.yaml")
    return exc.value.errors


@pytest.mark.parametrize("first, second, field, needle", [
    # the worker URLs: one worker, whose series the signals gave to g2 while g1 read absent
    ({"worker_url": "HTTP://127.0.0.1:38011"}, {"worker_url": "http://127.0.0.1:38011"}, "fleet.groups[1]",
     "worker_url 'http://127.0.0.1:38011' is also used by group 'g1' (as 'HTTP://127.0.0.1:38011'"),
    ({"worker_url": "http://Spark-1.example:30000"}, {"worker_url": "https://spark-1.example.:30000"},
     "fleet.groups[1]", "worker_url 'https://spark-1.example.:30000' is also used by group 'g1'"),
    ({"worker_url": "http://[::ffff:10.0.0.9]:30000"}, {"worker_url": "http://10.0.0.9:30000"}, "fleet.groups[1]",
     "worker_url 'http://10.0.0.9:30000' is also used by group 'g1'"),
    ({"worker_url": "http://[FD00::11]:30000"}, {"worker_url": "http://[fd00:0::11]:30000"}, "fleet.groups[1]",
     "worker_url 'http://[fd00:0::11]:30000' is also used by group 'g1'"),
])
def test_one_worker_spelt_two_ways_is_a_duplicate(first, second, field, needle):
    lines = errors_of(policy_text(g0=first, g1=second))
    assert len(lines) == 1 and lines[0].startswith(f"x.yaml: {field}: {needle}"), lines


@pytest.mark.parametrize("first, second", [
    ("node-a.example", "NODE-A.example"),
    ("node-a.example", "node-a.example."),
    ("::ffff:10.0.0.11", "10.0.0.11"),
    ("fe80::1%eth0", "FE80:0::1%eth0"),
    ("10.0.0.11", "10.11"),  # the resolver's short forms (inet_aton): 10.11 is 10.0.0.11
    ("127.0.0.1", "0x7f.0.0.1"),
])
def test_one_node_spelt_two_ways_is_a_duplicate(first, second):
    lines = errors_of(policy_text(g0n0={"address": first}, g1n0={"address": second}))
    assert len(lines) == 1 and lines[0].startswith(
        f"x.yaml: fleet.groups[1].nodes[0]: node address {second!r} is also in group 'g1' (as {first!r}"), lines


def test_different_hosts_and_ports_stay_valid():
    # same host, other port (two workers on one machine); an interface's case is its own (eth0 is not ETH0)
    parse_policy(policy_text(g0={"worker_url": "http://10.0.0.9:30000"}, g1={"worker_url": "http://10.0.0.9:30001"}),
                 "x.yaml")
    parse_policy(policy_text(g0n0={"address": "fe80::1%eth0"}, g1n0={"address": "fe80::1%ETH0"}), "x.yaml")


@pytest.mark.parametrize("name, needle", [
    ("g" * 65, "... is 65 characters long (at most 64)"),
    ("g" * 5000, "is 5,000 characters long (at most 64)"),
    ("gé1", "'gé1' holds 'é'"),
    ("-g1", "'-g1' does not start with a letter or a digit"),
])
def test_a_group_name_is_short_and_ascii_refused_in_one_line(tmp_path, name, needle):
    # one group only: pydantic also called the emptied list "too short" ("Tuple should have at least
    # 1 item after validation, not 0"), a second, confusing line
    data = yaml.safe_load(DEFAULT)
    data["fleet"].update(groups=data["fleet"]["groups"][:1], floor_groups=1, ceiling_groups=1)
    data["fleet"]["groups"][0]["name"] = name
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    p = subprocess.run([PYTHON, "-m", "autoscaler", "policy", "validate", str(path)], capture_output=True, text=True,
                       cwd=REPO, timeout=60)
    err = bad(p, f"{path}: fleet.groups[0].name: ", needle)
    assert "Tuple" not in err
    data["fleet"]["groups"][0]["name"] = "g" * 64  # the longest valid one
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert subprocess.run([PYTHON, "-m", "autoscaler", "policy", "validate", str(path)], capture_output=True,
                          cwd=REPO, timeout=60).returncode == 0


@pytest.mark.parametrize("edit, field", [
    ({"g0n0": {"address": "fe80::1%$(touch${IFS}PWNED);id"}}, "fleet.groups[0].nodes[0].address"),
    ({"g0": {"worker_url": "http://[fe80::2%25$(id)]:31002"}}, "fleet.groups[0].worker_url"),
    ({"g0n0": {"address": "fe80::1%eth0 -oProxyCommand=x"}}, "fleet.groups[0].nodes[0].address"),
])
def test_an_ipv6_scope_id_is_an_interface_name_only(edit, field):
    lines = errors_of(policy_text(**edit))
    assert len(lines) == 1 and lines[0].startswith(f"x.yaml: {field}: ") and "scope ID" in lines[0], lines
    # an interface name or number is still a scope ID
    parse_policy(policy_text(g0n0={"address": "fe80::1%eth0"}, g1n0={"address": "fe80::1%2"},
                             g0={"worker_url": "http://[fe80::2%25eth0]:31002"}), "x.yaml")


def test_a_scope_id_never_reaches_a_site_shell_through_the_actuator(tmp_path):
    """Issue 34 #11 with real processes: ``autoscaler run --once`` with the documented ssh
    templates and a site ``ssh`` stand-in on PATH that, like a wrapper or a ProxyCommand, hands the
    host it is given to a shell. Before the fix the policy validated, the status sweep ran ssh, and
    the shell ran ``touch PWNED``; now the policy is refused (exit 2) before any command runs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "ssh-calls"
    ssh = bin_dir / "ssh"
    ssh.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n[ "$1" = -- ] && shift\n'
                   f'cd {tmp_path} && sh -c "echo connecting to $1" >/dev/null 2>&1\nexit 3\n')
    ssh.chmod(0o755)
    data = yaml.safe_load(policy_text(g0n0={"address": "fe80::1%$(touch${IFS}PWNED);id"}))
    data["actuator"] = {"kind": "command", "timeout_s": 10,
                        "start": ["ssh", "--", "{node.address}", "sudo", "systemctl", "start", "sglang-tp2@{group.name}"],
                        "stop": ["ssh", "--", "{node.address}", "sudo", "systemctl", "stop", "sglang-tp2@{group.name}"],
                        "status": ["ssh", "--", "{node.address}", "systemctl", "is-active", "--quiet",
                                   "sglang-tp2@{group.name}"]}
    policy = tmp_path / "p.yaml"
    policy.write_text(yaml.safe_dump(data))
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    p = subprocess.run([PYTHON, "-m", "autoscaler", "run", "--policy", str(policy), "--db",
                        f"sqlite:///{tmp_path}/l.db", "--once", "--gateway", "http://127.0.0.1:9",
                        "--prometheus", "http://127.0.0.1:9"],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert not (tmp_path / "PWNED").exists(), "the site shell ran the scope ID"
    bad(p, "fleet.groups[0].nodes[0].address", "scope ID")
    assert not calls.exists(), calls.read_text()  # no command ran at all


# ------------------------------------------------------------------------------ policy show
def _fields_with_descriptions(model, prefix=""):
    """(dotted path, description) of every field of the policy's models, nested ones too."""
    from pydantic import BaseModel

    out = []
    for name, field in type(model).model_fields.items():
        out.append((prefix + name, field.description))
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            out += _fields_with_descriptions(value, f"{prefix}{name}.")
        elif isinstance(value, tuple) and value and isinstance(value[0], BaseModel):
            out += _fields_with_descriptions(value[0], f"{prefix}{name}[0].")
    return out


def test_policy_show_gives_each_field_its_description_and_stays_the_same_data(tmp_path):
    """Issue 35 ("also expected"): `policy show` printed the values alone; the docs say it shows
    every field with its description. The output is still the effective policy as YAML (loading it
    gives exactly the --json data), so it can be saved and edited."""
    import json
    import textwrap

    from autoscaler.policy import load_policy

    for name in ("default.yaml", "demo.yaml"):
        path = REPO / "policies" / name
        p = subprocess.run([PYTHON, "-m", "autoscaler", "policy", "show", str(path)], capture_output=True, text=True,
                           cwd=REPO, timeout=60)
        assert p.returncode == 0, p.stderr
        j = subprocess.run([PYTHON, "-m", "autoscaler", "policy", "show", str(path), "--json"], capture_output=True,
                           text=True, cwd=REPO, timeout=60)
        assert yaml.safe_load(p.stdout) == json.loads(j.stdout)
        comments = " ".join(line.strip()[2:] for line in p.stdout.splitlines() if line.strip().startswith("# "))
        fields = _fields_with_descriptions(load_policy(path).policy)
        assert len(fields) > 100
        for dotted, description in fields:
            assert description, f"{dotted} has no description"
            # wrapped over lines: compare word by word
            assert " ".join(textwrap.wrap(description, 10**6)) in comments, dotted
    # a saved `policy show` is a policy
    saved = tmp_path / "shown.yaml"
    saved.write_text(p.stdout)
    assert subprocess.run([PYTHON, "-m", "autoscaler", "policy", "validate", str(saved)], capture_output=True,
                          cwd=REPO, timeout=60).returncode == 0
