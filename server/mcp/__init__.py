"""MCP: the `POST /mcp` endpoint, its tool table, JSON-RPC framing, and the stdio bridge."""
