"""Renderers: the typed results of the store's read lanes, walks, audits and explanations as wire shapes."""
