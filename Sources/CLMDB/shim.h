// The system LMDB (apt: liblmdb-dev; pkg-config: lmdb).
#include <lmdb.h>
