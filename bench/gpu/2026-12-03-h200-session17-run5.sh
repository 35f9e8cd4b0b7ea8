#!/usr/bin/env bash
# Session 17, call 5 (nvidia-h200): run2.sh again, with moe_down_row loading every slot's
# activation chunk at once from global memory before its products (call 4: calls 2 and 3
# issued them one slot at a time).
RUN=run5 exec bash "$(dirname "$0")/2026-12-03-h200-session17-run2.sh"
