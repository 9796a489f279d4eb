"""Optional integrations; each submodule needs its own third-party package."""
