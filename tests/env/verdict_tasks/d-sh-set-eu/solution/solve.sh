#!/bin/bash
echo tammy > /app/answer.txt
