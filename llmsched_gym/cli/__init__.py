"""The ``llmsched-gym`` command line."""
