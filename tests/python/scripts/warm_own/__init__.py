"""The program's own package, beside its script: never imported by the fork server."""
