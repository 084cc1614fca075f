#!/bin/bash
set -e
vcheck ok > "$ANSWER_FILE"
