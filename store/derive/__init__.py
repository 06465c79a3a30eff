"""Derived analyses and maintenance over a context: audits, communities, compaction, embedding refresh."""
