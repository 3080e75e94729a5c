"""Fakes built from the real protocols, for hardware this machine lacks."""
