"""The Prometheus metrics citemon exports (DESIGN.md's names), and the HTTP server for them."""
