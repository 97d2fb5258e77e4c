// The system libpq for the benchmark's raw baseline (apt: libpq-dev; pkg-config: libpq).
#include <libpq-fe.h>
