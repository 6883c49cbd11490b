"""Search backends: local ZIM web, live Serper-compatible API with HTTP fetch, cache (docs/contracts.md "Search backend")."""
