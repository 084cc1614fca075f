#!/bin/bash
echo hi > /app/answer.txt
