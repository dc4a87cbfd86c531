"""Plumbing every layer may use: atomic file writes, bounded reading of user files, text escaping
per destination, the rich console.

Nothing here knows about models, plans or GPUs; it imports nothing from the rest of ``core``.
"""
