#!/bin/bash
echo release
