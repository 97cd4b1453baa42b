#!/usr/bin/env bash
# scripts/python_of.sh NAME: the Python interpreter NAME stands for, printed. NAME is a command
# ("python3", "python3.11", a path) or a version that pyenv installed ("3.11": the newest
# ~/.pyenv/versions/3.11*/bin/python3). Prints NAME itself when neither is found, and exits 1.
# The wheel and install scripts take PYTHON in either form; this is their one lookup.
name=${1:?usage: scripts/python_of.sh NAME}
if command -v "$name" >/dev/null; then echo "$name"; exit 0; fi
found=
for p in "$HOME"/.pyenv/versions/"$name"*/bin/python3; do [ -x "$p" ] && found=$p; done
if [ -n "$found" ]; then echo "$found"; exit 0; fi
echo "$name"
exit 1
