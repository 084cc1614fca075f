#!/bin/bash
printf "echo ok\n" > /app/run.sh
