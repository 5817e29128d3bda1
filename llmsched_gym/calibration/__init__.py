"""Calibration tooling: validating cost profiles against measured steps on a device."""
