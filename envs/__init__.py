"""Shipped scenario specs (YAML), installed as ``llmsched_gym.scenarios.specs``."""
