"""A small Docker Engine API client over a unix socket, with typed errors."""
