"""`python -m capsnet COMMAND [options]`: the package's command-line tools (`capsnet.cli.COMMANDS`).

python -m capsnet train --dataset mnist --epochs 10
python -m capsnet evaluate checkpoints/mnist.safetensors
python -m capsnet COMMAND --help
"""

from __future__ import annotations

import importlib
import sys

from capsnet.cli import COMMANDS
from capsnet.errors import run_cli


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {about}" for name, (_, about) in COMMANDS.items()]
    return "usage: python -m capsnet COMMAND [options]  (COMMAND --help for its options)\n\ncommands:\n" + "\n".join(
        lines
    )


def _usage(asked: bool) -> int:
    print(usage())
    return 0 if asked else 2


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        return run_cli(lambda: _usage(bool(argv)), "python -m capsnet")  # a full stdout is one line, as a command's
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"python -m capsnet: error: no command {name!r}; the commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    return importlib.import_module(COMMANDS[name][0]).main(rest)


if __name__ == "__main__":
    sys.exit(main())
