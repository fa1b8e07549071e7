"""deploy/: systemd units, the container file, Prometheus scrape config and alert rules, the Grafana
dashboard and the Kubernetes manifests, each checked with the real tool where there is one.

- Alerts: ``promtool check rules`` and ``promtool test rules deploy/alerts.test.yml``; then each
  alert is replaced by one that never fires and by one that always fires, and the unit tests must
  fail both times (so every alert has a case where it fires and one where it stays quiet).
- Dashboard: one real Prometheus for the module, backfilled with ``promtool tsdb
  create-blocks-from openmetrics`` from series written here (every ``autoscaler_*`` series of
  docs/metrics.md the dashboard uses, plus ``sglang:`` worker and ``smg_`` gateway series); every
  panel query must return data over the last hour of that history.
- systemd: parsed as INI for the key options; ``systemd-analyze verify`` when it is installed.
- Kubernetes: YAML documents with apiVersion/kind/metadata; the Deployment's environment read by
  the real settings loader; the ConfigMap's policy through the real policy loader.
"""

from __future__ import annotations

import http.server
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
import yaml

from autoscaler.policy import parse_policy
from autoscaler.settings import load_settings
from tests.support import prometheus as promsupport
from tests.support.postgres import pg_server, pg_url  # noqa: F401  (fixtures)
from tests.support.procs import free_port

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
SYSTEMD = DEPLOY / "systemd"
K8S = DEPLOY / "k8s"


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:  # CI installs Debian's prometheus (scripts/bootstrap.sh --test): an error, not a skip
        raise RuntimeError("promtool is not on PATH; scripts/bootstrap.sh --test installs Debian's prometheus")
    return path


# ------------------------------------------------------------------------- the metrics contract
def contract_metrics() -> dict[str, str]:
    """docs/metrics.md's table: metric name -> type."""
    out = {}
    for line in (ROOT / "docs/metrics.md").read_text().splitlines():
        m = re.match(r"^\|\s*(autoscaler_[a-z0-9_]+)\s*\|\s*([a-z()0-9]+)", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def metric_names(expr: str) -> set[str]:
    """The autoscaler_* families an expression reads (a histogram's _bucket/_sum/_count as its family)."""
    contract = contract_metrics()
    names = set()
    for name in re.findall(r"\b(autoscaler_[a-z0-9_]+)", expr):
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        names.add(base if base != name and contract.get(base) == "histogram" else name)
    return names


def dashboard() -> dict:
    return json.loads((DEPLOY / "grafana-dashboard.json").read_text())


def dashboard_targets() -> list[tuple[str, str]]:
    """(panel title / refId, expr) of every panel query."""
    return [(f"{p['title']} / {t['refId']}", t["expr"]) for p in dashboard()["panels"] for t in p["targets"]]


def alert_rules() -> list[dict]:
    doc = yaml.safe_load((DEPLOY / "alerts.rules.yml").read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def contract_table() -> dict[str, tuple[str, tuple[str, ...]]]:
    """docs/metrics.md's table: name -> (type, label names)."""
    out = {}
    for line in (ROOT / "docs/metrics.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("autoscaler_"):
            labels = re.sub(r"\([^)]*\)", "", cells[2])  # "state (off, starting, ...)" -> "state"
            out[cells[0]] = (cells[1].removesuffix("(1)"), tuple(n.strip() for n in labels.split(",") if n.strip()))
    return out


def test_service_registry_is_the_contract():
    """What `autoscaler run` registers (autoscaler/service/metrics.py) is docs/metrics.md's table:
    the same names, types and label names, nothing more, nothing less."""
    from prometheus_client.metrics import MetricWrapperBase

    from autoscaler.service.metrics import OptionalGauge, ServiceMetrics

    metrics = ServiceMetrics(instance="test", version="0")
    exported = {}
    for metric in vars(metrics).values():
        if isinstance(metric, MetricWrapperBase):
            name = metric._name + ("_total" if metric._type == "counter" else "")  # prometheus_client strips it
            exported[name] = (metric._type, tuple(metric._labelnames))
        elif isinstance(metric, OptionalGauge):  # absent while unknown (no NaN sample)
            exported[metric.name] = ("gauge", ())
    assert exported == contract_table()


def test_docs_metrics_table_is_the_contract():
    contract = contract_metrics()
    assert len(contract) == 29
    assert contract["autoscaler_decisions_total"] == "counter"
    assert contract["autoscaler_drain_duration_seconds"] == "histogram"
    assert contract["autoscaler_leader"] == "gauge"


def test_alerts_and_dashboard_use_only_contract_names_and_cover_every_metric():
    contract = set(contract_metrics())
    used_by_alerts = set().union(*(metric_names(r["expr"]) for r in alert_rules()))
    used_by_dashboard = set().union(*(metric_names(e) for _, e in dashboard_targets()))
    assert used_by_alerts - contract == set(), "alert rules use names that are not in docs/metrics.md"
    assert used_by_dashboard - contract == set(), "dashboard uses names that are not in docs/metrics.md"
    assert contract - used_by_alerts - used_by_dashboard == set(), "metrics neither shown nor alerted on"


# ------------------------------------------------------------------------------------- systemd
def parse_unit(path: Path) -> dict[str, list[tuple[str, str]]]:
    """A systemd unit as INI: section -> [(key, value)] in order, repeated keys kept, lines ending
    in a backslash joined with the next (systemd's continuation), comments dropped."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    pending = ""
    for raw in path.read_text().splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            sections.setdefault(current, [])
            continue
        assert current is not None, f"{path.name}: {line!r} before any [section]"
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}: {line!r} is not KEY=VALUE"
        sections[current].append((key.strip(), value.strip()))
    return sections


def values(unit: dict, section: str, key: str) -> list[str]:
    return [v for k, v in unit.get(section, []) if k == key]


def one(unit: dict, section: str, key: str) -> str:
    found = values(unit, section, key)
    assert len(found) == 1, f"[{section}] {key}: {found}"
    return found[0]


def seconds(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|min)?", text)
    assert m, text
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "min": 60, None: 1}[m.group(2)]


def parse_env_file(path: Path, *, commented: bool = False) -> dict[str, str]:
    """KEY=VALUE lines of an EnvironmentFile; with ``commented``, also the ``#KEY=VALUE`` alternatives."""
    env = {}
    for line in path.read_text().splitlines():
        text = line.strip()
        if commented and re.match(r"^#[A-Z_][A-Z0-9_]*=", text):
            text = text[1:]
        if not text or text.startswith("#"):
            continue
        key, _, value = text.partition("=")
        env[key] = value
    return env


def test_autoscaler_unit_has_the_key_options():
    unit = parse_unit(SYSTEMD / "autoscaler.service")
    svc = "Service"
    argv = shlex.split(one(unit, svc, "ExecStart"))
    assert argv[1:3] == ["run", "--policy"] and argv[0].endswith("/autoscaler")
    assert one(unit, svc, "User") == "autoscaler"
    assert one(unit, svc, "EnvironmentFile") == "/etc/autoscaler/autoscaler.env"
    assert one(unit, svc, "StateDirectory") == "autoscaler"
    assert one(unit, svc, "Restart") == "on-failure"
    assert 1 <= seconds(one(unit, svc, "RestartSec")) <= 60
    assert one(unit, svc, "RestartPreventExitStatus") == "2"  # bad input: a restart cannot fix it
    # SIGTERM, exit within 30 s: systemd must wait longer than that before it kills.
    assert one(unit, svc, "KillSignal") == "SIGTERM"
    assert seconds(one(unit, svc, "TimeoutStopSec")) > 30
    # The service says READY=1 and feeds the watchdog; systemd's watchdog comes after the
    # controller's own tick watchdog (which stops leading and exits 1) has had its say.
    from autoscaler.policy.loader import load_policy
    from autoscaler.service.watchdog import bound_s

    assert one(unit, svc, "Type") == "notify"
    bound = bound_s(load_policy(DEPLOY.parent / "policies" / "default.yaml").policy)
    assert seconds(one(unit, svc, "WatchdogSec")) > bound + 30
    for key in ("NoNewPrivileges", "ProtectHome", "PrivateTmp", "PrivateDevices", "ProtectKernelTunables",
                "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups", "LockPersonality",
                "MemoryDenyWriteExecute", "RestrictNamespaces", "RestrictSUIDSGID", "RestrictRealtime"):
        assert one(unit, svc, key) == "yes", key
    assert one(unit, svc, "ProtectSystem") == "strict"
    families = one(unit, svc, "RestrictAddressFamilies").split()
    assert {"AF_INET", "AF_INET6"} <= set(families) and "AF_PACKET" not in families
    assert "@system-service" in values(unit, svc, "SystemCallFilter")
    assert one(unit, svc, "CapabilityBoundingSet") == ""


def test_autoscaler_env_example_is_read_by_the_settings():
    env = parse_env_file(SYSTEMD / "autoscaler.env")
    settings = load_settings(env=env)
    assert settings.prometheus_url == env["AUTOSCALER_PROMETHEUS_URL"]
    assert settings.gateway_url == env["AUTOSCALER_GATEWAY_URL"]
    assert settings.database_url == env["AUTOSCALER_DATABASE_URL"]
    assert settings.database_url.startswith("postgresql://")
    assert settings.listen == env["AUTOSCALER_LISTEN"]
    assert settings.gateway_api_key == env["AUTOSCALER_GATEWAY_API_KEY"]
    check_setting_names(set(parse_env_file(SYSTEMD / "autoscaler.env", commented=True)))


def test_sglang_pair_template_has_the_launch_flags():
    unit = parse_unit(SYSTEMD / "sglang-tp2@.service")
    svc = "Service"
    exec_start = one(unit, svc, "ExecStart")
    argv = exec_start.split()
    assert argv[1:3] == ["-m", "sglang.launch_server"]
    flags = " ".join(argv)
    for flag in ("--tp 2", "--nnodes 2", "--node-rank ${NODE_RANK}", "--dist-init-addr ${DIST_INIT_ADDR}",
                 "--model-path ${MODEL_PATH}", "--port ${PORT}",
                 # the seed fleet's launch flags (CONTEXT.md §2) and metrics for the load signals
                 "--mem-fraction-static 0.80", "--chunked-prefill-size 8192", "--max-running-requests 6",
                 "--kv-cache-dtype bf16", "--enable-metrics"):
        assert flag in flags, flag
    # one EnvironmentFile per instance (%i = the group's name)
    env_file = one(unit, svc, "EnvironmentFile")
    assert "%i" in env_file
    # every variable ExecStart uses is set by the example file or by the unit's defaults
    example = parse_env_file(SYSTEMD / "sglang-tp2.env")
    defaults = dict(v.split("=", 1) for v in values(unit, svc, "Environment"))
    used = set(re.findall(r"\$\{?([A-Z_][A-Z0-9_]*)", exec_start))
    assert used - set(example) - set(defaults) == set()
    assert example["NODE_RANK"] in ("0", "1")
    host, _, port = example["DIST_INIT_ADDR"].rpartition(":")
    assert host and port.isdigit()
    # a failed half is restarted by the controller as a pair, not by systemd alone
    assert one(unit, svc, "Restart") == "no"


def test_readme_command_actuator_example_is_a_valid_policy():
    """The deploy/README.md `actuator` block that drives sglang-tp2@ over SSH, in the production
    policy, through the real policy loader; its status command is `systemctl is-active` (0/3)."""
    readme = (DEPLOY / "README.md").read_text()
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", readme, flags=re.S) if b.startswith("actuator:")]
    data = yaml.safe_load((ROOT / "policies/default.yaml").read_text())
    data.update(yaml.safe_load(block))
    actuator = parse_policy(yaml.safe_dump(data), source="deploy/README.md").actuator
    assert actuator.kind.value == "command"
    for argv in (actuator.start, actuator.stop, actuator.status):
        assert argv[0] == "ssh" and "{node.address}" in argv and "sglang-tp2@{group.name}" in argv
    assert "is-active" in actuator.status


def _verifiable_copy(unit: Path, out_dir: Path, name: str | None = None) -> Path:
    """The unit with its ExecStart binary pointed at one that exists here: the site's install paths
    (/opt/autoscaler, /opt/sglang) do not, and verify checks that the command is executable."""
    text = re.sub(r"^ExecStart=/\S+", f"ExecStart={sys.executable}", unit.read_text(), flags=re.M)
    path = out_dir / (name or unit.name)
    path.write_text(text)
    return path


def test_units_pass_systemd_analyze_verify(tmp_path):
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (Debian: apt-get install systemd)")
    units = [
        _verifiable_copy(SYSTEMD / "autoscaler.service", tmp_path),
        _verifiable_copy(SYSTEMD / "sglang-tp2@.service", tmp_path),
        _verifiable_copy(SYSTEMD / "sglang-tp2@.service", tmp_path, "sglang-tp2@g1.service"),
    ]
    for unit in units:
        done = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True, timeout=60)
        # verify exits 0 on unknown keys and bad values, but says so on stderr naming the file
        complaints = [line for line in (done.stdout + done.stderr).splitlines() if unit.name in line]
        assert done.returncode == 0 and complaints == [], (unit.name, done.returncode, done.stderr)


def test_systemd_analyze_verify_would_catch_a_typo(tmp_path):
    """The check above can fail: a misspelt hardening option is reported."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (Debian: apt-get install systemd)")
    unit = _verifiable_copy(SYSTEMD / "autoscaler.service", tmp_path)
    unit.write_text(unit.read_text().replace("NoNewPrivileges=yes", "NoNewPrivilege=yes"))
    done = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert "NoNewPrivilege" in done.stderr


def test_autoscaler_unit_exposure_is_low(tmp_path):
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (Debian: apt-get install systemd)")
    unit = _verifiable_copy(SYSTEMD / "autoscaler.service", tmp_path)
    done = subprocess.run([tool, "security", "--offline=yes", str(unit)], capture_output=True, text=True, timeout=60)
    if "--offline" in done.stderr and done.returncode != 0:
        pytest.skip(f"systemd-analyze security --offline needs systemd >= 250: {done.stderr.strip()}")
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", done.stdout + done.stderr)
    assert m, done.stdout[-500:]
    # 0 = fully locked down, 10 = none; the hardening options bring it to 1.5 on systemd 252 (without the hardening block: 9.2)
    assert float(m.group(1)) <= 2.0


_MDWE_EXEC = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(65, 1, 0, 0, 0) != 0:  # PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN (Linux >= 6.3), kept across exec
    sys.exit(77)
os.execv(sys.argv[1], sys.argv[1:])
"""

_CONTROLLER_WORK = r"""
import mmap, sys
import numpy, pydantic, sqlalchemy, yaml, httpx, aiohttp
import autoscaler.cli, autoscaler.core.decide, autoscaler.ledger.store, autoscaler.adapters.prometheus
from autoscaler.policy import load_policy
from autoscaler.ledger.schema import ensure_schema, make_engine
load_policy(sys.argv[1])
url = "sqlite:///" + sys.argv[2]
ensure_schema(make_engine(url), url)
assert float(numpy.percentile(numpy.arange(101.0), 99)) == 99.0
try:
    import psycopg2  # the PostgreSQL driver, when installed
except ImportError:
    pass
try:
    mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    print("W+X allowed")
except PermissionError:
    print("W+X refused")
"""


def test_controller_needs_no_writable_executable_memory(tmp_path):
    """MemoryDenyWriteExecute=yes in autoscaler.service: the controller's libraries (numpy,
    pydantic-core, SQLAlchemy with the migrations, aiohttp, psycopg2) load and work in a process
    under the kernel's MDWE (prctl PR_SET_MDWE, which refuses writable+executable memory as the
    systemd option does), and the same process is refused a W+X mapping (the check is active)."""
    done = subprocess.run(
        [sys.executable, "-c", _MDWE_EXEC, sys.executable, "-c", _CONTROLLER_WORK,
         str(ROOT / "policies/default.yaml"), str(tmp_path / "ledger.db")],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    if done.returncode == 77:
        pytest.skip("this kernel has no PR_SET_MDWE (Linux < 6.3)")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "W+X refused"


def test_controller_runs_as_the_unit_configures_it(tmp_path):
    """`autoscaler run` configured only by the environment, as autoscaler.env does it, in its state
    directory (the default SQLite ledger lands there): /healthz, /metrics and a token-guarded
    /status on AUTOSCALER_LISTEN, the container's HEALTHCHECK command passes against it, and SIGTERM
    ends it with exit 0 well within the unit's TimeoutStopSec."""
    import signal
    import time

    from tests.support.procs import Proc, wait_http

    port = free_port()
    unused = free_port()  # nothing listens: Prometheus and the gateway are unreachable, the run goes on
    env = {"AUTOSCALER_LISTEN": f"127.0.0.1:{port}", "AUTOSCALER_PROMETHEUS_URL": f"http://127.0.0.1:{unused}",
           "AUTOSCALER_GATEWAY_URL": f"http://127.0.0.1:{unused}", "AUTOSCALER_STATUS_TOKEN": "s3cret"}
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AUTOSCALER_")}
    shutil.copy(ROOT / "policies/default.yaml", tmp_path / "policy.yaml")
    proc = Proc([sys.executable, "-m", "autoscaler", "run", "--policy", str(tmp_path / "policy.yaml")],
                tmp_path / "run.log", env={**clean, **env}, cwd=tmp_path)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/healthz", 30.0, proc=proc)
        metrics = httpx.get(base + "/metrics", timeout=5).text
        assert re.search(r"^autoscaler_leader 1\.0$", metrics, re.M), metrics[-2000:]
        assert httpx.get(base + "/status", timeout=5).status_code == 401
        status = httpx.get(base + "/status", headers={"Authorization": "Bearer s3cret"}, timeout=5)
        assert status.status_code == 200 and status.json()["leader"] is True
        assert (tmp_path / "autoscaler.db").exists()  # sqlite:///autoscaler.db, relative to the working directory
        health = next(rest for w, rest in containerfile_instructions() if w == "HEALTHCHECK")
        argv = json.loads(health[health.index("CMD") + 3:].strip())
        check = subprocess.run([sys.executable, *argv[1:]], env={**clean, **env}, capture_output=True, timeout=30)
        assert check.returncode == 0, check.stderr
        t0 = time.monotonic()
        proc.signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, proc.log()[-2000:]
        stop_s = time.monotonic() - t0
    finally:
        proc.kill()
    unit = parse_unit(SYSTEMD / "autoscaler.service")
    assert stop_s < 30 < seconds(one(unit, "Service", "TimeoutStopSec")), stop_s


# ------------------------------------------------------------------------------------ container
def containerfile_instructions() -> list[tuple[str, str]]:
    out = []
    pending = ""
    for raw in (DEPLOY / "Containerfile").read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def test_containerfile_shape():
    ins = containerfile_instructions()
    froms = [rest.split()[0] for word, rest in ins if word == "FROM"]
    assert froms and all(f == "python:3.11-slim" for f in froms)
    final = ins[max(i for i, (w, _) in enumerate(ins) if w == "FROM"):]  # the image that runs
    runs = " ".join(rest for w, rest in final if w == "RUN")
    assert re.search(r"pip install -c \S*constraints\.txt", runs)
    users = [rest for w, rest in final if w == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert [rest for w, rest in final if w == "EXPOSE"] == ["9108"]
    health = [rest for w, rest in final if w == "HEALTHCHECK"]
    assert len(health) == 1 and "/healthz" in health[0]
    assert [json.loads(rest) for w, rest in final if w == "ENTRYPOINT"] == [["autoscaler", "run"]]
    # everything it copies from the build context exists in the repository (the context is its
    # root) and is not filtered out by its .dockerignore
    ignored = {line.strip() for line in (DEPLOY / "Containerfile.dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    for word, rest in ins:
        if word == "COPY" and not rest.startswith("--from"):
            for source in rest.split()[:-1]:
                assert (ROOT / source).exists(), source
                assert source.rstrip("/").split("/")[0] not in ignored, source


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self):  # noqa: N802 - the stdlib's name
        self.send_response(self.status if self.path == "/healthz" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("status, healthy, host", [(200, True, "127.0.0.1"), (503, False, "127.0.0.1"),
                                                  (200, True, "0.0.0.0")])
def test_containerfile_healthcheck_command_reads_healthz(status, healthy, host):
    """The HEALTHCHECK's own command (the image has no curl), run against a local /healthz."""
    health = next(rest for w, rest in containerfile_instructions() if w == "HEALTHCHECK")
    argv = json.loads(health[health.index("CMD") + 3:].strip())
    assert argv[0] == "python"
    handler = type("H", (_Health,), {"status": status})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = {**os.environ, "AUTOSCALER_LISTEN": f"{host}:{server.server_address[1]}"}
        done = subprocess.run([sys.executable, *argv[1:]], env=env, capture_output=True, timeout=30)
    finally:
        server.shutdown()
        server.server_close()
    assert (done.returncode == 0) is healthy, done.stderr


# ----------------------------------------------------------------------------------- prometheus
def test_prometheus_config_and_rules_pass_promtool_check():
    done = subprocess.run([_promtool(), "check", "config", str(DEPLOY / "prometheus.yml")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 rule files found" in done.stdout  # the config loads alerts.rules.yml
    done = subprocess.run([_promtool(), "check", "rules", str(DEPLOY / "alerts.rules.yml")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_prometheus_config_scrapes_workers_gateway_and_controllers():
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    jobs = {j["job_name"]: [t for sc in j["static_configs"] for t in sc["targets"]] for j in config["scrape_configs"]}
    assert set(jobs) == {"sglang-workers", "sglang-gateway", "autoscaler"}
    # the workers' targets are the policy's worker_urls (host:port = the instance label it maps)
    policy = yaml.safe_load((ROOT / "policies/default.yaml").read_text())
    assert jobs["sglang-workers"] == [g["worker_url"].removeprefix("http://") for g in policy["fleet"]["groups"]]
    assert all(t.endswith(":9108") for t in jobs["autoscaler"]) and len(jobs["autoscaler"]) >= 2
    assert all(t.endswith(":29000") for t in jobs["sglang-gateway"])  # smg's --prometheus-port
    # the AutoscalerInstanceDown alert selects the controllers' job by this name
    assert any('job="autoscaler"' in r["expr"] for r in alert_rules())


def _promtool_test(rules_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([_promtool(), "test", "rules", str(rules_dir / "alerts.test.yml")],
                          capture_output=True, text=True, timeout=60)


def test_alert_unit_tests_pass():
    done = _promtool_test(DEPLOY)
    assert done.returncode == 0, done.stdout + done.stderr


EXPECTED_ALERTS = {
    "AutoscalerDrainStuck", "AutoscalerNoDecision", "AutoscalerSignalsFailing", "AutoscalerAtCeilingSloMissed",
    "AutoscalerNoLeader", "AutoscalerSeveralLeaders", "AutoscalerPolicyReloadFailing",
    "AutoscalerRequestsCutByDrain", "AutoscalerInstanceDown", "AutoscalerGatewayUnusable", "AutoscalerActsInterrupted",
    "AutoscalerDecisionsUnrecorded",
}


def test_every_alert_has_a_firing_and_a_quiet_case():
    names = [r["alert"] for r in alert_rules()]
    assert set(names) == EXPECTED_ALERTS and len(names) == len(set(names))
    tests = yaml.safe_load((DEPLOY / "alerts.test.yml").read_text())["tests"]
    cases = [c for t in tests for c in t.get("alert_rule_test", [])]
    for name in names:
        mine = [c for c in cases if c["alertname"] == name]
        assert any(c["exp_alerts"] for c in mine), f"{name}: no case where it fires"
        assert any(not c["exp_alerts"] for c in mine), f"{name}: no case where it stays quiet"


@pytest.mark.parametrize("mutation", ["never", "always"])
def test_alert_unit_tests_catch_a_broken_alert(tmp_path, mutation):
    """Each alert replaced in turn by one that never fires (its firing cases must fail) and by one
    that always fires (its quiet cases must fail): the unit tests test every alert."""
    replacement = "vector(1) < 0" if mutation == "never" else "vector(1)"
    shutil.copy(DEPLOY / "alerts.test.yml", tmp_path / "alerts.test.yml")
    doc = yaml.safe_load((DEPLOY / "alerts.rules.yml").read_text())
    for name in EXPECTED_ALERTS:
        broken = json.loads(json.dumps(doc))
        for group in broken["groups"]:
            for rule in group["rules"]:
                if rule.get("alert") == name:
                    rule["expr"] = replacement
        (tmp_path / "alerts.rules.yml").write_text(yaml.safe_dump(broken))
        done = _promtool_test(tmp_path)
        assert done.returncode != 0, f"{name} {mutation} firing still passes the unit tests"
        assert name in done.stdout + done.stderr


# ----------------------------------------------------------------------------- grafana dashboard
T_END = 1767614400.0  # 2026-01-05 12:00 UTC: a fixed past; the test Prometheus keeps 100 years
SPAN_S = 3 * 3600
STEP_S = 30
CTL_A = {"job": "autoscaler", "instance": "a:9108"}  # leads
CTL_B = {"job": "autoscaler", "instance": "b:9108"}  # stands by
WORKERS = {"g1": "10.0.0.11:30000", "g2": "10.0.0.13:30000", "g3": "10.0.0.15:30000"}
TICK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
DRAIN_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1200, 1800)
TTFT_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 30)
# Each group's phases from minute m on (the history's minute 0 is T_END - 3 h).
TIMELINE = {
    "g1": [(0, "ready")],
    "g2": [(0, "off"), (40, "starting"), (50, "ready"), (168, "draining"), (172, "stopping"), (173, "off")],
    "g3": [(0, "off"), (100, "starting"), (110, "ready"), (150, "draining"), (155, "stopping"), (156, "off")],
}
STATES = ("off", "starting", "ready", "draining", "stopping", "failed")


def phase(group: str, minute: float) -> str:
    return [p for start, p in TIMELINE[group] if start <= minute][-1]


class OpenMetrics:
    """OpenMetrics text for promtool: each family's series together, samples in time order."""

    def __init__(self) -> None:
        self.families: dict[str, tuple[str, dict]] = {}  # name -> (type, {sample name+labels: [(t, v)]})

    def add(self, kind: str, family: str, sample: str, labels: dict, t: float, v: float) -> None:
        _, series = self.families.setdefault(family, (kind, {}))
        key = (sample, tuple(sorted(labels.items())))
        series.setdefault(key, []).append((t, v))

    def gauge(self, name, labels, t, v):
        self.add("gauge", name, name, labels, t, v)

    def counter(self, name, labels, t, v):
        self.add("counter", name.removesuffix("_total"), name, labels, t, v)

    def histogram(self, name, labels, t, buckets, observations):
        """``observations``: every value observed so far (cumulative, as a histogram is)."""
        for le in (*buckets, math.inf):
            count = sum(1 for o in observations if o <= le)
            self.add("histogram", name, name + "_bucket", {**labels, "le": "+Inf" if le == math.inf else f"{le:g}"}, t, count)
        self.add("histogram", name, name + "_count", labels, t, len(observations))
        self.add("histogram", name, name + "_sum", labels, t, float(sum(observations)))

    def text(self) -> str:
        out = []
        for family, (kind, series) in self.families.items():
            out.append(f"# TYPE {family} {kind}")
            for (sample, labels), points in series.items():
                label_text = ",".join(f'{k}="{v}"' for k, v in labels)
                for t, v in points:
                    out.append(f"{sample}{{{label_text}}} {float(v)!r} {t:.3f}")
        out.append("# EOF")
        return "\n".join(out) + "\n"


def dashboard_history() -> str:
    """Three hours of a leader (a) and a standby (b) running the fleet of policies/default.yaml:
    g2 starts at minute 40, g3 at 100; g3 drains at 150 (5 minutes), g2 at 168 (4 minutes, 2
    requests cut at its timeout); with the workers' and the gateway's own series."""
    om = OpenMetrics()
    t0 = T_END - SPAN_S
    decisions: dict[tuple[str, str], int] = {}
    tick_obs: list[float] = []
    drain_obs: list[float] = []
    ttft_obs: dict[str, list[float]] = {g: [] for g in WORKERS}
    finished = {g: 0 for g in WORKERS}
    signal_errors = {("ttft_p99_s", "stale"): 0, ("running", "unreachable"): 0}
    node_hours = saving = 0.0
    cut = 0
    for i in range(SPAN_S // STEP_S + 1):
        t = t0 + i * STEP_S
        minute = i * STEP_S / 60
        phases = {g: phase(g, minute) for g in TIMELINE}
        active = sum(p in ("starting", "ready", "draining", "stopping") for p in phases.values())
        # the controller
        for ctl, leads in ((CTL_A, 1), (CTL_B, 0)):
            om.gauge("autoscaler_leader", ctl, t, leads)
            om.gauge("autoscaler_epoch", ctl, t, 3)
            om.gauge("autoscaler_last_tick_timestamp_seconds", ctl, t, t - 1)
            om.gauge("autoscaler_tick_interval_seconds", ctl, t, 15)
            om.gauge("autoscaler_paused", ctl, t, 0)
            om.gauge("autoscaler_policy_error", ctl, t, 1 if ctl is CTL_A and 130 <= minute < 132 else 0)
            om.counter("autoscaler_policy_reload_errors_total", ctl, t, 1 if ctl is CTL_A and minute >= 130 else 0)
            om.gauge("autoscaler_info", {**ctl, "exported_instance": "ctl-" + ctl["instance"][0],
                                         "version": "0.1.0", "policy_sha256": "9f2c" * 16}, t, 1)
        lead = CTL_A
        for state in STATES:
            om.gauge("autoscaler_groups", {**lead, "state": state}, t, sum(p == state for p in phases.values()))
        om.gauge("autoscaler_groups_desired", lead, t, sum(p in ("starting", "ready") for p in phases.values()))
        om.gauge("autoscaler_groups_ceiling", lead, t, 3)
        om.gauge("autoscaler_groups_cordoned", lead, t, 0)
        action, reason = "hold", "steady"
        if minute in (40, 100):
            action, reason = "scale_up", "queue_high" if minute == 40 else "forecast_high"
        elif minute in (150, 168):
            action, reason = "scale_down", "surplus"
        elif "starting" in phases.values() or "draining" in phases.values():
            reason = "action_in_flight"
        decisions[(action, reason)] = decisions.get((action, reason), 0) + 1
        for (a, r), n in decisions.items():
            om.counter("autoscaler_decisions_total", {**lead, "action": a, "reason": r}, t, n)
        om.gauge("autoscaler_last_decision_timestamp_seconds", lead, t, t - 1)
        om.gauge("autoscaler_last_decision_timestamp_seconds", CTL_B, t, t0 - 7200)  # led long ago
        tick_obs.append(0.3 if i % 10 == 0 else 0.07)
        om.histogram("autoscaler_tick_duration_seconds", lead, t, TICK_BUCKETS, tick_obs)
        if minute == 155:
            drain_obs.append(300.0)
        if minute == 172:
            drain_obs.append(240.0)
            cut = 2
        om.histogram("autoscaler_drain_duration_seconds", lead, t, DRAIN_BUCKETS, drain_obs)
        draining_since = [start for g in TIMELINE for start, p in TIMELINE[g] if p == "draining" and phases[g] == "draining"]
        om.gauge("autoscaler_drain_oldest_age_seconds", lead, t, (minute - min(draining_since)) * 60 if draining_since else 0)
        om.gauge("autoscaler_drain_timeout_seconds", lead, t, 600)
        om.counter("autoscaler_requests_cut_by_drain_total", lead, t, cut)
        if i % 7 == 0:
            signal_errors[("ttft_p99_s", "stale")] += 1
        if i % 50 == 0:
            signal_errors[("running", "unreachable")] += 1
        for (signal, kind), n in signal_errors.items():
            om.counter("autoscaler_signal_errors_total", {**lead, "signal": signal, "kind": kind}, t, n)
        # 2 nodes per active group; the saving: the nodes that are off, at (240 - 3) W x PUE 1.3 x 0.15/kWh
        node_hours += 2 * active * STEP_S / 3600
        saving += 2 * (3 - active) * (240 - 3) * 1.3 / 1000 * 0.15 * STEP_S / 3600
        om.gauge("autoscaler_node_hours_total", lead, t, node_hours)
        om.gauge("autoscaler_saving_variable_cost", {**lead, "currency": "USD"}, t, saving)
        load = 6 + 5 * math.sin(minute / 30)
        om.gauge("autoscaler_fleet_requests", {**lead, "kind": "running"}, t, round(load))
        om.gauge("autoscaler_fleet_requests", {**lead, "kind": "queued"}, t, max(0, round(load) - 6 * active))
        om.gauge("autoscaler_slo_ttft_seconds", lead, t, 1.5 + math.sin(minute / 20))
        om.gauge("autoscaler_slo_ttft_target_seconds", lead, t, 3.0)
        # the workers (node-rank 0 of each group) while their server is up, and the gateway
        for g, address in WORKERS.items():
            wl = {"job": "sglang-workers", "instance": address, "model_name": "MiniMaxAI/MiniMax-M2.5"}
            up = phases[g] in ("ready", "draining")
            om.gauge("smg_worker_health", {"job": "sglang-gateway", "instance": "10.0.0.2:29000",
                                           "worker": f"http://{address}"}, t, 1 if phases[g] == "ready" else -1)
            if not up:
                continue
            running = min(6, round(load / max(1, active)))
            finished[g] += running
            ttft_obs[g].append(0.4 + 0.1 * (i % 5))
            om.gauge("sglang:num_running_reqs", wl, t, running)
            om.gauge("sglang:num_queue_reqs", wl, t, 0)
            om.gauge("sglang:token_usage", wl, t, running / 6 * 0.8)
            om.counter("sglang:num_requests_total", wl, t, finished[g])
            om.histogram("sglang:time_to_first_token_seconds", wl, t, TTFT_BUCKETS, ttft_obs[g])
    return om.text()


@pytest.fixture(scope="module")
def dashboard_prometheus(tmp_path_factory):
    """One Prometheus for the module, on the backfilled history (no scrape targets)."""
    prom = promsupport.prepare(tmp_path_factory.mktemp("dashboard-prom"), (), history=dashboard_history())
    try:
        prom.start(wait_for_targets=False)
        yield prom
    finally:
        prom.close()


def query_range(prom, expr: str) -> list[dict]:
    """What a Grafana time-series panel asks for: the last hour of the history, a point a minute."""
    response = httpx.get(f"{prom.url}/api/v1/query_range",
                         params={"query": expr, "start": T_END - 3600, "end": T_END, "step": 60}, timeout=10)
    assert response.status_code == 200, (expr, response.text)
    return response.json()["data"]["result"]


def test_dashboard_is_the_plain_model():
    d = dashboard()
    assert "rows" not in d and d["panels"]
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    for p in d["panels"]:
        assert p["targets"] and all(t["expr"].strip() for t in p["targets"]), p["title"]
        grid = p["gridPos"]
        assert grid["x"] + grid["w"] <= 24, p["title"]
    titles = " ".join(p["title"].lower() for p in d["panels"])
    for subject in ("load", "groups by state", "desired vs ceiling", "decisions by reason", "drain duration",
                    "saving", "node-hours", "leader"):
        assert subject in titles, subject


@pytest.mark.parametrize("title, expr", dashboard_targets(), ids=[t for t, _ in dashboard_targets()])
def test_dashboard_query_returns_data(dashboard_prometheus, title, expr):
    result = query_range(dashboard_prometheus, expr)
    points = [float(v) for series in result for _, v in series["values"]]
    assert any(math.isfinite(p) for p in points), f"{title}: {expr!r} returned no data"


def test_dashboard_check_can_fail(dashboard_prometheus):
    """A misspelt metric returns nothing from the same Prometheus, and the leader filter keeps only a."""
    assert query_range(dashboard_prometheus, "autoscaler_group_desired") == []
    led = query_range(dashboard_prometheus, "autoscaler_groups_desired and on(job, instance) (autoscaler_leader == 1)")
    assert [s["metric"]["instance"] for s in led] == ["a:9108"]


def test_shipped_config_and_rules_on_two_real_controllers(tmp_path, pg_url):
    """The Deployment's set-up: two `autoscaler run` on one PostgreSQL database, configured by the
    environment only, scraped by a real Prometheus running deploy/prometheus.yml's `autoscaler`
    job with deploy/alerts.rules.yml (targets pointed here, 1 s intervals). One leads, the other
    stands by and is healthy (/healthz 200: the liveness probe leaves it alone); every rule
    evaluates without error; the signals alert goes pending on the leader's real problems (its
    Prometheus is unreachable) while no-leader, several-leaders, no-decision, instance-down and
    drain-stuck stay inactive; the leader-filtered groups query returns the leader's six states
    only; every dashboard query is accepted."""
    from tests.support.procs import Proc, wait_http

    policy = yaml.safe_load((ROOT / "policies/default.yaml").read_text())
    policy["scaling"]["tick_interval_s"] = 1
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
    ports, unused = [free_port(), free_port()], free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AUTOSCALER_")}
    procs = []
    prom = None
    try:
        for port in ports:
            env = {**clean, "AUTOSCALER_LISTEN": f"127.0.0.1:{port}", "AUTOSCALER_DATABASE_URL": pg_url,
                   "AUTOSCALER_PROMETHEUS_URL": f"http://127.0.0.1:{unused}",
                   "AUTOSCALER_GATEWAY_URL": f"http://127.0.0.1:{unused}"}
            procs.append(Proc([sys.executable, "-m", "autoscaler", "run", "--policy", str(tmp_path / "policy.yaml")],
                              tmp_path / f"run-{port}.log", env=env, cwd=tmp_path))
        for port, proc in zip(ports, procs):
            wait_http(f"http://127.0.0.1:{port}/healthz", 30.0, proc=proc)
        config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
        (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "autoscaler"]
        targets = [f"127.0.0.1:{port}" for port in ports]
        job["static_configs"] = [{"targets": targets}]
        config["scrape_configs"] = [job]
        config["global"] = {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
        config["rule_files"] = [str(DEPLOY / "alerts.rules.yml")]
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        prom = promsupport.Prometheus(port=free_port(), data_dir=tmp_path / "data", config_path=tmp_path / "prometheus.yml",
                                      log_path=tmp_path / "prometheus.log", targets=tuple(targets))
        prom.start()
        prom.wait_for('ALERTS{alertname="AutoscalerSignalsFailing"}', lambda r: len(r) > 0, timeout_s=30)
        leaders = {s["metric"]["instance"]: float(s["value"][1]) for s in prom.query("autoscaler_leader")}
        assert sorted(leaders.values()) == [0.0, 1.0], leaders
        (leader,) = [i for i, v in leaders.items() if v == 1.0]
        for port in ports:  # the standby too: healthy, not leading
            assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
        rules = httpx.get(f"{prom.url}/api/v1/rules", timeout=5).json()["data"]["groups"][0]["rules"]
        assert {r["name"] for r in rules} == EXPECTED_ALERTS
        assert [(r["name"], r["lastError"]) for r in rules if r["health"] != "ok"] == []
        states = {r["name"]: r["state"] for r in rules}
        assert states["AutoscalerSignalsFailing"] == "pending"
        pending = prom.query('ALERTS{alertname="AutoscalerSignalsFailing"}')
        assert {a["metric"]["instance"] for a in pending} == {leader}  # the standby's view is not an alert
        for quiet in ("AutoscalerNoLeader", "AutoscalerSeveralLeaders", "AutoscalerNoDecision",
                      "AutoscalerInstanceDown", "AutoscalerDrainStuck"):
            assert states[quiet] == "inactive", (quiet, states)
        for title, expr in dashboard_targets():
            answer = httpx.get(f"{prom.url}/api/v1/query", params={"query": expr}, timeout=5)
            assert answer.status_code == 200, (title, answer.text)
        led = prom.query("autoscaler_groups and on(job, instance) (autoscaler_leader == 1)")
        assert sorted(s["metric"]["state"] for s in led) == sorted(STATES)
        assert {(s["metric"]["job"], s["metric"]["instance"]) for s in led} == {("autoscaler", leader)}
    finally:
        if prom is not None:
            prom.close()
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            finally:
                proc.kill()


# ----------------------------------------------------------------------------------- kubernetes
def k8s_documents() -> list[tuple[str, dict]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                docs.append((path.name, doc))
    return docs


def k8s(kind: str) -> dict:
    found = [d for _, d in k8s_documents() if d["kind"] == kind]
    assert len(found) == 1, kind
    return found[0]


def test_k8s_documents_are_plain_and_complete():
    docs = k8s_documents()
    assert {d["kind"] for _, d in docs} >= {"Namespace", "Deployment", "ConfigMap", "Secret", "Service"}
    namespace = k8s("Namespace")["metadata"]["name"]
    for name, d in docs:
        assert d.get("apiVersion") and d.get("kind") and d.get("metadata", {}).get("name"), name
        if d["kind"] != "Namespace":
            assert d["metadata"].get("namespace") == namespace, name
    for path in K8S.glob("*.yaml"):
        assert "{{" not in path.read_text(), f"{path.name}: templating"


def test_k8s_deployment_two_replicas_probes_and_security():
    dep = k8s("Deployment")
    assert dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]["spec"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert pod["terminationGracePeriodSeconds"] > 30  # SIGTERM: exit within 30 s
    (container,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http-metrics": 9108}
    liveness, readiness = container["livenessProbe"], container["readinessProbe"]
    assert liveness["httpGet"]["path"] == "/healthz"
    # standbys are healthy, not leaders: no probe asks who leads
    for probe in (liveness, readiness, container.get("startupProbe", {})):
        assert probe.get("httpGet", {}).get("path", "/healthz") == "/healthz"
    sc, psc = container["securityContext"], pod["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] != 0
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    svc = k8s("Service")
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(9108, "http-metrics")]


def deployment_env() -> dict[str, str]:
    """The container's environment with each secretKeyRef resolved from the Secret manifest."""
    container = k8s("Deployment")["spec"]["template"]["spec"]["containers"][0]
    secret = k8s("Secret")
    env = {}
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            assert ref["name"] == secret["metadata"]["name"], item["name"]
            env[item["name"]] = secret["stringData"][ref["key"]]
    return env


def check_setting_names(names: set[str]) -> None:
    """Every AUTOSCALER_* name is one the code reads (a literal in autoscaler/, or NAME_FILE of a secret)."""
    source = "\n".join(p.read_text() for p in (ROOT / "autoscaler").rglob("*.py"))
    known = set(re.findall(r'"(AUTOSCALER_[A-Z_]+)"', source))
    known |= {n + "_FILE" for n in known}
    missing = sorted(n for n in names if n.startswith("AUTOSCALER_") and n not in known)
    assert missing == [], f"not settings the controller reads: {missing}"


def test_k8s_deployment_env_is_what_the_settings_read():
    env = deployment_env()
    settings = load_settings(env=env)
    assert settings.database_url == k8s("Secret")["stringData"]["database-url"]
    assert settings.database_url.startswith("postgresql://")  # two replicas lead through PostgreSQL
    assert settings.gateway_api_key == k8s("Secret")["stringData"]["gateway-api-key"]
    assert settings.listen == "0.0.0.0:9108"  # probes and the Service reach the pod's address
    assert settings.prometheus_url == env["AUTOSCALER_PROMETHEUS_URL"]
    assert settings.gateway_url == env["AUTOSCALER_GATEWAY_URL"]
    container = k8s("Deployment")["spec"]["template"]["spec"]["containers"][0]
    from_secret = {i["name"] for i in container["env"] if "valueFrom" in i}
    assert from_secret >= {"AUTOSCALER_DATABASE_URL", "AUTOSCALER_GATEWAY_API_KEY", "AUTOSCALER_STATUS_TOKEN"}
    check_setting_names(set(env))


def test_k8s_secret_holds_placeholders_only():
    data = k8s("Secret")["stringData"]
    assert set(data) == {"database-url", "gateway-api-key", "status-token"}
    assert all("CHANGE-ME" in v for v in data.values())


def test_k8s_configmap_policy_is_valid_and_mounted_where_run_reads_it():
    cm = k8s("ConfigMap")
    (key,) = cm["data"]
    policy = parse_policy(cm["data"][key], source=f"deploy/k8s/configmap-policy.yaml:data.{key}")
    assert len(policy.fleet.groups) == 3 and policy.fleet.ceiling_groups == 3
    # its header says it is policies/default.yaml: keep that true when the default changes
    assert yaml.safe_load(cm["data"][key]) == yaml.safe_load((ROOT / "policies/default.yaml").read_text())
    pod = k8s("Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    volume = next(v for v in pod["volumes"] if v.get("configMap", {}).get("name") == cm["metadata"]["name"])
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
    assert "subPath" not in mount  # a subPath mount never sees ConfigMap updates
    args = container["args"]
    assert args[args.index("--policy") + 1] == f"{mount['mountPath']}/{key}"


def test_k8s_configmap_policy_check_can_fail():
    """The loader rejects a broken copy of the same policy (the check above can fail)."""
    from autoscaler.policy import PolicyInvalid

    text = k8s("ConfigMap")["data"]["policy.yaml"].replace("floor_groups: 1", "floor_groups: 4")
    with pytest.raises(PolicyInvalid, match="floor_groups"):
        parse_policy(text, source="x.yaml")
