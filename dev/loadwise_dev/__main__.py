"""`python -m loadwise_dev`: the same as `loadwise-dev` (cli.py)."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
