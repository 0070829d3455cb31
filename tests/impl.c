/* The implementation, compiled once per build configuration and linked into every test, so the
   large header is not recompiled for each test file (the tests include bitnet.h alone). */
#define BITNET_IMPLEMENTATION
#include "../bitnet.h"
