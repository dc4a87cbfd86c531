"""Gemma 2 and Gemma 3 (placeholder: filled in below)."""
