"""Build: a spec's many variants compiled in parallel (worker processes or Ray), reused, rebuilt, packed into an archive."""
