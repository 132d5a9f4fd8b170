"""Rig kind ``helic``: a HELIC-DAQ protocol v3 device (docs/helic.md)."""
