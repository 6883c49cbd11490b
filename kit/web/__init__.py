"""Search backends: local ZIM web, live Serper-compatible API with HTTP fetch, cache (DESIGN.md "Search backend")."""
