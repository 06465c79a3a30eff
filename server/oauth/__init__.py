"""OAuth 2.1 for remote MCP clients: a minimal authorization server that delegates a configured API key.

Mounted only with TAGURU_PUBLIC_URL. `tokens.py` holds the constants and the credential material,
`clients.py` the registration checks, `grants.py` the grant store, `persist.py` where the store is kept,
`pages.py` the consent pages, `routes.py` the six routes, and `gate.py` what a token opens.
"""
