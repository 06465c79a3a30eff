"""Clients of outbound providers (reranker, chat completions) and their one retry policy."""
