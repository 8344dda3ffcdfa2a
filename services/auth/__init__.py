"""The auth service: authentication (who is calling) and authorization (may they do it)."""
