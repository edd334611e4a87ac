"""`python -m squall_operator`: the `squall` command."""

from squall_operator.cli import app

if __name__ == "__main__":
    app(prog_name="squall")
