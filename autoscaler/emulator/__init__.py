"""See the package docstring in autoscaler/__init__.py."""
