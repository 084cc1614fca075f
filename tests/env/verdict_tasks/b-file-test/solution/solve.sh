#!/bin/bash
echo COQ > /app/answer.txt
