"""Test helpers shipped with hbtest (used by its own tests and by labs writing drivers)."""

from .scripted import Block, Recorder, ScriptedInstrument, Silent, Step, decode_block

__all__ = ["ScriptedInstrument", "Step", "Block", "Silent", "Recorder", "decode_block"]
