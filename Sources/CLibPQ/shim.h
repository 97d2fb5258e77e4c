// The system libpq, PostgreSQL's C client (apt: libpq-dev; pkg-config: libpq).
#include <libpq-fe.h>
