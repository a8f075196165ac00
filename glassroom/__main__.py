"""`python -m glassroom ...` (and `torchrun -m glassroom ...`) runs the command line."""

from glassroom.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
