#!/usr/bin/env bash
# Session 17, call 3 (nvidia-h200): run2.sh again, with moe_down_row reading its activations
# from global memory through the read-only path (__ldg; call 2's plain loads lost).
RUN=run3 exec bash "$(dirname "$0")/2026-12-03-h200-session17-run2.sh"
