"""The YAML scaling policy ops edit: strict models (``model``) and the loader (``loader``)."""

from autoscaler.policy.loader import LoadedPolicy, PolicyInvalid, load_policy, parse_policy
from autoscaler.policy.model import Policy

__all__ = ["LoadedPolicy", "Policy", "PolicyInvalid", "load_policy", "parse_policy"]
