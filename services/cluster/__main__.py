"""`python -m services.cluster`: the `apiary` command (cli.py) without the installed script."""
from .cli import main

main()
