"""Autotuning over block sizes (search, cost models, persistent cache): see DESIGN.md §4.

Today the config space comes from each backend (`kernel.configs(...)`); the search, the
evaluators and the cache land with the autotuning issue.
"""
