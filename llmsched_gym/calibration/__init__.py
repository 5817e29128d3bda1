"""Calibration tooling: measuring steps, fitting cost profiles to them, validating the fits.

* :mod:`~llmsched_gym.calibration.torch_profile` measures a model's operators and whole steps
  with PyTorch (GPU or CPU); :mod:`~llmsched_gym.calibration.torch_fit` fits and reports the
  profile from those measurements (``llmsched-gym calibrate --backend torch`` runs both);
* :mod:`~llmsched_gym.calibration.vidur_fit` composes step times from Vidur's operator tables and
  fits the shipped ``vidur:*`` profiles (``calibration/fit_vidur.py``);
* :mod:`~llmsched_gym.calibration.linearfit` is the shared fitting core (batch designs, NNLS,
  the linear, extended and piecewise fits, ``linearize`` of any cost model);
* :mod:`~llmsched_gym.calibration.forms` compares candidate profile forms and
  :mod:`~llmsched_gym.calibration.trajectory` validates a profile on the steps a trace produces.

The profiles themselves, and the models that price them, are in :mod:`llmsched_gym.cost`.
"""
