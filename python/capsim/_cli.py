"""The ``capsim`` command the package installs: the command line itself, run by the extension."""

import signal
import sys

from . import _capsim


def main() -> None:
    # Ctrl-C and a closed pipe end the command as they end the binary (the defaults: the Rust code
    # runs without Python's handlers getting a chance).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.stdout.flush()
    sys.exit(_capsim.main(["capsim", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
