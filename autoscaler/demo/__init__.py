"""``autoscaler demo``: the whole product, live, on this machine, in a few minutes.

Real processes throughout: the SGLang Model Gateway (``smg`` from ``sglang-router`` 0.3.2), three
emulated TP=2 groups started and stopped by the controller's ``local`` actuator, Debian's
Prometheus scraping them when it is installed (else the controller reads the workers' /metrics
directly and says so), and ``autoscaler run`` under ``policies/demo.yaml`` (time compressed).
A day of real traffic (ServeGen ``m-small``, shipped in ``trace/``) is replayed through the
gateway as streaming chat, sped up to the load phase and rescaled to the fleet, so demand rises
past two groups and falls back. The live view shows the groups, the load and each decision with
its reason; the end shows the cost report of the demo's live run and a one-line summary.

Everything it starts is stopped on exit, Ctrl-C included; every port is chosen free, so two demos
can run at once. Its policy and trace are package data: it runs from any folder.
"""

from pathlib import Path

DEMO_DIR = Path(__file__).resolve().parent
DEMO_POLICY = DEMO_DIR / "demo.yaml"
DEMO_TRACE = DEMO_DIR / "trace"
