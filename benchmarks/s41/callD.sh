#!/usr/bin/env bash
# Session 41 call D (one H200): callC.sh again on main's final tree (after d7aad72: the CUDA load names a corrupt
# matrix as the CPU does).
exec bash "$(dirname "$0")/callC.sh"
