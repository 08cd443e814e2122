"""Developer-only tools (test harnesses, the demo's helpers): never imported by the product's runtime path."""
