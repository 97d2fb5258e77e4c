// The system LMDB for the benchmark's raw baseline (apt: liblmdb-dev; pkg-config: lmdb).
#include <lmdb.h>
