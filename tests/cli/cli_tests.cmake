# CLI tests (written with adapters/cli)
