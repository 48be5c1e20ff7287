#!/usr/bin/env python3
"""A torchrun-style launcher: starts the training worker with the same
interpreter (subprocess's defaults: close_fds=True) and waits for it."""
import argparse
import os
import subprocess
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    a = parser.parse_args()
    env = dict(os.environ, LOCAL_RANK="0", WORLD_SIZE="1")
    proc = subprocess.run([sys.executable, a.script] + a.args, env=env)
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
