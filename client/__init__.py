"""The client side of a taguru server: one HTTP client for every command-line tool."""
