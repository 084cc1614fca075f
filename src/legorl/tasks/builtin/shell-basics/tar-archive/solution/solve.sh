#!/bin/bash
# Oracle for shell-basics/tar-archive.
set -euo pipefail
cd /app
cd /app && tar -cf project.tar project
