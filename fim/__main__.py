"""`python -m fim`: the `fim` command, for images and virtualenvs without its script."""

from fim.cli import main

if __name__ == "__main__":
    main()
