"""The read lanes over one context and their diagnostics (explain, walks, the semantic tier)."""
