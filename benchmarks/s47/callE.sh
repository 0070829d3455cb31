#!/usr/bin/env bash
# Session 47 call E (one H200): test_hostile on the GPU after its threads test gained a generation under one shared
# grammar (four threads on one cuda model, against the single-threaded runs).
make -j"$(nproc)" build/impl.o build/tests/test_hostile build/bitnet > /tmp/b.log 2>&1 || { tail -20 /tmp/b.log; exit 1; }; BITNET_REQUIRE_GPU=1 build/tests/test_hostile 2>&1 | tee "$OUT/callE-test_hostile.txt" | grep -E "threads|passed|FAIL"
