"""Goldilocks engine."""
